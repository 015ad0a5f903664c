"""A stand-in for the CUDA runtime on the CPU: "device" memory is host memory, copies are memmoves,
streams run everything at once. Each part of pyew's runtime makes its CUDA calls through one
object (devices.cuda, streams.cuda, memory.cuda, pinned.cuda); install() swaps each for the
stand-in below that answers the same calls, and cuda-python's bindings for an object that fails on
use, so a CPU test reaches no CUDA call. It lets the CPU tests drive the runtime's and the transfer
engine's logic, chunking, threading and error handling; the GPU tests cover the real thing."""
from __future__ import annotations

import ctypes
import gc
import itertools
import threading

import numpy as np

from pyew import cudart, devices, memory, pinned, streams, transfer
from pyew import runtime as rt
from pyew.errors import CudaError


class FakeCuda:
    """One simulated machine: its memory, and the four parts' stand-ins over it."""

    def __init__(self, gpus: list[rt.DeviceProps]):
        self.lock = threading.Lock()
        self.device_blocks: dict[int, ctypes.Array] = {}
        self.host_blocks: dict[int, ctypes.Array] = {}
        self.locked: dict[int, int] = {}        # ranges page-locked by "another library"
        self.copy_log: list[tuple[int, int, int]] = []     # (dst, src, bytes) of every copy
        self.copies = 0
        self.fail_after_copies: int | None = None
        self.owner: dict[int, int] = {}         # device pointer -> the GPU it was allocated on
        self.devices, self.streams = FakeDevices(self, gpus), FakeStreams()
        self.memory, self.host = FakeMemory(self), FakeHost(self)

    def malloc(self, nbytes, stream=None, ordinal=None):
        if nbytes == 0:
            return 0
        buf = (ctypes.c_uint8 * nbytes)()
        ptr = ctypes.addressof(buf)
        with self.lock:
            self.device_blocks[ptr] = buf
            self.owner[ptr] = getattr(stream, "ordinal", 0) if ordinal is None else ordinal
        return ptr

    def free(self, ptr, stream=None, nbytes=0):
        if ptr:
            with self.lock:
                del self.device_blocks[ptr]
                self.owner.pop(ptr, None)

    def lock_range(self, ptr, nbytes):
        """Page-lock a range as another library would (cudaHostRegister): host_pinned sees it."""
        self.locked[ptr] = nbytes

    def unlock_range(self, ptr):
        del self.locked[ptr]

    def host_pinned(self, ptr):
        """Whether ptr lies in memory host_alloc gave or lock_range() locked."""
        with self.lock:
            return any(p <= ptr < p + len(b) for p, b in self.host_blocks.items()) or \
                any(p <= ptr < p + n for p, n in self.locked.items())

    def copy(self, dst, src, nbytes, stream=None, kind=None):
        with self.lock:
            self.copies += 1
            self.copy_log.append((dst, src, nbytes))
            if self.fail_after_copies is not None and self.copies > self.fail_after_copies:
                raise CudaError(999, "cudaErrorFake", "cudaMemcpyAsync (fake)")
        ctypes.memmove(dst, src, nbytes)

    def device_bytes(self) -> int:
        return sum(len(b) for b in self.device_blocks.values())

    def pinned_bytes(self) -> int:
        return sum(len(b) for b in self.host_blocks.values())


class FakeDevices:
    """devices.cuda's calls: GPUs with the given attributes, a current device per thread."""

    def __init__(self, cuda: FakeCuda, gpus: list[rt.DeviceProps]):
        self.cuda, self.gpus = cuda, gpus
        self.local = threading.local()
        self.switches = 0

    def count(self):
        return len(self.gpus)

    def open(self, ordinal):
        return self.gpus[ordinal]

    def current(self):
        return getattr(self.local, "device", 0)

    def set_current(self, ordinal):
        assert 0 <= ordinal < len(self.gpus), ordinal
        self.switches += 1
        self.local.device = ordinal

    def synchronize(self):
        pass

    def memory(self):
        return 1 << 20, 1 << 30

    def can_access_peer(self, ordinal, other):
        return True

    def pointer_device(self, ptr):
        return self.cuda.owner.get(ptr, -1)


class FakeStreams:
    """streams.cuda's calls: work runs when it is queued, so there is never anything to wait for.
    `synced` lists the streams waited for."""

    def __init__(self):
        self.handles = itertools.count(1000)
        self.synced: list = []

    def create(self):
        return next(self.handles)

    def handle(self, value):
        return value

    def synchronize(self, stream):
        self.synced.append(stream)

    def event(self, timing):
        return next(self.handles)

    def done(self, event):
        return True

    def elapsed_ms(self, start, end):
        return 0.0

    def destroy(self, stream):
        pass

    def destroy_event(self, event):
        pass

    def record(self, event, stream):
        pass

    def synchronize_event(self, event):
        pass

    def wait(self, stream, event):
        pass


