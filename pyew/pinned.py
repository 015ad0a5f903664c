"""Page-locked host memory: pyew.empty_pinned, the pool that keeps its blocks for reuse (page-locking
takes time in proportion to the size), new numpy results from that pool (for_result), and the CUDA
calls that lock and free host memory (through `cuda`, a CudaHost; the CPU tests swap in a
stand-in). What the pool keeps and its limit: docs/transfer.md, "Page-locked arrays".
"""
from __future__ import annotations

import collections
import contextlib
import math
import os
import sys
import threading

import numpy as np

from . import cudart, devices
from . import dtypes as dt
from .errors import CudaError


class CudaHost(cudart.Calls):
    """The CUDA runtime calls about host memory."""

    def alloc(self, nbytes: int) -> int:
        err, ptr = self.rt.cudaHostAlloc(nbytes, self.rt.cudaHostAllocPortable)
        if int(err) != 0:
            raise CudaError(int(err), cudart.error_name(err), "cudaHostAlloc",
                            f"cannot pin {nbytes} bytes of host memory; lower pyew's pinned budget "
                            "(pyew.set_transfer_limits(pinned_bytes=...))")
        return int(ptr)

    def free(self, ptr: int) -> None:
        if self.rt is not None and not sys.is_finalizing():
            self.rt.cudaFreeHost(ptr)

    def pinned(self, ptr: int) -> bool:
        err, attrs = self.rt.cudaPointerGetAttributes(ptr)
        return int(err) == 0 and attrs.type == self.rt.cudaMemoryType.cudaMemoryTypeHost


cuda = CudaHost()


def host_alloc(nbytes: int) -> int:
    """Page-locked host memory (the DMA engines of every GPU read and write it at full PCIe speed)."""
    devices.check_ordinal(0)            # NoDeviceError, not a CUDA error, without a GPU
    return cuda.alloc(nbytes)


def host_free(ptr: int) -> None:
    if ptr:
        cuda.free(ptr)


def host_pinned(ptr: int) -> bool:
    """Whether host address `ptr` is page-locked memory CUDA knows (cudaHostAlloc'd or registered),
    which the DMA engines can read and write in place."""
    return cuda.pinned(ptr)


_BLOCK = 2 << 20          # larger blocks are rounded up to a multiple of this, so near sizes share


