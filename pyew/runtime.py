"""The CUDA runtime through cuda-python (cuda.bindings.runtime): devices, their memory pools,
pinned host memory, copies, streams and events.

This is the only module that calls cuda-python. Each GPU is opened on its first use, so
`import pyew` and `pyew.ops()` work without one; its attributes are queried once and travel
with its streams to every launch.
"""
from __future__ import annotations

import ctypes
import operator
import sys
import threading
from dataclasses import dataclass

from . import occupancy
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
class DeviceProps:
    """What a launch needs to know about one GPU, queried once when it is first used."""
    ordinal: int
    name: str
    capability: tuple[int, int]
    sms: int
    threads_per_sm: int
    total_memory: int
    l2_bytes: int
    pool: object
    pci_bus_id: str = ""          # domain:bus:device.function, as nvidia-smi prints it
    launch_threads_per_sm: int = 0    # resident threads per SM the map launches use (0: threads_per_sm)

    def __post_init__(self):
        if self.launch_threads_per_sm <= 0:
            object.__setattr__(self, "launch_threads_per_sm", self.threads_per_sm)

    @property
    def dims(self) -> tuple[int, int]:
        """The launch arguments every entry point takes after the stream: (sms, threads_per_sm)."""
        return self.sms, self.launch_threads_per_sm


_lock = threading.Lock()
_props: dict[int, DeviceProps] = {}
_count: int | None = None       # GPUs this process sees; None until the first GPU use
_several = False                # more than one: calls switch the current device and restore it


def _no_device(why: str) -> NoDeviceError:
    return NoDeviceError(f"no usable NVIDIA GPU ({why}): pyew needs a CUDA GPU and driver for this. "
                         "import pyew and pyew.ops() work without one.")


def _counted() -> int:
    global _count, _several
    if _count is None:
        with _lock:
            if _count is None:
                if _rt is None:
                    raise NoDeviceError(_NO_CUDA_PYTHON)
                err, n = _rt.cudaGetDeviceCount()
                if int(err) != 0 or n == 0:
                    raise _no_device(_name(err) if int(err) != 0 else "no CUDA devices")
                _several = n > 1
                _count = n
    return _count


def device_count() -> int:
    """The number of GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without a GPU,
    driver or cuda-python."""
    try:
        return _counted()
    except NoDeviceError:
        return 0


def several() -> bool:
    """True when this process sees more than one GPU (then calls pick and restore the device)."""
    if _count is None:
        try:
            _counted()
        except NoDeviceError:      # said by whatever needs the GPU first
            return False
    return _several


def only_one_gpu() -> bool:
    """True once the runtime has counted exactly one GPU (the calls' short paths need no device
    switch then); False before the first GPU use, without a GPU, or with several."""
    return _count == 1


def check_ordinal(ordinal: int) -> int:
    n = _counted()
    if not 0 <= ordinal < n:
        raise ValueError(f"no CUDA device {ordinal}: this process sees {n} GPU(s), 0..{n - 1} "
                         "(CUDA_VISIBLE_DEVICES decides which)")
    return ordinal


def props(ordinal: int) -> DeviceProps:
    """The attributes of GPU `ordinal`, queried on its first use."""
    p = _props.get(ordinal)
    if p is not None:
        return p
    check_ordinal(ordinal)
    with _lock:
        p = _props.get(ordinal)
        if p is None:
            p = _props[ordinal] = _open_device(ordinal)
    return p


def device() -> DeviceProps:
    """The current device's attributes; NoDeviceError if there is no GPU."""
    return props(current_ordinal())


