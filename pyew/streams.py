"""Streams and events.

Every stream object pyew passes around knows its GPU (`ordinal`) and that GPU's launch dimensions
(`dims`): the stream is what carries the device through a call. Every CUDA call about streams and
events goes through `cuda` (a CudaStreams; the CPU tests swap in a stand-in).
"""
from __future__ import annotations

import sys
import threading

from . import cudart
from .cudart import check
from .devices import Device, check_ordinal, current_ordinal, gpus, on, props


class CudaStreams(cudart.Calls):
    """The CUDA runtime calls about streams and events."""
    blocking = None        # (event wait, stream wait) that release the GIL: see use_blocking_waits

    def create(self):
        """A non-blocking stream on the current GPU."""
        return check(self.rt.cudaStreamCreateWithFlags(self.rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")

    def destroy(self, stream) -> None:
        # Work already queued still runs; the driver frees the stream when it is done.
        if self.rt is not None and not sys.is_finalizing():
            self.rt.cudaStreamDestroy(stream)

    def handle(self, value: int):
        """The stream of handle `value` (another library's, or 0: the legacy default stream)."""
        return self.rt.cudaStream_t(value) if self.rt is not None else None

    def synchronize(self, stream) -> None:
        self._wait(1, stream, self.rt.cudaStreamSynchronize, "cudaStreamSynchronize")

    def event(self, timing: bool):
        flags = self.rt.cudaEventDefault if timing else self.rt.cudaEventDisableTiming
        return check(self.rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")

    def destroy_event(self, event) -> None:
        if self.rt is not None and not sys.is_finalizing():
            self.rt.cudaEventDestroy(event)

    def record(self, event, stream) -> None:
        check(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def synchronize_event(self, event) -> None:
        self._wait(0, event, self.rt.cudaEventSynchronize, "cudaEventSynchronize")

    def done(self, event) -> bool:
        err = self.rt.cudaEventQuery(event)[0]
        if err == self.rt.cudaError_t.cudaErrorNotReady:
            return False
        check((err,), "cudaEventQuery")
        return True

    def elapsed_ms(self, start, end) -> float:
        return float(check(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    def wait(self, stream, event) -> None:
        """Make `stream` wait for `event` (no host sync)."""
        check(self.rt.cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent")

    def _wait(self, which: int, what, call, where: str) -> None:
        waits = CudaStreams.blocking
        if waits is None:
            check(call(what), where)
        else:
            rc = waits[which](what)
            if rc:
                check((self.rt.cudaError_t(rc),), where)


cuda = CudaStreams()


def use_blocking_waits(event_sync, stream_sync) -> None:
    """Host waits through functions that release the GIL while they block (libew's, called with
    ctypes): the transfer engine's workers wait for their copies without stopping each other.
    Each returns a cudaError_t value."""
    CudaStreams.blocking = (event_sync, stream_sync)


class _PerThread(threading.local):
    def __init__(self):
        self.stack: list = []         # the streams of the `with` blocks this thread is in
        # One event per GPU for stream-to-stream waits: a wait captures the event's state when it
        # is queued, so the same event can be recorded again right after.
        self.events: dict[int, Event] = {}


_thread = _PerThread()


class _Usable:
    """What a stream a user holds offers: its GPU, and `with s:` to make it the current stream of
    that GPU for ops in the block."""
    __slots__ = ()
    reuse = None        # only a GPU's default stream keeps freed buffers (see memory.malloc)

    @property
    def device(self) -> Device:
        return Device(self.ordinal)

    def __enter__(self):
        _thread.stack.append(self)
        return self

    def __exit__(self, *exc):
        _thread.stack.pop()
        return False

    def synchronize(self) -> None:
        with on(self.ordinal):
            cuda.synchronize(self.cu)


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
        self.dims = props(ordinal).dims

    def __repr__(self):
        return f"<pyew.{type(self).__name__} 0x{self.handle:x} on device {self.ordinal}>"


class Stream(_Usable, RawStream):
    """A non-blocking CUDA stream on one GPU (the current one, or `device`). `with Stream() as s:`
    makes it the current stream for ops on its GPU in the block."""

    def __init__(self, device=None):
        self.cu = None
        ordinal = current_ordinal() if device is None else Device(device).id
        self.api = cuda             # destroyed through the calls that made it
        super().__init__(new_stream(ordinal), ordinal)

    def __del__(self):
        if self.cu is not None:
            self.api.destroy(self.cu)
            self.cu = None


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
        super().__init__(cuda.handle(handle), ordinal)
        self.owner = owner


class DefaultStream(_Usable):
    """A GPU's legacy default stream (handle 0), used when no stream is given or current. It also
    keeps that GPU's freed buffers for reuse (see memory.malloc)."""

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.handle = 0
        self.cu = cuda.handle(0)
        self.reuse: dict[int, list[int]] = {}     # nbytes -> freed buffers of that size (see memory.malloc)
        self.held = 0                             # bytes in those lists

    def __getattr__(self, name):
        # `dims` is read on every launch: a plain attribute once the GPU is open
        if name != "dims":
            raise AttributeError(name)
        self.dims = props(self.ordinal).dims
        return self.dims

    def __repr__(self):
        return f"<pyew default stream of device {self.ordinal}>"


defaults: dict[int, DefaultStream] = {}      # per GPU, made on first use
DEFAULT_STREAM = defaults[0] = DefaultStream(0)


def forget() -> None:
    """Forget what came from `cuda` and the devices (tests swapping them): the default streams of
    GPUs but the first (made again on use), the first one's launch dimensions, and this thread's
    handshake events."""
    for ordinal in [o for o in defaults if o]:
        del defaults[ordinal]
    DEFAULT_STREAM.__dict__.pop("dims", None)
    _thread.events.clear()


def default_stream(ordinal: int) -> DefaultStream:
    d = defaults.get(ordinal)
    if d is None:
        check_ordinal(ordinal)
        d = defaults.setdefault(ordinal, DefaultStream(ordinal))
    return d


def current_stream(ordinal: int | None = None):
    """The stream ops on GPU `ordinal` (the current one by default) use when none is passed: the
    innermost `with Stream()` of that GPU, else its default stream."""
    if ordinal is None:
        ordinal = current_ordinal()
    for s in reversed(_thread.stack):
        if s.ordinal == ordinal:
            return s
    return defaults.get(ordinal) or default_stream(ordinal)


def resolve_stream(stream):
    """The stream of a call: the given pyew.Stream, else the current stream of the call's GPU."""
    if stream is None:
        st = _thread.stack
        if not gpus.several:
            return st[-1] if st else DEFAULT_STREAM
        return current_stream()
    if isinstance(stream, _Usable):
        if gpus.several and stream.ordinal != current_ordinal():
            raise ValueError(f"stream {stream!r} is on device {stream.ordinal}, but this call runs on device "
                             f"{current_ordinal()} (its GPU operands' device, or the current one)")
        return stream
    raise TypeError(f"stream must be a pyew.Stream, a pyew.ExternalStream or None, not {type(stream).__name__}")


def current_if_one_gpu():
    """The current stream where exactly one GPU is counted (a call then needs no device of its
    own), else None."""
    if gpus.count != 1:
        return None
    st = _thread.stack
    return st[-1] if st else DEFAULT_STREAM


def foreign_stream(handle: int, ordinal: int) -> RawStream:
    """A stream another library gave by handle (CUDA Array Interface, DLPack) on GPU `ordinal`."""
    return RawStream(cuda.handle(handle), ordinal)


def new_stream(ordinal: int):
    """A raw non-blocking stream handle on GPU `ordinal` for pyew's own use (transfer lanes)."""
    props(ordinal)
    with on(ordinal):
        return cuda.create()


def stream_synchronize(stream_cu) -> None:
    cuda.synchronize(stream_cu)


def destroy_stream(stream_cu) -> None:
    cuda.destroy(stream_cu)


class Event:
    """A CUDA event on the current GPU, without timing (cheap to record and wait on), or with
    timing for benchmarks."""
    __slots__ = ("cu", "api")

    def __init__(self, timing: bool = False):
        self.cu = None
        self.api = cuda
        self.cu = cuda.event(timing)

    def record(self, stream_cu) -> None:
        self.api.record(self.cu, stream_cu)

    def synchronize(self) -> None:
        self.api.synchronize_event(self.cu)

    def done(self) -> bool:
        return self.api.done(self.cu)

    def elapsed_ms(self, start: "Event") -> float:
        return self.api.elapsed_ms(start.cu, self.cu)

    def __del__(self):
        if self.cu is not None:
            self.api.destroy_event(self.cu)
            self.cu = None


def wait_event(stream_cu, event: Event) -> None:
    cuda.wait(stream_cu, event.cu)


def stream_wait(waiter, other) -> None:
    """Make stream `waiter` wait for the work queued so far on stream `other` (no host sync).
    Both are stream objects; they may be on different GPUs."""
    o = other.ordinal
    with on(o):                 # an event records on a stream of its own GPU, the current one
        ev = _thread.events.get(o)
        if ev is None:
            ev = _thread.events[o] = Event()
        ev.record(other.cu)
    with on(waiter.ordinal):    # handle 0 means the current GPU's legacy stream
        wait_event(waiter.cu, ev)
