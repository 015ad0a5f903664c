"""Device memory: stream-ordered allocation from each GPU's pool, the buffers kept for reuse on a
GPU's default stream, copies, and the slots of scalar operands. Every CUDA call about device
memory goes through `cuda` (a CudaMemory; the CPU tests swap in a stand-in).
"""
from __future__ import annotations

import ctypes
import sys
import threading

from . import cudart, devices, streams
from .cudart import check
from .devices import current_ordinal, gpus, on, props
from .errors import CudaError


class CudaMemory(cudart.Calls):
    """The CUDA runtime calls about device memory."""
    _WHERE = {"HostToDevice": "host to device", "DeviceToHost": "device to host", "DeviceToDevice": "device to device"}
    _kinds: dict | None = None

    def alloc(self, nbytes: int, stream) -> int | None:
        """nbytes from the pool of the stream's GPU, ordered on it; None when out of memory."""
        err, ptr = self.rt.cudaMallocAsync(nbytes, stream)
        if int(err) != 0 and err == self.rt.cudaError_t.cudaErrorMemoryAllocation:
            return None
        check((err,), "cudaMallocAsync")
        return int(ptr)

    def free(self, ptr: int, stream) -> None:
        check(self.rt.cudaFreeAsync(ptr, stream), "cudaFreeAsync")

    def memset(self, ptr: int, value: int, nbytes: int, stream) -> None:
        check(self.rt.cudaMemsetAsync(ptr, value, nbytes, stream), "cudaMemsetAsync")

    def copy(self, dst: int, src: int, nbytes: int, stream, kind: str) -> None:
        """kind: HostToDevice, DeviceToHost or DeviceToDevice."""
        kinds = self._kinds
        if kinds is None:            # cuda-python's enum members, looked up once
            kinds = self._kinds = {k: getattr(self.rt.cudaMemcpyKind, "cudaMemcpy" + k) for k in self._WHERE}
        err = self.rt.cudaMemcpyAsync(dst, src, nbytes, kinds[kind], stream)
        if int(err[0]):
            check(err, f"cudaMemcpyAsync ({self._WHERE[kind]})")

    def copy_peer(self, dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int, stream) -> None:
        check(self.rt.cudaMemcpyPeerAsync(dst, dst_ordinal, src, src_ordinal, nbytes, stream), "cudaMemcpyPeerAsync")

    def pool_usage(self, pool) -> dict:
        attr = self.rt.cudaMemPoolAttr

        def get(a):
            return int(check(self.rt.cudaMemPoolGetAttribute(pool, getattr(attr, a)), "cudaMemPoolGetAttribute"))
        return {"used": get("cudaMemPoolAttrUsedMemCurrent"), "used_peak": get("cudaMemPoolAttrUsedMemHigh"),
                "reserved": get("cudaMemPoolAttrReservedMemCurrent")}

    def reset_pool_peak(self, pool) -> None:
        from cuda.bindings import driver
        check(self.rt.cudaMemPoolSetAttribute(pool, self.rt.cudaMemPoolAttr.cudaMemPoolAttrUsedMemHigh,
                                              driver.cuuint64_t(0)), "cudaMemPoolSetAttribute")

    def trim_pool(self, pool, keep_bytes: int) -> None:
        check(self.rt.cudaMemPoolTrimTo(pool, keep_bytes), "cudaMemPoolTrimTo")


cuda = CudaMemory()


def pool_usage(ordinal: int | None = None) -> dict:
    """A GPU's pool (the current one's by default): bytes in use now (buffers kept for reuse
    included, see malloc) and at most since the last reset_pool_peak(), and reserved (in use plus
    cached)."""
    return cuda.pool_usage(props(current_ordinal() if ordinal is None else ordinal).pool)


def reset_pool_peak(ordinal: int | None = None) -> None:
    cuda.reset_pool_peak(props(current_ordinal() if ordinal is None else ordinal).pool)


def trim_pool(keep_bytes: int = 0, ordinal: int | None = None) -> None:
    """Return a GPU pool's cached free memory to the driver, down to keep_bytes, after the
    buffers kept for reuse (see malloc) go back to the pool."""
    ordinal = current_ordinal() if ordinal is None else ordinal
    release_kept(ordinal)
    cuda.trim_pool(props(ordinal).pool, keep_bytes)


# Buffers freed on a GPU's default stream are kept for the next allocation of the same size on
# it: work queued on a stream runs in order, so the next user cannot overtake the last one. This
# saves a cudaMallocAsync + cudaFreeAsync pair per op call: host time through cuda-python on small
# arrays, and on large ones the GPU time those stream-ordered calls add between kernels (the pool
# behind them is a caching allocator already). The bytes held count against the GPU's total as
# they are kept and come back as they are taken (the count is approximate under threads, as the
# lists' lengths are). An allocation the pool cannot serve gives every kept buffer of its GPU back
# and tries once more, so what is held never costs pyew an out-of-memory error. (Freed memory
# stays reserved by the pool either way: its release threshold is set to keep it.)
_REUSE_MAX_BYTES = 1 << 30      # per buffer
_REUSE_PER_SIZE = 4
_REUSE_TOTAL_BYTES = 2 << 30    # held at most per GPU, over all sizes


def release_kept(ordinal: int) -> int:
    """Give the buffers kept for reuse on GPU `ordinal`'s default stream back to its pool, and wait
    for that stream, so that an allocation on any stream can have their memory. Returns the bytes
    released."""
    d = streams.defaults.get(ordinal)
    if d is None or not d.reuse:
        return 0
    ptrs, released = [], 0
    for nbytes, kept in list(d.reuse.items()):
        while kept:
            try:
                ptrs.append(kept.pop())
            except IndexError:    # another thread took the last one
                break
            released += nbytes
    d.held -= released
    if ptrs:
        with on(ordinal):
            for ptr in ptrs:
                cuda.free(ptr, d.cu)
            streams.stream_synchronize(d.cu)
    return released