def _open_device(ordinal: int) -> DeviceProps:
    props_ = check(_rt.cudaGetDeviceProperties(ordinal), "cudaGetDeviceProperties")
    attr = _rt.cudaDeviceAttr
    sms = check(_rt.cudaDeviceGetAttribute(attr.cudaDevAttrMultiProcessorCount, ordinal), "cudaDeviceGetAttribute")
    tpsm = check(_rt.cudaDeviceGetAttribute(attr.cudaDevAttrMaxThreadsPerMultiProcessor, ordinal),
                 "cudaDeviceGetAttribute")
    bus = check(_rt.cudaDeviceGetAttribute(attr.cudaDevAttrGlobalMemoryBusWidth, ordinal), "cudaDeviceGetAttribute")
    pool = check(_rt.cudaDeviceGetDefaultMemPool(ordinal), "cudaDeviceGetDefaultMemPool")
    # Keep freed blocks in the pool instead of returning them to the driver at each sync.
    from cuda.bindings import driver as _drv
    check(_rt.cudaMemPoolSetAttribute(pool, _rt.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold,
                                      _drv.cuuint64_t(0xFFFFFFFFFFFFFFFF)), "cudaMemPoolSetAttribute")
    name = props_.name.split(b"\0", 1)[0].decode() if isinstance(props_.name, bytes) else str(props_.name)
    pci = f"{props_.pciDomainID:08X}:{props_.pciBusID:02X}:{props_.pciDeviceID:02X}.0"
    cap = (props_.major, props_.minor)
    return DeviceProps(ordinal, name, cap, sms, tpsm, props_.totalGlobalMem, props_.l2CacheSize, pool, pci,
                       occupancy.resident_threads(cap, sms, bus, tpsm))


# ---- the current device ----------------------------------------------------------------------
#
# The current device is the CUDA runtime's (per thread), as in CuPy: `with pyew.Device(1)` and
# `with cupy.cuda.Device(1)` both set it. A call runs on its operands' device:
# on a machine with several GPUs it makes that device current for the call and restores the
# caller's afterwards, so pyew never leaves another library's current device changed. With one
# GPU visible it never switches: `on` hands back a shared no-op.

class _Active(threading.local):
    ordinal: int | None = None      # the device of the call in progress on this thread


_active = _Active()


def current_ordinal() -> int:
    """The device a call without GPU operands runs on: the call's own inside a call, else the
    CUDA runtime's current device of this thread."""
    if not several():
        return 0
    a = _active.ordinal
    return a if a is not None else int(check(_rt.cudaGetDevice(), "cudaGetDevice"))


class _Switch:
    """Make `ordinal` the current device for a block, then restore the caller's."""
    __slots__ = ("ordinal", "saved", "outer")

    def __init__(self, ordinal: int):
        self.ordinal = ordinal

    def __enter__(self):
        self.outer = _active.ordinal
        cur = int(check(_rt.cudaGetDevice(), "cudaGetDevice"))
        self.saved = cur
        if cur != self.ordinal:
            check(_rt.cudaSetDevice(check_ordinal(self.ordinal)), "cudaSetDevice")
        _active.ordinal = self.ordinal
        return self

    def __exit__(self, *exc):
        _active.ordinal = self.outer
        if self.saved != self.ordinal:
            check(_rt.cudaSetDevice(self.saved), "cudaSetDevice")
        return False


class _Stay:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_STAY = _Stay()


def on(ordinal: int):
    """`with on(i):` runs the block with GPU i current (a no-op with one GPU). NoDeviceError
    without a GPU, ValueError for a GPU this process does not see."""
    if not several():
        if ordinal != 0 or _count is None:
            check_ordinal(ordinal)
        return _STAY
    return _Switch(ordinal)


class _Bound(threading.local):
    ordinal: int | None = None


_bound = _Bound()


def bind_thread(ordinal: int) -> None:
    """Make `ordinal` current on one of pyew's own worker threads (kept there, no restore)."""
    if _several and _bound.ordinal != ordinal:
        check(_rt.cudaSetDevice(ordinal), "cudaSetDevice")
        _bound.ordinal = ordinal


def pointer_device(ptr: int) -> int:
    """The GPU that device pointer `ptr` lives on (for CUDA Array Interface imports, which do
    not say); -1 for host memory. With one GPU, 0 without asking."""
    if not several():
        return 0
    attrs = check(_rt.cudaPointerGetAttributes(ptr), "cudaPointerGetAttributes")
    kinds = (_rt.cudaMemoryType.cudaMemoryTypeDevice, _rt.cudaMemoryType.cudaMemoryTypeManaged)
    return int(attrs.device) if attrs.type in kinds else -1


class _Entered(threading.local):
    def __init__(self):
        self.stack: list[tuple[int, int | None]] = []   # (device before, call device before)


