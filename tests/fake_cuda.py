"""A stand-in for pyew.runtime's CUDA calls on the CPU: "device" memory is host memory, copies are
memmoves, streams run everything at once. It lets the CPU tests drive the transfer engine's
chunking, threading and error handling; the GPU tests cover the real thing."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from pyew import runtime as rt


class FakeCuda:
    def __init__(self):
        self.lock = threading.Lock()
        self.device_blocks: dict[int, ctypes.Array] = {}
        self.host_blocks: dict[int, ctypes.Array] = {}
        self.registered: set[int] = set()
        self.copies = 0
        self.fail_after_copies: int | None = None

    # device memory
    def malloc(self, nbytes, stream):
        if nbytes == 0:
            return 0
        buf = (ctypes.c_uint8 * nbytes)()
        ptr = ctypes.addressof(buf)
        with self.lock:
            self.device_blocks[ptr] = buf
        return ptr

    def free(self, ptr, stream, nbytes=0):
        if ptr:
            with self.lock:
                del self.device_blocks[ptr]

    def host_alloc(self, nbytes):
        buf = (ctypes.c_uint8 * nbytes)()
        ptr = ctypes.addressof(buf)
        with self.lock:
            self.host_blocks[ptr] = buf
        return ptr

    def host_free(self, ptr):
        with self.lock:
            self.host_blocks.pop(ptr, None)

    def copy(self, dst, src, nbytes, stream=None):
        with self.lock:
            self.copies += 1
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


def install(monkeypatch) -> FakeCuda:
    """Replace the runtime's CUDA calls with the fake; returns it for inspection."""
    f = FakeCuda()
    dev = rt.Device(0, "fake", (9, 0), 4, 2048, 1 << 30, 1 << 20, None)
    monkeypatch.setattr(rt, "_device", dev)
    monkeypatch.setattr(rt, "malloc", f.malloc)
    monkeypatch.setattr(rt, "free", f.free)
    monkeypatch.setattr(rt, "host_alloc", f.host_alloc)
    monkeypatch.setattr(rt, "host_free", f.host_free)
    monkeypatch.setattr(rt, "host_register", lambda ptr, n: f.registered.add(ptr))
    monkeypatch.setattr(rt, "host_unregister", lambda ptr: f.registered.discard(ptr))
    monkeypatch.setattr(rt, "copy_htod", lambda d, s, n, st: f.copy(d, s, n))
    monkeypatch.setattr(rt, "copy_dtoh", lambda d, s, n, st: f.copy(d, s, n))
    monkeypatch.setattr(rt, "copy_dtod", lambda d, s, n, st: f.copy(d, s, n))
    monkeypatch.setattr(rt, "memset", lambda p, v, n, st: ctypes.memset(p, v, n))
    counter = iter(range(1000, 10**9))
    monkeypatch.setattr(rt, "new_stream", lambda: next(counter))
    monkeypatch.setattr(rt, "destroy_stream", lambda s: None)
    monkeypatch.setattr(rt, "stream_synchronize", lambda s: None)
    monkeypatch.setattr(rt, "wait_event", lambda s, e: None)
    monkeypatch.setattr(rt, "stream_wait", lambda a, b: None)
    monkeypatch.setattr(rt, "Event", _Event)
    monkeypatch.setattr(rt.DEFAULT_STREAM, "cu", 0, raising=False)
    return f


def device_view(ptr: int, dtype, shape) -> np.ndarray:
    """A numpy view of fake device memory."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    raw = (ctypes.c_uint8 * (n * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)