def _block_bytes(nbytes: int) -> int:
    if nbytes >= _BLOCK:
        return -(-nbytes // _BLOCK) * _BLOCK
    return max(4096, 1 << (nbytes - 1).bit_length())


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _host_gpus() -> int:
    """The host's NVIDIA GPUs, whatever CUDA_VISIBLE_DEVICES says, counted without starting CUDA
    (a process that starts it before forking workers cannot use it in them); 1 where unknown."""
    try:
        return max(1, len(os.listdir("/proc/driver/nvidia/gpus")))
    except OSError:
        return 1


def _default_limit() -> int:
    """An eighth of physical memory shared by the host's GPUs: dask-cuda, like most launchers,
    runs one process per GPU, each with its own pool, and together they should not lock more."""
    return max(_physical_memory() // (8 * _host_gpus()), 256 << 20)


class _Pool:
    def __init__(self):
        self.lock = threading.Lock()
        self.free: dict[int, list[int]] = {}       # block bytes -> free block pointers
        self.held = 0                              # bytes of kept blocks, in use or free
        self.limit = _default_limit()
        # Blocks come back from __del__, which the garbage collector may run on a thread that
        # holds the lock (any allocation under it can collect): they wait here until it is free.
        self.returned: collections.deque[tuple[int, int]] = collections.deque()

    def take(self, nbytes: int, keep_only: bool) -> tuple[int, int, bool]:
        """(a block of at least nbytes, its size, whether the pool keeps it); (0, 0, False) when
        keep_only and the pool is full. A free block up to twice the size serves before a new one
        is locked (results of varying sizes would otherwise lock and free blocks call after call)."""
        size = _block_bytes(nbytes)
        with self._locked():
            same = self.free.get(size)
            if same:                           # the usual case: a result of a size seen before
                return same.pop(), size, True
            fits = [s for s, blocks in self.free.items() if blocks and size <= s <= 2 * size]
            if fits:
                got = min(fits)
                return self.free[got].pop(), got, True
            kept = self.held + size <= self.limit or self._evict(size)
            if kept:
                self.held += size
            elif keep_only:
                return 0, 0, False
        try:
            return host_alloc(size), size, kept
        except BaseException:
            if kept:
                with self._locked():
                    self.held -= size
            raise

    @contextlib.contextmanager
    def _locked(self):
        """The lock, `returned` drained on taking it and again after letting it go."""
        try:
            with self.lock:
                self._drain()
                yield
        finally:
            self._drain_if_free()

    def _evict(self, need: int) -> bool:
        """Free blocks of other sizes until `need` more bytes fit the limit, unless freeing them
        all would not make room (then none is freed). With the lock."""
        if need:
            free = sum(size * len(blocks) for size, blocks in self.free.items())
            if self.held - free + need > self.limit:
                return False
        for size, blocks in self.free.items():
            while blocks and self.held + need > self.limit:
                host_free(blocks.pop())
                self.held -= size
        return self.held + need <= self.limit

    def put_back(self, ptr: int, size: int, kept: bool) -> None:
        """Called from __del__: never waits for the lock (see `returned`)."""
        if not kept:
            host_free(ptr)
            return
        self.returned.append((ptr, size))
        self._drain_if_free()

    def _drain_if_free(self) -> None:
        """Drain `returned` unless another holder of the lock will: whoever holds it calls this
        after letting go, so a block queued meanwhile is not left waiting."""
        while self.returned and self.lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self.lock.release()

    def _drain(self) -> None:
        """File returned blocks as free, or free them past the limit. With the lock. A block whose
        free fails (CUDA shutting down at exit) is dropped: the error belongs to no caller."""
        while self.returned:
            ptr, size = self.returned.popleft()
            if self.held <= self.limit:
                self.free.setdefault(size, []).append(ptr)
            else:
                self.held -= size
                with contextlib.suppress(CudaError):
                    host_free(ptr)

    def set_limit(self, nbytes: int) -> None:
        with self._locked():
            self.limit = nbytes
            self._drain()
            self._evict(0)

    def release(self) -> None:
        with self._locked():
            for size, blocks in self.free.items():
                while blocks:                  # popped first: a failed free leaves none behind
                    ptr = blocks.pop()
                    self.held -= size
                    host_free(ptr)


_pool = _Pool()


class _Block:
    """The base of the arrays over one pinned block, seen as its first `nbytes` bytes: the block
    goes back to its pool when the last is gone."""
    __slots__ = ("ptr", "size", "kept", "pool", "__array_interface__")

    def __init__(self, ptr: int, size: int, kept: bool, pool: _Pool, nbytes: int):
        self.ptr, self.size, self.kept, self.pool = ptr, size, kept, pool
        self.__array_interface__ = {"data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}

    def __del__(self):
        if self.ptr:
            self.pool.put_back(self.ptr, self.size, self.kept)
            self.ptr = 0


def _array(shape: tuple[int, ...], info: dt.DType, keep_only: bool) -> np.ndarray | None:
    """An array of a valid shape over a pool block; None when keep_only and the pool is full."""
    nbytes = math.prod(shape) * info.itemsize
    if nbytes == 0:
        return np.empty(shape, info.np)          # nothing to lock
    pool = _pool
    ptr, size, kept = pool.take(nbytes, keep_only)
    if not ptr:
        return None
    return np.asarray(_Block(ptr, size, kept, pool, nbytes)).view(info.np).reshape(shape)


def empty_pinned(shape, dtype="float32") -> np.ndarray:
    """An uninitialised numpy array in page-locked host memory, from pyew's pool of pinned blocks
    (its block goes back to the pool when the array and its views are gone). DeviceArray.get(out=)
    and pyew.asarray copy straight to and from it, without the transfer engine's host copies."""
    try:
        info = dt.lookup(dtype)
    except (KeyError, TypeError):
        raise TypeError(f"empty_pinned: dtype {dtype!r} is not one pyew supports "
                        f"({', '.join(d.name for d in dt.TABLE)})") from None
    try:
        shape = np.broadcast_shapes(shape)        # numpy's own check: ints, none negative
    except (TypeError, ValueError) as e:
        raise type(e)(f"empty_pinned: bad shape {shape!r}: {e}") from None
    return _array(shape, info, keep_only=False)


def pinned_or_empty(shape, dtype) -> np.ndarray:
    """A pinned array from the pool while it has room under its limit, else np.empty (for results
    pyew hands out in bulk, such as pyew.dask's numpy chunks). shape: a tuple of ints, none
    negative (a result's, so not checked again)."""
    try:
        got = _array(shape, dt.lookup(dtype), keep_only=True)
    except CudaError:              # the host refused to lock more memory: pageable will do
        got = None
    return got if got is not None else np.empty(shape, dtype)


RESULT_BYTES = 128 << 10     # results from this size up come from the pool (page faults start to show)


def for_result(shape, dtype) -> np.ndarray:
    """A new host array for a result pyew copies down from the GPU: from the pool while it has room,
    when it is RESULT_BYTES or more, so the copy lands in it by DMA (no staging copy) and, once its
    block has served before, without page faults; else np.empty."""
    dtype = np.dtype(dtype)
    if math.prod(shape) * dtype.itemsize < RESULT_BYTES:
        return np.empty(shape, dtype)
    return pinned_or_empty(shape, dtype)


def is_direct(a: np.ndarray) -> bool:
    """Whether a is one C-ordered run of RESULT_BYTES or more in page-locked memory, which the DMA
    engines read and write in place (smaller arrays are staged: asking costs more than it saves)."""
    return a.nbytes >= RESULT_BYTES and a.flags.c_contiguous and is_pinned(a)


def is_pinned(a: np.ndarray) -> bool:
    """Whether a's memory is page-locked (pyew's pool, or any host memory CUDA has locked): its
    first byte and, for a contiguous array, its last, since another library may have locked only
    part of it. A view of a pool block is known without asking CUDA."""
    if a.size == 0:
        return False
    b = a.base
    for _ in range(4):                  # a result: a view (reshape, dtype) of the block's byte array
        if b is None or type(b) is _Block:
            break
        b = getattr(b, "base", None)
    if type(b) is _Block and b.ptr:
        return True
    if not host_pinned(a.ctypes.data):                   # pageable arrays: one query
        return False
    contiguous = a.flags.c_contiguous or a.flags.f_contiguous
    return not contiguous or host_pinned(a.ctypes.data + a.nbytes - 1)


def set_limit(nbytes: int) -> None:
    _pool.set_limit(nbytes)


def limit() -> int:
    return _pool.limit


def held() -> int:
    """Bytes of pinned blocks the pool keeps, in use or free."""
    return _pool.held


def release() -> None:
    _pool.release()


def forget() -> None:
    """A new, empty pool (tests swapping `cuda`: the blocks of the old one are its calls')."""
    global _pool
    _pool = _Pool()