_entered = _Entered()


class Device:
    """A GPU of this process: `pyew.Device(1)`, or `pyew.Device()` for the current one.
    `with pyew.Device(1):` makes it current on this thread (calls without GPU operands and new
    arrays go there) and restores the previous one after the block."""
    __slots__ = ("id",)

    def __init__(self, device: "int | Device | None" = None):
        if device is None:
            ident = current_ordinal()
        elif isinstance(device, Device):
            ident = device.id
        else:
            try:
                ident = operator.index(device)
            except TypeError:
                raise TypeError(f"a device is an int ordinal or a pyew.Device, not {type(device).__name__}") \
                    from None
        self.id = check_ordinal(ident)

    def __enter__(self):
        cur = int(check(_rt.cudaGetDevice(), "cudaGetDevice"))
        if cur != self.id:
            check(_rt.cudaSetDevice(self.id), "cudaSetDevice")
        _entered.stack.append((cur, _active.ordinal))
        _active.ordinal = None
        return self

    def __exit__(self, *exc):
        cur, outer = _entered.stack.pop()
        _active.ordinal = outer
        if cur != self.id:
            check(_rt.cudaSetDevice(cur), "cudaSetDevice")
        return False

    def synchronize(self) -> None:
        """Wait for all work on this GPU."""
        with on(self.id):
            check(_rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def info(self) -> dict:
        """Name, compute capability, SMs, threads per SM, L2 and memory of this GPU."""
        return device_info(self.id)

    def can_access_peer(self, other: "int | Device") -> bool:
        """Whether the driver reports that this GPU can access `other`'s memory directly (peer access)."""
        j = Device(other).id
        if j == self.id:
            return True
        return bool(check(_rt.cudaDeviceCanAccessPeer(self.id, j), "cudaDeviceCanAccessPeer"))

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("pyew.Device", self.id))

    def __index__(self):
        return self.id

    def __repr__(self):
        return f"<pyew.Device {self.id}>"


def device_info(ordinal: int | None = None) -> dict:
    """Name, compute capability, SM count, threads per SM (the hardware's maximum, and how many
    pyew's elementwise launches keep resident), L2, memory and PCI bus id of a GPU (the current one
    by default)."""
    d = props(current_ordinal() if ordinal is None else ordinal)
    with on(d.ordinal):
        free, total = check(_rt.cudaMemGetInfo(), "cudaMemGetInfo")
    return {"ordinal": d.ordinal, "name": d.name, "capability": d.capability, "sms": d.sms,
            "threads_per_sm": d.threads_per_sm, "launch_threads_per_sm": d.launch_threads_per_sm,
            "l2_bytes": d.l2_bytes,
            "total_memory": total, "free_memory": free, "pci_bus_id": d.pci_bus_id}


def pool_usage(ordinal: int | None = None) -> dict:
    """A GPU's pool (the current one's by default): bytes in use now (buffers kept for reuse
    included, see malloc) and at most since the last reset_pool_peak(), and reserved (in use plus
    cached)."""
    pool = props(current_ordinal() if ordinal is None else ordinal).pool
    attr = _rt.cudaMemPoolAttr
    get = lambda a: int(check(_rt.cudaMemPoolGetAttribute(pool, a), "cudaMemPoolGetAttribute"))  # noqa: E731
    return {"used": get(attr.cudaMemPoolAttrUsedMemCurrent), "used_peak": get(attr.cudaMemPoolAttrUsedMemHigh),
            "reserved": get(attr.cudaMemPoolAttrReservedMemCurrent)}


def reset_pool_peak(ordinal: int | None = None) -> None:
    from cuda.bindings import driver as _drv
    pool = props(current_ordinal() if ordinal is None else ordinal).pool
    check(_rt.cudaMemPoolSetAttribute(pool, _rt.cudaMemPoolAttr.cudaMemPoolAttrUsedMemHigh,
                                      _drv.cuuint64_t(0)), "cudaMemPoolSetAttribute")


