"""A stand-in for pyew.runtime's CUDA calls on the CPU: "device" memory is host memory, copies are
memmoves, streams run everything at once. It lets the CPU tests drive the transfer engine's
chunking, threading and error handling; the GPU tests cover the real thing."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from pyew import pinned
from pyew import runtime as rt
from pyew.errors import CudaError


class FakeCuda:
    def __init__(self):
        self.lock = threading.Lock()
        self.device_blocks: dict[int, ctypes.Array] = {}
        self.host_blocks: dict[int, ctypes.Array] = {}
        self.registered: set[int] = set()
        self.registered_ranges: dict[int, int] = {}
        self.register_calls: list[tuple[int, int]] = []
        self.copy_log: list[tuple[int, int, int]] = []     # (dst, src, bytes) of every copy
        self.copies = 0
        self.fail_after_copies: int | None = None
        self.owner: dict[int, int] = {}         # device pointer -> the GPU it was allocated on

    # device memory
    def malloc(self, nbytes, stream):
        if nbytes == 0:
            return 0
        buf = (ctypes.c_uint8 * nbytes)()
        ptr = ctypes.addressof(buf)
        with self.lock:
            self.device_blocks[ptr] = buf
            self.owner[ptr] = getattr(stream, "ordinal", 0)
        return ptr

    def free(self, ptr, stream, nbytes=0):
        if ptr:
            with self.lock:
                del self.device_blocks[ptr]
                self.owner.pop(ptr, None)

    def host_alloc(self, nbytes):
        """Page-aligned whole pages, as cudaHostAlloc gives."""
        size = -(-nbytes // 4096) * 4096
        buf = (ctypes.c_uint8 * (size + 4096))()
        ptr = -(-ctypes.addressof(buf) // 4096) * 4096
        with self.lock:
            self.host_blocks[ptr] = (ctypes.c_uint8 * size).from_buffer(buf, ptr - ctypes.addressof(buf))
        return ptr

    def host_register(self, ptr, nbytes):
        """CUDA refuses memory that is page-locked already, in any of the range's pages."""
        page = 4096
        lo, hi = ptr // page * page, -(-(ptr + nbytes) // page) * page
        with self.lock:
            locked = [(p, len(b)) for p, b in self.host_blocks.items()] + list(self.registered_ranges.items())
        if any(p < hi and lo < p + n for p, n in locked):
            raise CudaError(712, "cudaErrorHostMemoryAlreadyRegistered", "cudaHostRegister")
        self.register_calls.append((ptr, nbytes))
        self.registered.add(ptr)
        self.registered_ranges[ptr] = nbytes

    def host_unregister(self, ptr):
        self.registered.discard(ptr)
        self.registered_ranges.pop(ptr, None)

    def host_pinned(self, ptr):
        """Whether ptr lies in memory host_alloc gave or host_register locked."""
        with self.lock:
            return any(p <= ptr < p + len(b) for p, b in self.host_blocks.items()) or \
                any(p <= ptr < p + n for p, n in self.registered_ranges.items())

    def host_free(self, ptr):
        with self.lock:
            self.host_blocks.pop(ptr, None)

    def copy(self, dst, src, nbytes, stream=None):
        with self.lock:
            self.copies += 1
            self.copy_log.append((dst, src, nbytes))
            if self.fail_after_copies is not None and self.copies > self.fail_after_copies:
                raise rt.CudaError(999, "cudaErrorFake", "cudaMemcpyAsync (fake)")
        ctypes.memmove(dst, src, nbytes)

    def device_bytes(self) -> int:
        return sum(len(b) for b in self.device_blocks.values())

    def pinned_bytes(self) -> int:
        return sum(len(b) for b in self.host_blocks.values())


class _Event:
    def __init__(self, timing=False):
        pass

    def record(self, stream_cu):
        pass

    def synchronize(self):
        pass

    def done(self):
        return True


def one_gpu(monkeypatch, props) -> None:
    """Make the runtime see exactly one GPU with these attributes."""
    monkeypatch.setattr(rt, "_count", 1)
    monkeypatch.setattr(rt, "_several", False)
    monkeypatch.setattr(rt, "_props", {0: props})
    monkeypatch.delattr(rt.DEFAULT_STREAM, "dims", raising=False)


_installed: list[FakeCuda] = []


def disarm() -> None:
    """Detach the stand-in's memory from everything that outlives its test. A DeviceArray made over
    the stand-in can live on (a failed test's traceback holds its frames); when it dies, the real
    runtime's free would get a host address, and a small one would be handed out again as GPU
    memory. So its pointer is dropped here, and any such pointer kept for reuse is forgotten."""
    if not _installed:
        return
    import gc

    from pyew.array import Buffer
    fake = set()
    for f in _installed:
        fake.update(f.device_blocks)
    for obj in gc.get_objects():
        if type(obj) is Buffer and obj.ptr in fake:
            obj.ptr = 0
    for s in list(rt._defaults.values()):
        for kept in s.reuse.values():
            kept[:] = [p for p in kept if p not in fake]
    _installed.clear()