class FakeMemory:
    """memory.cuda's calls over FakeCuda's memory."""

    def __init__(self, cuda: FakeCuda):
        self.cuda = cuda

    def alloc(self, nbytes, stream):
        return self.cuda.malloc(nbytes, ordinal=self.cuda.devices.current())

    def free(self, ptr, stream):
        self.cuda.free(ptr)

    def memset(self, ptr, value, nbytes, stream):
        ctypes.memset(ptr, value, nbytes)

    def copy(self, dst, src, nbytes, stream, kind):
        self.cuda.copy(dst, src, nbytes)

    def copy_peer(self, dst, dst_ordinal, src, src_ordinal, nbytes, stream):
        self.cuda.copy(dst, src, nbytes)

    def pool_usage(self, pool):
        used = self.cuda.device_bytes()
        return {"used": used, "used_peak": used, "reserved": used}

    def reset_pool_peak(self, pool):
        pass

    def trim_pool(self, pool, keep_bytes):
        pass


class FakeHost:
    """pinned.cuda's calls: page-aligned whole pages, as cudaHostAlloc gives."""

    def __init__(self, cuda: FakeCuda):
        self.cuda = cuda

    def alloc(self, nbytes):
        size = -(-nbytes // 4096) * 4096
        buf = (ctypes.c_uint8 * (size + 4096))()
        ptr = -(-ctypes.addressof(buf) // 4096) * 4096
        with self.cuda.lock:
            self.cuda.host_blocks[ptr] = (ctypes.c_uint8 * size).from_buffer(buf, ptr - ctypes.addressof(buf))
        return ptr

    def free(self, ptr):
        with self.cuda.lock:
            self.cuda.host_blocks.pop(ptr, None)

    def pinned(self, ptr):
        return self.cuda.host_pinned(ptr)


class NoCuda:
    """cuda-python's bindings in a CPU test: any use is a test that reached CUDA."""

    def __getattr__(self, name):
        raise AssertionError(f"a CPU test called CUDA ({name}): every CUDA call goes through a runtime part's "
                             "`cuda` object, which tests/fake_cuda.py replaces")


def fake_props(ordinal: int, name: str = "fake") -> rt.DeviceProps:
    return rt.DeviceProps(ordinal, name, (9, 0), 4, 2048, 1 << 30, 1 << 20, None)


_installed: list[FakeCuda] = []


def install(monkeypatch, gpus: list[rt.DeviceProps] | None = None) -> FakeCuda:
    """Replace the runtime's CUDA calls with the stand-in (one GPU unless `gpus` says otherwise);
    returns it for inspection. What the runtime and the transfer engine hold is given back through
    the calls that gave it first."""
    transfer.release()
    for ordinal in list(streams.defaults):
        memory.release_kept(ordinal)
    rt.forget()
    f = FakeCuda(gpus or [fake_props(0)])
    _installed.append(f)
    for part, calls in ((devices, f.devices), (streams, f.streams), (memory, f.memory), (pinned, f.host)):
        monkeypatch.setattr(part, "cuda", calls)
    monkeypatch.setattr(cudart, "api", NoCuda())
    return f


def one_gpu(monkeypatch, props) -> None:
    """Make the runtime see exactly one GPU with these attributes (the stand-in's, installed if it
    is not yet)."""
    fake = devices.cuda if isinstance(devices.cuda, FakeDevices) else install(monkeypatch).devices
    monkeypatch.setattr(fake, "gpus", [props])
    devices.forget()
    streams.forget()


def install_gpus(monkeypatch, count: int) -> tuple[FakeCuda, FakeDevices]:
    """The stand-in of install(), on a simulated machine of `count` GPUs."""
    f = install(monkeypatch, [fake_props(i, f"fake {i}") for i in range(count)])
    return f, f.devices


def disarm() -> None:
    """At the end of a test, while the stand-in is still installed: give back what the transfer
    engine and the runtime hold of its memory, streams and events through it, and make the runtime
    forget the rest. A DeviceArray made over the stand-in can outlive the test (a failed test's
    traceback holds its frames); when it dies, the real runtime's free would get a host address,
    and a small one would be handed out again as GPU memory. So its pointer is dropped here."""
    if not _installed:
        return
    from pyew.array import Buffer
    transfer.release()
    fake = set()
    for f in _installed:
        fake.update(f.device_blocks)
    for obj in gc.get_objects():
        if type(obj) is Buffer and obj.ptr in fake:
            obj.ptr = 0
    for d in streams.defaults.values():      # buffers kept for reuse are the stand-in's memory too
        d.reuse.clear()
        d.held = 0
    rt.forget()
    _installed.clear()


def device_view(ptr: int, dtype, shape) -> np.ndarray:
    """A numpy view of fake device memory."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    raw = (ctypes.c_uint8 * (n * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)