def trim_pool(keep_bytes: int = 0, ordinal: int | None = None) -> None:
    """Return a GPU pool's cached free memory to the driver, down to keep_bytes, after the
    buffers kept for reuse (see malloc) go back to the pool."""
    ordinal = current_ordinal() if ordinal is None else ordinal
    pool = props(ordinal).pool
    release_kept(ordinal)
    check(_rt.cudaMemPoolTrimTo(pool, keep_bytes), "cudaMemPoolTrimTo")


# ---- streams and events ----------------------------------------------------------------------
#
# Every stream object pyew passes around knows its GPU (`ordinal`) and that GPU's launch
# dimensions (`dims`): the stream is what carries the device through a call.

class _Current(threading.local):
    def __init__(self):
        self.stack: list = []         # the streams of the `with` blocks this thread is in


_current = _Current()


class _Usable:
    """What a stream a user holds offers: its GPU, and `with s:` to make it the current stream of
    that GPU for ops in the block."""
    __slots__ = ()
    reuse = None        # only a GPU's default stream keeps freed buffers (see malloc)

    @property
    def device(self) -> Device:
        return Device(self.ordinal)

    def __enter__(self):
        _current.stack.append(self)
        return self

    def __exit__(self, *exc):
        _current.stack.pop()
        return False