def install(monkeypatch) -> FakeCuda:
    """Replace the runtime's CUDA calls with the fake; returns it for inspection."""
    f = FakeCuda()
    _installed.append(f)
    one_gpu(monkeypatch, rt.DeviceProps(0, "fake", (9, 0), 4, 2048, 1 << 30, 1 << 20, None))
    monkeypatch.setattr(rt, "malloc", f.malloc)
    monkeypatch.setattr(rt, "free", f.free)
    monkeypatch.setattr(rt, "host_alloc", f.host_alloc)
    monkeypatch.setattr(rt, "host_free", f.host_free)
    monkeypatch.setattr(rt, "host_register", f.host_register)
    monkeypatch.setattr(rt, "host_unregister", f.host_unregister)
    monkeypatch.setattr(rt, "copy_htod", lambda d, s, n, st: f.copy(d, s, n))
    monkeypatch.setattr(rt, "copy_dtoh", lambda d, s, n, st: f.copy(d, s, n))
    monkeypatch.setattr(rt, "copy_dtod", lambda d, s, n, st: f.copy(d, s, n))
    monkeypatch.setattr(rt, "memset", lambda p, v, n, st: ctypes.memset(p, v, n))
    counter = iter(range(1000, 10**9))
    monkeypatch.setattr(rt, "new_stream", lambda ordinal: next(counter))
    monkeypatch.setattr(rt, "destroy_stream", lambda s: None)
    monkeypatch.setattr(rt, "stream_synchronize", lambda s: None)
    monkeypatch.setattr(rt, "wait_event", lambda s, e: None)
    monkeypatch.setattr(rt, "stream_wait", lambda a, b: None)
    monkeypatch.setattr(rt, "Event", _Event)
    monkeypatch.setattr(rt.DEFAULT_STREAM, "cu", 0, raising=False)
    monkeypatch.setattr(rt, "_constants", {})       # its slots live in this fake's memory
    monkeypatch.setattr(pinned, "_pool", pinned._Pool())    # and so do the pinned blocks
    monkeypatch.setattr(rt, "host_pinned", f.host_pinned)
    return f


def device_view(ptr: int, dtype, shape) -> np.ndarray:
    """A numpy view of fake device memory."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    raw = (ctypes.c_uint8 * (n * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)


class FakeRuntimeAPI:
    """The few cuda.bindings.runtime calls pyew makes to pick a GPU, for a simulated machine of
    several GPUs: a current device per thread, and pointer attributes from FakeCuda's allocations."""

    def __init__(self, cuda: FakeCuda, count: int):
        self.cuda = cuda
        self.count = count
        self.local = threading.local()
        self.switches = 0

    def current(self) -> int:
        return getattr(self.local, "device", 0)

    def cudaGetDevice(self):
        return (0, self.current())

    def cudaSetDevice(self, i):
        assert 0 <= i < self.count, i
        self.switches += 1
        self.local.device = i
        return (0,)

    class cudaMemoryType:
        cudaMemoryTypeDevice, cudaMemoryTypeManaged, cudaMemoryTypeUnregistered = 2, 3, 0

    def cudaPointerGetAttributes(self, ptr):
        known = ptr in self.cuda.owner

        class Attrs:
            device = self.cuda.owner[ptr] if known else -2
            type = 2 if known else 0
        return (0, Attrs())

    def cudaDeviceCanAccessPeer(self, i, j):
        return (0, 1)

    @staticmethod
    def cudaStream_t(handle):
        return handle


def install_gpus(monkeypatch, count: int) -> tuple[FakeCuda, FakeRuntimeAPI]:
    """The fake runtime of install(), on a simulated machine of `count` GPUs."""
    f = install(monkeypatch)
    api = FakeRuntimeAPI(f, count)
    monkeypatch.setattr(rt, "_defaults", {i: rt._DefaultStream(i) for i in range(count)})
    monkeypatch.setattr(rt, "_rt", api)
    monkeypatch.setattr(rt, "_count", count)
    monkeypatch.setattr(rt, "_several", count > 1)
    monkeypatch.setattr(rt, "_props", {i: rt.DeviceProps(i, f"fake {i}", (9, 0), 4, 2048, 1 << 30, 1 << 20, None)
                                       for i in range(count)})
    monkeypatch.setattr(rt, "copy_peer", lambda d, dj, s, si, n, st: f.copy(d, s, n))
    for d in rt._defaults.values():
        d.cu = 0
    return f, api
