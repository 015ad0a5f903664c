"""The CUDA runtime through cuda-python (cuda.bindings.runtime): the device, its memory pool,
pinned host memory, copies, streams and events.

This is the only module that calls cuda-python. The device is opened on first GPU use, so
`import pyew` and `pyew.ops()` work without one; its attributes are queried once and handed to
every launch.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from .errors import CudaError, NoDeviceError

try:
    from cuda.bindings import runtime as _rt
except ImportError:          # cuda-python missing: ops() still works, GPU use explains
    _rt = None

_NO_CUDA_PYTHON = ("pyew needs cuda-python for GPU work, and it is not installed: "
                   "pip install cuda-python (import pyew and pyew.ops() work without it)")


def _name(err) -> str:
    return getattr(err, "name", str(err))


def check(result, where: str):
    """Unpack a cuda-python result tuple, raising CudaError on failure."""
    err = result[0]
    if int(err) != 0:
        detail = ""
        try:
            detail = _rt.cudaGetErrorString(err)[1].decode()
        except Exception:
            pass
        raise CudaError(int(err), _name(err), where, detail)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


@dataclass(frozen=True)
class Device:
    ordinal: int
    name: str
    capability: tuple[int, int]
    sms: int
    threads_per_sm: int
    total_memory: int
    l2_bytes: int
    pool: object


_lock = threading.Lock()
_device: Device | None = None


def device() -> Device:
    """The current device, opened on first use; NoDeviceError if there is none."""
    d = _device
    if d is not None:
        return d
    return _open()


def _open() -> Device:
    global _device
    with _lock:
        if _device is None:
            _device = _open_device()
    return _device


def _open_device() -> Device:
    if _rt is None:
        raise NoDeviceError(_NO_CUDA_PYTHON)
    err, count = _rt.cudaGetDeviceCount()
    if int(err) != 0 or count == 0:
        why = _name(err) if int(err) != 0 else "no CUDA devices"
        raise NoDeviceError(
            f"no usable NVIDIA GPU ({why}): pyew needs a CUDA GPU and driver for this. "
            "import pyew and pyew.ops() work without one.")
    ordinal = check(_rt.cudaGetDevice(), "cudaGetDevice")
    props = check(_rt.cudaGetDeviceProperties(ordinal), "cudaGetDeviceProperties")
    attr = _rt.cudaDeviceAttr
    sms = check(_rt.cudaDeviceGetAttribute(attr.cudaDevAttrMultiProcessorCount, ordinal), "cudaDeviceGetAttribute")
    tpsm = check(_rt.cudaDeviceGetAttribute(attr.cudaDevAttrMaxThreadsPerMultiProcessor, ordinal),
                 "cudaDeviceGetAttribute")
    pool = check(_rt.cudaDeviceGetDefaultMemPool(ordinal), "cudaDeviceGetDefaultMemPool")
    # Keep freed blocks in the pool instead of returning them to the driver at each sync.
    from cuda.bindings import driver as _drv
    check(_rt.cudaMemPoolSetAttribute(pool, _rt.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold,
                                      _drv.cuuint64_t(0xFFFFFFFFFFFFFFFF)), "cudaMemPoolSetAttribute")
    name = props.name.split(b"\0", 1)[0].decode() if isinstance(props.name, bytes) else str(props.name)
    return Device(ordinal, name, (props.major, props.minor), sms, tpsm, props.totalGlobalMem,
                  props.l2CacheSize, pool)


def device_info() -> dict:
    """Name, compute capability, SM count, threads per SM, L2 and memory of the current GPU."""
    d = device()
    free, total = check(_rt.cudaMemGetInfo(), "cudaMemGetInfo")
    return {"ordinal": d.ordinal, "name": d.name, "capability": d.capability, "sms": d.sms,
            "threads_per_sm": d.threads_per_sm, "l2_bytes": d.l2_bytes,
            "total_memory": total, "free_memory": free}


def pool_usage() -> dict:
    """The device pool's bytes in use now and at most since the last reset_pool_peak(), and
    reserved (in use plus cached)."""
    pool = device().pool
    attr = _rt.cudaMemPoolAttr
    get = lambda a: int(check(_rt.cudaMemPoolGetAttribute(pool, a), "cudaMemPoolGetAttribute"))  # noqa: E731
    return {"used": get(attr.cudaMemPoolAttrUsedMemCurrent), "used_peak": get(attr.cudaMemPoolAttrUsedMemHigh),
            "reserved": get(attr.cudaMemPoolAttrReservedMemCurrent)}


def reset_pool_peak() -> None:
    from cuda.bindings import driver as _drv
    check(_rt.cudaMemPoolSetAttribute(device().pool, _rt.cudaMemPoolAttr.cudaMemPoolAttrUsedMemHigh,
                                      _drv.cuuint64_t(0)), "cudaMemPoolSetAttribute")


def trim_pool(keep_bytes: int = 0) -> None:
    """Return the device pool's cached free memory to the driver, down to keep_bytes."""
    check(_rt.cudaMemPoolTrimTo(device().pool, keep_bytes), "cudaMemPoolTrimTo")