def malloc(nbytes: int, stream) -> int:
    """Stream-ordered allocation from the pool of the stream's GPU."""
    reuse = stream.reuse
    if reuse is not None:
        kept = reuse.get(nbytes)
        if kept:
            try:
                ptr = kept.pop()
            except IndexError:    # another thread took the last one
                pass
            else:
                stream.held -= nbytes
                return ptr
    if nbytes == 0:
        return 0
    props(stream.ordinal)                 # NoDeviceError before any CUDA call that would say less
    # from the pool of the stream's device (the current one, for a default stream)
    ptr = cuda.alloc(nbytes, stream.cu)
    if ptr is None and release_kept(stream.ordinal):
        ptr = cuda.alloc(nbytes, stream.cu)
    if ptr is None:
        with on(stream.ordinal):
            free_b, total = devices.cuda.memory()
        raise CudaError(2, "cudaErrorMemoryAllocation", "cudaMallocAsync",
                        f"out of GPU memory allocating {nbytes} bytes on device {stream.ordinal} ({free_b} "
                        f"of {total} bytes free); free DeviceArrays you no longer need, or pass numpy "
                        "arrays, which stream through a bounded device budget")
    return ptr


def free(ptr: int, stream, nbytes: int = 0) -> None:
    """Stream-ordered free on the stream's GPU; a buffer of at most _REUSE_MAX_BYTES (nbytes given)
    on a default stream is kept for reuse instead."""
    reuse = stream.reuse
    if reuse is not None and ptr and 0 < nbytes <= _REUSE_MAX_BYTES and \
            stream.held + nbytes <= _REUSE_TOTAL_BYTES:
        kept = reuse.get(nbytes)
        if kept is None:
            kept = reuse.setdefault(nbytes, [])
        if len(kept) < _REUSE_PER_SIZE:
            kept.append(ptr)
            stream.held += nbytes
            return
    if not ptr or sys.is_finalizing():      # at exit the driver takes back what is left
        return
    if gpus.several:
        with on(stream.ordinal):
            cuda.free(ptr, stream.cu)
    else:
        cuda.free(ptr, stream.cu)


def memset(ptr: int, value: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        cuda.memset(ptr, value, nbytes, stream_cu)


def copy_htod(dst: int, src_ptr: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        cuda.copy(dst, src_ptr, nbytes, stream_cu, "HostToDevice")


def copy_dtoh(dst_ptr: int, src: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        cuda.copy(dst_ptr, src, nbytes, stream_cu, "DeviceToHost")


def copy_dtod(dst: int, src: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        cuda.copy(dst, src, nbytes, stream_cu, "DeviceToDevice")


def copy_peer(dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int, stream_cu) -> None:
    """Copy between two GPUs' memory, ordered on `stream_cu` (the driver picks the path)."""
    if nbytes:
        cuda.copy_peer(dst, dst_ordinal, src, src_ordinal, nbytes, stream_cu)


# ---- scalar operands ---------------------------------------------------------------------------
#
# A scalar operand reaches a kernel as one element in device memory, read with stride 0. Each
# value is written once per GPU into a slot of a small table, and that copy is waited for on a
# stream of pyew's own (the caller's stream may hold queued work, which the first use of a value
# must not wait for): from then on kernels on any stream read the slot, with no allocation, copy
# or launch per call. A slot is never rewritten or freed, so no queued kernel can see it change;
# once a GPU's table is full, new values take a buffer of their own per call.
_CONSTANT_SLOTS = 4096           # of 8 bytes, per GPU


class _Constants:
    __slots__ = ("base", "used", "stream", "slots")

    def __init__(self, base: int, stream):
        self.base = base
        self.used = 0
        self.stream = stream
        self.slots: dict[tuple[int, int], int] = {}     # (bits, itemsize) -> device pointer


_constants: dict[int, _Constants] = {}
_constants_lock = threading.Lock()


def constant(bits: int, itemsize: int, ordinal: int) -> int:
    """A device pointer on GPU `ordinal` to `itemsize` bytes holding `bits` (little-endian), which
    kernels on any stream may read from now on; 0 when the GPU's table is full."""
    table = _constants.get(ordinal)
    if table is not None:
        ptr = table.slots.get((bits, itemsize))
        if ptr is not None:
            return ptr
    with _constants_lock:
        table = _constants.get(ordinal)
        if table is None:
            stream = streams.new_stream(ordinal)
            with on(ordinal):
                base = malloc(8 * _CONSTANT_SLOTS, streams.RawStream(stream, ordinal))
            table = _constants[ordinal] = _Constants(base, stream)
        ptr = table.slots.get((bits, itemsize))
        if ptr is None:
            if table.used == _CONSTANT_SLOTS:
                return 0
            ptr = table.base + 8 * table.used
            value = ctypes.c_uint64(bits)
            with on(ordinal):
                copy_htod(ptr, ctypes.addressof(value), itemsize, table.stream)
                streams.stream_synchronize(table.stream)
            table.used += 1
            table.slots[(bits, itemsize)] = ptr
        return ptr


def forget() -> None:
    """Drop, without freeing, the buffers kept for reuse and the scalar tables (tests swapping
    `cuda`: they belong to the calls swapped out)."""
    for d in streams.defaults.values():
        d.reuse.clear()
        d.held = 0
    _constants.clear()
