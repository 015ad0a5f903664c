"""The CUDA runtime through cuda-python (cuda.bindings.runtime): device, memory pool, copies,
streams. The device is opened on first GPU use, so `import pyew` and `pyew.ops()` work without
one; its attributes are queried once and handed to every launch.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .errors import CudaError, NoDeviceError

try:
    from cuda.bindings import runtime as _rt
except ImportError:          # cuda-python missing: ops() still works, GPU use explains
    _rt = None

_NO_DRIVER_CODES = {"cudaErrorInsufficientDriver", "cudaErrorNoDevice", "cudaErrorInitializationError",
                    "cudaErrorSystemDriverMismatch", "cudaErrorCompatNotSupportedOnDevice",
                    "cudaErrorDevicesUnavailable", "cudaErrorStubLibrary"}


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
    global _device
    if _device is not None:
        return _device
    with _lock:
        if _device is None:
            _device = _open_device()
    return _device


def _open_device() -> Device:
    if _rt is None:
        raise NoDeviceError("pyew needs cuda-python for GPU work: pip install cuda-python")
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


# ---- streams ---------------------------------------------------------------------------------

class Stream:
    """A non-blocking CUDA stream. `with Stream() as s:` makes it current for ops in the block."""

    def __init__(self):
        device()
        self._handle = check(_rt.cudaStreamCreateWithFlags(_rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")
        self.handle = int(self._handle)

    def synchronize(self) -> None:
        check(_rt.cudaStreamSynchronize(self._handle), "cudaStreamSynchronize")

    def __enter__(self):
        _current.stack.append(self)
        return self

    def __exit__(self, *exc):
        _current.stack.pop()
        return False

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h is not None and _rt is not None:
            # Work already queued still runs; the driver frees the stream when it is done.
            _rt.cudaStreamDestroy(h)
            self._handle = None

    def __repr__(self):
        return f"<pyew.Stream 0x{self.handle:x}>"


class _DefaultStream:
    """The legacy default stream (handle 0), used when no stream is given or current."""
    handle = 0

    def __init__(self):
        self._handle = _rt.cudaStream_t(0) if _rt is not None else None

    def synchronize(self) -> None:
        check(_rt.cudaStreamSynchronize(self._handle), "cudaStreamSynchronize")

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


# ---- memory ----------------------------------------------------------------------------------

# Small buffers freed on the default stream are kept for the next allocation of the same size on
# it: work queued on a stream runs in order, so the next user cannot overtake the last one. This
# saves a cudaMallocAsync + cudaFreeAsync pair through cuda-python (about 2 µs) per op call on
# small arrays; the pool behind it is already a caching allocator for everything else.
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
    return int(check(_rt.cudaMallocAsync(nbytes, stream._handle), "cudaMallocAsync"))


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
    check(_rt.cudaFreeAsync(ptr, stream._handle), "cudaFreeAsync")


def copy_htod(dst: int, src_ptr: int, nbytes: int, stream) -> None:
    if nbytes:
        check(_rt.cudaMemcpyAsync(dst, src_ptr, nbytes, _rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                                  stream._handle), "cudaMemcpyAsync (host to device)")


def copy_dtoh(dst_ptr: int, src: int, nbytes: int, stream) -> None:
    if nbytes:
        check(_rt.cudaMemcpyAsync(dst_ptr, src, nbytes, _rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                  stream._handle), "cudaMemcpyAsync (device to host)")


def copy_dtod(dst: int, src: int, nbytes: int, stream) -> None:
    if nbytes:
        check(_rt.cudaMemcpyAsync(dst, src, nbytes, _rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                                  stream._handle), "cudaMemcpyAsync (device to device)")


def stream_wait(waiter, other) -> None:
    """Make `waiter` wait for the work queued so far on `other`."""
    ev = check(_rt.cudaEventCreateWithFlags(_rt.cudaEventDisableTiming), "cudaEventCreateWithFlags")
    try:
        check(_rt.cudaEventRecord(ev, other._handle), "cudaEventRecord")
        check(_rt.cudaStreamWaitEvent(waiter._handle, ev, 0), "cudaStreamWaitEvent")
    finally:
        _rt.cudaEventDestroy(ev)


def synchronize() -> None:
    """Wait for all work on the device."""
    device()
    check(_rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