# ---- streams and events ----------------------------------------------------------------------

class Stream:
    """A non-blocking CUDA stream. `with Stream() as s:` makes it current for ops in the block."""

    def __init__(self):
        device()
        self.cu = check(_rt.cudaStreamCreateWithFlags(_rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")
        self.handle = int(self.cu)

    def synchronize(self) -> None:
        _stream_sync(self.cu)

    def __enter__(self):
        _current.stack.append(self)
        return self

    def __exit__(self, *exc):
        _current.stack.pop()
        return False

    def __del__(self):
        h = getattr(self, "cu", None)
        if h is not None and _rt is not None and not sys.is_finalizing():
            # Work already queued still runs; the driver frees the stream when it is done.
            _rt.cudaStreamDestroy(h)
            self.cu = None

    def __repr__(self):
        return f"<pyew.Stream 0x{self.handle:x}>"


class _DefaultStream:
    """The legacy default stream (handle 0), used when no stream is given or current."""
    handle = 0

    def __init__(self):
        self.cu = _rt.cudaStream_t(0) if _rt is not None else None

    def synchronize(self) -> None:
        device()
        _stream_sync(self.cu)

    def __repr__(self):
        return "<pyew default stream>"


class _Current(threading.local):
    def __init__(self):
        self.stack: list[Stream] = []


_current = _Current()
DEFAULT_STREAM = _DefaultStream()


def current_stream():
    """The stream ops use when none is passed: the innermost `with Stream()`, else the default."""
    st = _current.stack
    return st[-1] if st else DEFAULT_STREAM


def resolve_stream(stream):
    if stream is None:
        st = _current.stack
        return st[-1] if st else DEFAULT_STREAM
    if isinstance(stream, (Stream, _DefaultStream)):
        return stream
    raise TypeError(f"stream must be a pyew.Stream or None, not {type(stream).__name__}")


def foreign_stream(handle: int):
    """A cudaStream_t for a raw handle another library gave (CUDA Array Interface, DLPack): 1 is
    the legacy default stream and 2 the per-thread default stream, as in the CUDA headers."""
    return _rt.cudaStream_t(handle)


class Event:
    """A CUDA event without timing (cheap to record and wait on), or with timing for benchmarks."""
    __slots__ = ("cu",)

    def __init__(self, timing: bool = False):
        self.cu = None
        flags = _rt.cudaEventDefault if timing else _rt.cudaEventDisableTiming
        self.cu = check(_rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")

    def record(self, stream_cu) -> None:
        check(_rt.cudaEventRecord(self.cu, stream_cu), "cudaEventRecord")

    def synchronize(self) -> None:
        _event_sync(self.cu)

    def done(self) -> bool:
        err = _rt.cudaEventQuery(self.cu)[0]
        if err == _rt.cudaError_t.cudaErrorNotReady:
            return False
        check((err,), "cudaEventQuery")
        return True

    def elapsed_ms(self, start: "Event") -> float:
        return float(check(_rt.cudaEventElapsedTime(start.cu, self.cu), "cudaEventElapsedTime"))

    def __del__(self):
        if self.cu is not None and _rt is not None and not sys.is_finalizing():
            _rt.cudaEventDestroy(self.cu)
            self.cu = None


def _cuda_python_event_sync(ev) -> None:
    check(_rt.cudaEventSynchronize(ev), "cudaEventSynchronize")


def _cuda_python_stream_sync(st) -> None:
    check(_rt.cudaStreamSynchronize(st), "cudaStreamSynchronize")


_event_sync = _cuda_python_event_sync
_stream_sync = _cuda_python_stream_sync


def use_blocking_waits(event_sync, stream_sync) -> None:
    """Host waits through functions that release the GIL while they block (libew's, called with
    ctypes): the transfer engine's workers wait for their copies without stopping each other.
    Each returns a cudaError_t value."""
    global _event_sync, _stream_sync

    def ev(e):
        rc = event_sync(e)
        if rc:
            check((_rt.cudaError_t(rc),), "cudaEventSynchronize")

    def st(s):
        rc = stream_sync(s)
        if rc:
            check((_rt.cudaError_t(rc),), "cudaStreamSynchronize")

    _event_sync, _stream_sync = ev, st


def wait_event(stream_cu, event: Event) -> None:
    check(_rt.cudaStreamWaitEvent(stream_cu, event.cu, 0), "cudaStreamWaitEvent")


class _Handshake(threading.local):
    """One event per thread for stream-to-stream waits: a wait captures the event's state when it
    is queued, so the same event can be recorded again right after."""
    event: Event | None = None


_handshake = _Handshake()


def stream_wait(waiter_cu, other_cu) -> None:
    """Make stream `waiter_cu` wait for the work queued so far on `other_cu` (no host sync)."""
    ev = _handshake.event
    if ev is None:
        ev = _handshake.event = Event()
    ev.record(other_cu)
    wait_event(waiter_cu, ev)


def synchronize() -> None:
    """Wait for all work on the device."""
    device()
    check(_rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")


# ---- device memory ---------------------------------------------------------------------------

# Small buffers freed on the default stream are kept for the next allocation of the same size on
# it: work queued on a stream runs in order, so the next user cannot overtake the last one. This
# saves a cudaMallocAsync + cudaFreeAsync pair through cuda-python per op call on small arrays;
# the pool behind it is already a caching allocator for everything else.
_REUSE_MAX_BYTES = 1 << 20      # per buffer
_REUSE_PER_SIZE = 4
_REUSE_TOTAL_BYTES = 64 << 20   # held at most, over all sizes
_reuse: dict[int, list[int]] = {}
_reuse_bytes = 0                # approximate under threads: list pop/append are atomic, this is not


def malloc(nbytes: int, stream) -> int:
    """Stream-ordered allocation from the device's default pool."""
    global _reuse_bytes
    if nbytes == 0:
        return 0
    if stream is DEFAULT_STREAM:
        kept = _reuse.get(nbytes)
        if kept:
            try:
                ptr = kept.pop()
            except IndexError:    # another thread took the last one
                pass
            else:
                _reuse_bytes -= nbytes
                return ptr
    if _device is None:
        device()                  # NoDeviceError before any CUDA call that would say less
    err, ptr = _rt.cudaMallocAsync(nbytes, stream.cu)
    if int(err) != 0:
        if err == _rt.cudaError_t.cudaErrorMemoryAllocation:
            free_b, total = check(_rt.cudaMemGetInfo(), "cudaMemGetInfo")
            raise CudaError(int(err), _name(err), "cudaMallocAsync",
                            f"out of GPU memory allocating {nbytes} bytes ({free_b} of {total} bytes "
                            "free); free DeviceArrays you no longer need, or pass numpy arrays, which "
                            "stream through a bounded device budget")
        check((err,), "cudaMallocAsync")
    return int(ptr)


def free(ptr: int, stream, nbytes: int = 0) -> None:
    """Stream-ordered free; a small buffer (nbytes given) on the default stream is kept for reuse."""
    global _reuse_bytes
    if not ptr:
        return
    if 0 < nbytes <= _REUSE_MAX_BYTES and stream is DEFAULT_STREAM and \
            _reuse_bytes + nbytes <= _REUSE_TOTAL_BYTES:
        kept = _reuse.setdefault(nbytes, [])
        if len(kept) < _REUSE_PER_SIZE:
            kept.append(ptr)
            _reuse_bytes += nbytes
            return
    check(_rt.cudaFreeAsync(ptr, stream.cu), "cudaFreeAsync")


def memset(ptr: int, value: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        check(_rt.cudaMemsetAsync(ptr, value, nbytes, stream_cu), "cudaMemsetAsync")


# ---- copies ----------------------------------------------------------------------------------

def copy_htod(dst: int, src_ptr: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        check(_rt.cudaMemcpyAsync(dst, src_ptr, nbytes, _rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                  stream_cu), "cudaMemcpyAsync (host to device)")


def copy_dtoh(dst_ptr: int, src: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        check(_rt.cudaMemcpyAsync(dst_ptr, src, nbytes, _rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                  stream_cu), "cudaMemcpyAsync (device to host)")


def copy_dtod(dst: int, src: int, nbytes: int, stream_cu) -> None:
    if nbytes:
        check(_rt.cudaMemcpyAsync(dst, src, nbytes, _rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                  stream_cu), "cudaMemcpyAsync (device to device)")


def new_stream():
    """A raw non-blocking stream handle for pyew's own use (the transfer engine's lanes)."""
    device()
    return check(_rt.cudaStreamCreateWithFlags(_rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")


def stream_synchronize(stream_cu) -> None:
    _stream_sync(stream_cu)


def destroy_stream(stream_cu) -> None:
    if _rt is not None and not sys.is_finalizing():
        _rt.cudaStreamDestroy(stream_cu)


# ---- pinned host memory ----------------------------------------------------------------------

def host_alloc(nbytes: int) -> int:
    """Page-locked host memory (the DMA engines read and write it at full PCIe speed)."""
    device()
    err, ptr = _rt.cudaHostAlloc(nbytes, _rt.cudaHostAllocPortable)
    if int(err) != 0:
        raise CudaError(int(err), _name(err), "cudaHostAlloc",
                        f"cannot pin {nbytes} bytes of host memory; lower pyew's pinned budget "
                        "(pyew.set_transfer_limits(pinned_bytes=...))")
    return int(ptr)


def host_free(ptr: int) -> None:
    if ptr and _rt is not None and not sys.is_finalizing():
        _rt.cudaFreeHost(ptr)


def host_register(ptr: int, nbytes: int) -> None:
    """Page-lock an existing host buffer in place, so the DMA engines can read or write it."""
    check(_rt.cudaHostRegister(ptr, nbytes, _rt.cudaHostRegisterPortable), "cudaHostRegister")


def host_unregister(ptr: int) -> None:
    check(_rt.cudaHostUnregister(ptr), "cudaHostUnregister")