class Stream(_Usable):
    """A non-blocking CUDA stream on one GPU (the current one, or `device`). `with Stream() as s:`
    makes it the current stream for ops on its GPU in the block."""

    def __init__(self, device=None):
        self.cu = None
        ordinal = current_ordinal() if device is None else Device(device).id
        p = props(ordinal)
        with on(ordinal):
            self.cu = check(_rt.cudaStreamCreateWithFlags(_rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")
        self.handle = int(self.cu)
        self.ordinal = ordinal
        self.dims = p.dims

    def synchronize(self) -> None:
        _stream_sync(self.cu)

    def __del__(self):
        h = self.cu
        if h is not None and _rt is not None and not sys.is_finalizing():
            # Work already queued still runs; the driver frees the stream when it is done.
            _rt.cudaStreamDestroy(h)
            self.cu = None

    def __repr__(self):
        return f"<pyew.Stream 0x{self.handle:x} on device {self.ordinal}>"


class RawStream:
    """A stream handle pyew did not wrap in a Stream: a transfer lane's, or one another library
    gave (CUDA Array Interface, DLPack; 1 is the legacy default stream and 2 the per-thread
    default, as in the CUDA headers), on GPU `ordinal`."""
    __slots__ = ("cu", "handle", "ordinal", "dims")
    reuse = None

    def __init__(self, cu, ordinal: int):
        self.cu = cu
        self.handle = int(cu)
        self.ordinal = ordinal
        p = props(ordinal)
        self.dims = p.dims


class ExternalStream(_Usable, RawStream):
    """A stream another library owns, for `stream=`: pyew's work then queues on it, ordered with
    that library's own. Give the stream object (a `torch.cuda.Stream`, a CuPy stream): pyew keeps
    it alive as long as its arrays allocated on that stream are (they are freed on it), and takes
    its GPU from it. A raw handle (an int; 0 is the GPU's legacy default stream) must be kept alive
    by its owner likewise. `with ExternalStream(s):` makes it the current stream of its GPU for ops
    in the block, as `with Stream()` does."""
    __slots__ = ("owner",)

    def __init__(self, stream, device=None):
        owner, index = None, None
        if isinstance(stream, int):
            handle = stream
        elif hasattr(stream, "cuda_stream"):          # torch.cuda.Stream
            handle, owner = stream.cuda_stream, stream
            index = getattr(getattr(stream, "device", None), "index", None)
        elif hasattr(stream, "ptr"):                  # a CuPy stream
            handle, owner, index = stream.ptr, stream, getattr(stream, "device_id", None)
        else:
            handle = None
        if not isinstance(handle, int) or handle < 0:
            raise TypeError(f"ExternalStream takes a stream (torch.cuda.Stream, a CuPy stream) or its handle "
                            f"(a non-negative int), not {stream!r}")
        if device is None:
            device = index
        ordinal = current_ordinal() if device is None else Device(device).id
        super().__init__(_rt.cudaStream_t(handle), ordinal)
        self.owner = owner

    def synchronize(self) -> None:
        with on(self.ordinal):
            _stream_sync(self.cu)

    def __repr__(self):
        return f"<pyew.ExternalStream 0x{self.handle:x} on device {self.ordinal}>"


class _DefaultStream:
    """A GPU's legacy default stream (handle 0), used when no stream is given or current. It also
    keeps that GPU's freed buffers for reuse (see malloc)."""

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.handle = 0
        self.cu = _rt.cudaStream_t(0) if _rt is not None else None
        self.reuse: dict[int, list[int]] = {}     # nbytes -> freed buffers of that size (see malloc)
        self.held = 0                             # bytes in those lists

    def __getattr__(self, name):
        # `dims` is read on every launch: a plain attribute once the GPU is open
        if name != "dims":
            raise AttributeError(name)
        p = props(self.ordinal)
        self.dims = p.dims
        return self.dims

    @property
    def device(self) -> Device:
        return Device(self.ordinal)

    def synchronize(self) -> None:
        with on(self.ordinal):
            _stream_sync(self.cu)

    def __repr__(self):
        return f"<pyew default stream of device {self.ordinal}>"


_defaults: dict[int, _DefaultStream] = {}
DEFAULT_STREAM = _defaults[0] = _DefaultStream(0)


def default_stream(ordinal: int) -> _DefaultStream:
    d = _defaults.get(ordinal)
    if d is None:
        check_ordinal(ordinal)
        d = _defaults.setdefault(ordinal, _DefaultStream(ordinal))
    return d


def current_stream(ordinal: int | None = None):
    """The stream ops on GPU `ordinal` (the current one by default) use when none is passed: the
    innermost `with Stream()` of that GPU, else its default stream."""
    if ordinal is None:
        ordinal = current_ordinal()
    for s in reversed(_current.stack):
        if s.ordinal == ordinal:
            return s
    return _defaults.get(ordinal) or default_stream(ordinal)


def resolve_stream(stream):
    """The stream of a call: the given pyew.Stream, else the current stream of the call's GPU."""
    if stream is None:
        st = _current.stack
        if not _several:
            return st[-1] if st else DEFAULT_STREAM
        return current_stream()
    if isinstance(stream, (Stream, _DefaultStream, ExternalStream)):
        if _several and stream.ordinal != current_ordinal():
            raise ValueError(f"stream {stream!r} is on device {stream.ordinal}, but this call runs on device "
                             f"{current_ordinal()} (its GPU operands' device, or the current one)")
        return stream
    raise TypeError(f"stream must be a pyew.Stream, a pyew.ExternalStream or None, not {type(stream).__name__}")


def foreign_stream(handle: int, ordinal: int) -> RawStream:
    """A stream another library gave by handle (CUDA Array Interface, DLPack) on GPU `ordinal`."""
    return RawStream(_rt.cudaStream_t(handle), ordinal)


class Event:
    """A CUDA event on the current GPU, without timing (cheap to record and wait on), or with
    timing for benchmarks."""
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
    """One event per thread and GPU for stream-to-stream waits: a wait captures the event's state
    when it is queued, so the same event can be recorded again right after."""

    def __init__(self):
        self.events: dict[int, Event] = {}


_handshake = _Handshake()


def stream_wait(waiter, other) -> None:
    """Make stream `waiter` wait for the work queued so far on stream `other` (no host sync).
    Both are stream objects; they may be on different GPUs."""
    o = other.ordinal
    with on(o):                 # an event records on a stream of its own GPU, the current one
        ev = _handshake.events.get(o)
        if ev is None:
            ev = _handshake.events[o] = Event()
        ev.record(other.cu)
    with on(waiter.ordinal):    # handle 0 means the current GPU's legacy stream
        wait_event(waiter.cu, ev)


def synchronize() -> None:
    """Wait for all work on the current device."""
    with on(current_ordinal()):
        check(_rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")


# ---- device memory ---------------------------------------------------------------------------

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
    d = _defaults.get(ordinal)
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
                check(_rt.cudaFreeAsync(ptr, d.cu), "cudaFreeAsync")
            _stream_sync(d.cu)
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
    err, ptr = _rt.cudaMallocAsync(nbytes, stream.cu)
    if int(err) != 0 and err == _rt.cudaError_t.cudaErrorMemoryAllocation and release_kept(stream.ordinal):
        err, ptr = _rt.cudaMallocAsync(nbytes, stream.cu)
    if int(err) != 0:
        if err == _rt.cudaError_t.cudaErrorMemoryAllocation:
            with on(stream.ordinal):
                free_b, total = check(_rt.cudaMemGetInfo(), "cudaMemGetInfo")
            raise CudaError(int(err), _name(err), "cudaMallocAsync",
                            f"out of GPU memory allocating {nbytes} bytes on device {stream.ordinal} ({free_b} "
                            f"of {total} bytes free); free DeviceArrays you no longer need, or pass numpy "
                            "arrays, which stream through a bounded device budget")
        check((err,), "cudaMallocAsync")
    return int(ptr)


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
    if _several:
        with on(stream.ordinal):
            check(_rt.cudaFreeAsync(ptr, stream.cu), "cudaFreeAsync")
    else:
        check(_rt.cudaFreeAsync(ptr, stream.cu), "cudaFreeAsync")


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
            stream = new_stream(ordinal)
            with on(ordinal):
                base = malloc(8 * _CONSTANT_SLOTS, RawStream(stream, ordinal))
            table = _constants[ordinal] = _Constants(base, stream)
        ptr = table.slots.get((bits, itemsize))
        if ptr is None:
            if table.used == _CONSTANT_SLOTS:
                return 0
            ptr = table.base + 8 * table.used
            value = ctypes.c_uint64(bits)
            with on(ordinal):
                copy_htod(ptr, ctypes.addressof(value), itemsize, table.stream)
                stream_synchronize(table.stream)
            table.used += 1
            table.slots[(bits, itemsize)] = ptr
        return ptr


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


def copy_peer(dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int, stream_cu) -> None:
    """Copy between two GPUs' memory, ordered on `stream_cu` (the driver picks the path)."""
    if nbytes:
        check(_rt.cudaMemcpyPeerAsync(dst, dst_ordinal, src, src_ordinal, nbytes, stream_cu),
              "cudaMemcpyPeerAsync")


def new_stream(ordinal: int):
    """A raw non-blocking stream handle on GPU `ordinal` for pyew's own use (transfer lanes)."""
    props(ordinal)
    with on(ordinal):
        return check(_rt.cudaStreamCreateWithFlags(_rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")


def stream_synchronize(stream_cu) -> None:
    _stream_sync(stream_cu)


def destroy_stream(stream_cu) -> None:
    if _rt is not None and not sys.is_finalizing():
        _rt.cudaStreamDestroy(stream_cu)


# ---- pinned host memory ----------------------------------------------------------------------

def host_alloc(nbytes: int) -> int:
    """Page-locked host memory (the DMA engines of every GPU read and write it at full PCIe speed)."""
    _counted()
    err, ptr = _rt.cudaHostAlloc(nbytes, _rt.cudaHostAllocPortable)
    if int(err) != 0:
        raise CudaError(int(err), _name(err), "cudaHostAlloc",
                        f"cannot pin {nbytes} bytes of host memory; lower pyew's pinned budget "
                        "(pyew.set_transfer_limits(pinned_bytes=...))")
    return int(ptr)


def host_free(ptr: int) -> None:
    if ptr and _rt is not None and not sys.is_finalizing():
        _rt.cudaFreeHost(ptr)


def host_pinned(ptr: int) -> bool:
    """Whether host address `ptr` is page-locked memory CUDA knows (cudaHostAlloc'd or registered),
    which the DMA engines can read and write in place."""
    err, attrs = _rt.cudaPointerGetAttributes(ptr)
    return int(err) == 0 and attrs.type == _rt.cudaMemoryType.cudaMemoryTypeHost


def host_register(ptr: int, nbytes: int) -> None:
    """Page-lock an existing host buffer in place, so the DMA engines can read or write it."""
    check(_rt.cudaHostRegister(ptr, nbytes, _rt.cudaHostRegisterPortable), "cudaHostRegister")


def host_unregister(ptr: int) -> None:
    check(_rt.cudaHostUnregister(ptr), "cudaHostUnregister")
