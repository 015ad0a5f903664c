"""DeviceArray: a C-contiguous n-d array in GPU memory; its numpy behaviour (operators, numpy's
ufuncs, reshape, printing); and how it leaves pyew (numpy through the transfer engine, explicitly;
the CUDA Array Interface and DLPack for other GPU libraries)."""
from __future__ import annotations

import contextlib
import itertools
import math
import operator
import sys
import threading
import time
import uuid

import numpy as np

from . import dlpack, library, pinned, transfer
from . import dtypes as dt
from . import runtime as rt

_order_lock = threading.Lock()      # the streams of an array's uses, changed by several threads


class _Ordered:
    """The order of an array's uses across streams: a write waits for the last write and for the
    reads since it, a read for the last write alone, so reads on several streams still overlap.
    `last` is the stream of the last write (what a consumer waits for), `readers` the other
    streams that read since."""
    __slots__ = ()

    def read_on(self, stream) -> None:
        if self.last is stream:
            return
        with _order_lock:
            readers = self.readers
            # by the CUDA stream, not the object: a new pyew.ExternalStream over one stream per call
            if readers is not None and any(not _other(r, stream) for r in readers):
                return
            last = self.last
            if _other(last, stream):
                rt.stream_wait(stream, last)
            self.readers = [stream] if readers is None else [*readers, stream]
        self.read_by(stream)

    def used_on(self, stream) -> None:
        if self.last is stream and self.readers is None:
            return
        with _order_lock:
            for s in (self.last, *(self.readers or ())):
                if _other(s, stream):
                    rt.stream_wait(stream, s)
            self.set_last(stream)
            self.readers = None
        self.read_by(stream)

    def settled_on(self, stream) -> None:
        """Another library's `stream` (a consumer's, which may write) waits for every use queued so
        far: the last write and the reads since. It is not recorded as a use: pyew cannot know how
        long that stream lives."""
        with _order_lock:
            uses = (self.last, *(self.readers or ()))
        for s in uses:
            if s.ordinal != stream.ordinal or (s.handle or 1) != (stream.handle or 1):
                rt.stream_wait(stream, s)

    def _add_other(self, stream) -> None:
        """Record `stream` among the others (once per CUDA stream) that its owner's stream or its
        free waits for."""
        with _order_lock:          # two threads adding streams at once keep both
            if self.others is None:
                self.others = []
            if all(_other(o, stream) for o in self.others):
                self.others.append(stream)

    def settled(self):
        """The stream whose queued work covers every use so far (the CUDA Array Interface names one
        stream): the last write's, after it waits for the reads since."""
        with _order_lock:
            last, readers = self.last, self.readers
        for s in readers or ():
            if _other(s, last):
                rt.stream_wait(last, s)
        return last


class Buffer(_Ordered):
    """Owns one pool allocation. Freed on its own stream when the last view goes away; streams it
    was used on besides that one are waited for first, so the free cannot overtake their work."""
    __slots__ = ("ptr", "nbytes", "stream", "others", "last", "readers", "__weakref__")

    def __init__(self, nbytes: int, stream):
        self.ptr = 0
        self.others = None
        self.ptr = rt.malloc(nbytes, stream)
        self.nbytes = nbytes
        self.stream = stream
        self.last = stream
        self.readers = None

    def set_last(self, stream) -> None:
        self.last = stream

    def read_by(self, stream) -> None:
        """A stream of this or another GPU (a peer copy) uses this buffer: the free waits for it."""
        if stream is not self.stream:
            self._add_other(stream)

    def __del__(self):
        if not getattr(self, "ptr", 0):       # its __init__ did not get as far as allocating
            return
        try:
            if self.others is None:
                rt.free(self.ptr, self.stream, self.nbytes)     # one stream: nothing to order
            elif not sys.is_finalizing():
                with rt.on(self.stream.ordinal):
                    self._release()
        except Exception:   # never raise from a finalizer (e.g. the context is gone at exit)
            pass
        self.ptr = 0

    def _release(self) -> None:
        for s in self.others or ():
            rt.stream_wait(self.stream, s)
        rt.free(self.ptr, self.stream, self.nbytes)


class Foreign(_Ordered):
    """Memory another library owns (imported through CUDA Array Interface or DLPack): `owner`
    keeps it alive. `producer`: the owner's stream the import waited for, where it is known
    (torch's or CuPy's current stream, CUDA Array Interface v3's `stream`) and is not the call's.
    When the import ends, the producer's stream waits for every pyew stream that used the memory,
    so the owner's later work (a write, its allocator reusing a freed temporary) follows pyew's
    kernels as it would on one stream. An import made for one call ends with the call; a view the
    caller keeps (pyew.asarray, pyew.from_dlpack) drops its producer (`keep`): like any consumer
    of these protocols, its user orders the owner's later work (pyew.ExternalStream)."""
    __slots__ = ("owner", "ordinal", "used", "read_only", "readers", "producer", "others", "release", "__weakref__")

    def __init__(self, owner, read_only: bool = False, ordinal: int = 0, stream=None, producer=None):
        # An operand is imported on every call that takes one: the streams are looked up only
        # when asked for. `stream`: the one the import ordered after the producer's work, which
        # a consumer of this array must then wait for.
        self.owner = owner
        self.ordinal = ordinal
        self.used = stream
        self.read_only = read_only
        self.readers = None
        self.producer = producer
        self.others = [stream] if producer is not None and stream is not None and _other(producer, stream) else None
        # a DLPack tensor whose producer names no stream: released once pyew's work on it is done
        self.release = owner.take() if producer is None and type(owner) is dlpack.Managed else None

    @property
    def stream(self):
        return rt.default_stream(self.ordinal)

    @property
    def last(self):
        return self.used if self.used is not None else rt.default_stream(self.ordinal)

    def set_last(self, stream) -> None:
        self.used = stream

    def read_by(self, stream) -> None:
        """A pyew stream uses the memory: the producer's stream will wait for it."""
        p = self.producer
        if p is not None and _other(p, stream):
            self._add_other(stream)

    def keep(self) -> None:
        """The caller keeps this import as its own view: its producer may not outlive it, so no
        stream of the producer is waited on for it."""
        self.producer = self.others = None

    def __del__(self):
        if sys.is_finalizing():
            return
        p, others, taken = self.producer, self.others, self.release
        self.release = None
        try:
            if p is not None and others:
                for s in others:
                    rt.stream_wait(p, s)
            if taken is not None:
                _release_after(taken, self.ordinal, (self.last, *(self.readers or ())))
                taken = None
        except Exception:   # never raise from a finalizer
            pass
        if taken is not None:       # no event could be recorded: released now, as before
            with contextlib.suppress(Exception):
                dlpack.run_deleter(taken)


# DLPack imports whose producer's stream is unknown (JAX's, for one): their capsule's deleter may
# let the producer's allocator reuse the memory on a stream pyew's queued work does not precede,
# so it runs only once that work is done (an event per stream that used it): at once where the
# work is done by then, else at the next import, or by a thread that looks every few
# milliseconds while any wait.
_releases: list = []            # (events, taken): appended without a lock (a finalizer may append)
_releases_lock = threading.Lock()
_reaper_lock = threading.RLock()
_reaper: list = []              # the looking thread, while one runs


def _release_after(taken, ordinal: int, streams) -> None:
    events = []
    with rt.on(ordinal):
        for s in streams:
            e = rt.Event()
            e.record(s.cu)
            events.append(e)
    if all(e.done() for e in events):
        dlpack.run_deleter(taken)
        return
    _releases.append((events, taken))
    with _reaper_lock:
        if not _reaper:
            t = threading.Thread(target=_reap, name="pyew-dlpack-release", daemon=True)
            _reaper.append(t)
            t.start()


def _reap() -> None:
    while True:
        time.sleep(0.005)
        release_finished()
        with _reaper_lock:
            if not _releases:
                _reaper.clear()
                return


def release_finished() -> None:
    """Release the DLPack tensors whose pyew work is done (their producers' deleters run)."""
    if not _releases:
        return
    with _releases_lock:
        done = [r for r in list(_releases) if all(e.done() for e in r[0])]
        for r in done:
            _releases.remove(r)
    for _, taken in done:           # outside the lock
        with contextlib.suppress(Exception):
            dlpack.run_deleter(taken)


def _unpickled(values: np.ndarray) -> "DeviceArray":
    return from_host(values, rt.resolve_stream(None))


def keep_view(d: "DeviceArray") -> "DeviceArray":
    """d, an import of another library's GPU array that the caller keeps (Foreign.keep)."""
    if isinstance(d.buffer, Foreign):
        d.buffer.keep()
    return d


def _other(a, b) -> bool:
    """Whether streams a and b are two queues (not the same handle on one GPU)."""
    return a.handle != b.handle or a.ordinal != b.ordinal


def normalize_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, not {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


# Operators and numpy's ufuncs run through pyew.ufuncs, which sits above this module (it needs the
# op table) and hands itself over here when it is imported; pyew's package imports it.
_ufuncs = None


def use_ufuncs(module) -> None:
    global _ufuncs
    _ufuncs = module


def _arith(ufunc: str, stem: str):
    """__<stem>__, __r<stem>__ and __i<stem>__ of an arithmetic operator: numpy's `ufunc`."""
    def forward(self, other):
        return _ufuncs.binary(ufunc, self, other)

    def reflected(self, other):
        return _ufuncs.reflected(ufunc, self, other)

    def inplace(self, other):
        return _ufuncs.inplace(ufunc, self, other)
    return _named(forward, f"__{stem}__"), _named(reflected, f"__r{stem}__"), _named(inplace, f"__i{stem}__")


def _compare(ufunc: str, stem: str):
    def compare(self, other):
        return _ufuncs.binary(ufunc, self, other)
    return _named(compare, f"__{stem}__")


def _unary(ufunc: str, stem: str):
    def unary(self):
        return _ufuncs.unary(ufunc, self)
    return _named(unary, f"__{stem}__")


def _named(fn, name: str):
    fn.__name__ = name
    fn.__qualname__ = f"DeviceArray.{name}"
    return fn


class DeviceArray:
    """A C-contiguous array on the GPU. Ops take and return DeviceArrays without host copies;
    .get() brings the data back; torch.from_dlpack, cupy.asarray and others take it without a copy
    (DLPack, CUDA Array Interface).

    As numpy arrays do (CuPy is the model): the operators (+ - * / // % ** & | ^ << >>, their
    reflected and in-place forms, comparisons, unary - + ~ and abs()) and numpy's ufuncs
    (np.exp(d), np.add(d, x, out=d)) run the op that implements the ufunc, on the GPU, and return
    DeviceArrays; an operator or ufunc the loaded library has no op for is a TypeError naming it
    (pyew.ufuncs). == and != give arrays, so a DeviceArray is unhashable.

    np.asarray(d) and np.array(d) raise TypeError, as CuPy's arrays do: a copy to the host is a
    transfer and a wait, and numpy functions that are not ufuncs (np.concatenate, np.sort,
    np.clip, ...) would otherwise take it silently and return numpy arrays computed on the CPU.
    Call d.get() to copy to the host. Printing (repr, str) and float(d), int(d), bool(d) of one element copy
    what they show.

    `buffer` is the memory it views (pyew's Buffer, or Foreign over another library's), shared by
    its views: the streams that used it, which frees and later uses wait for."""
    __slots__ = ("buffer", "ptr", "shape", "dtype", "info", "size", "__weakref__")
    __hash__ = None         # == gives an array, as numpy's and CuPy's arrays do

    def __init__(self, buf, ptr: int, shape: tuple[int, ...], info: dt.DType, size: int | None = None):
        self.buffer = buf
        self.ptr = ptr
        self.shape = shape
        self.info = info
        self.dtype = info.np
        if size is None:
            size = 1
            for s in shape:
                size *= s
        self.size = size

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def new(cls, shape, info: dt.DType, stream=None, size: int | None = None) -> "DeviceArray":
        """A new array of `shape` (of `size` elements, where the caller knows it) and pyew dtype
        row `info` (or a dtype numpy reads), allocated on `stream` (None: the current one),
        uninitialised. pyew.empty(shape, dtype, stream, device) is the same for users."""
        if stream is None or type(info) is not dt.DType or type(shape) is not tuple:     # a user's call
            info = info if type(info) is dt.DType else lookup_dtype(info)
            stream = rt.resolve_stream(None) if stream is None else stream
            shape = normalize_shape(shape)
        if size is None:
            size = 1
            for s in shape:
                size *= s
        buf = Buffer(size * info.itemsize, stream)
        return cls(buf, buf.ptr, shape, info, size)

    # -- properties ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.info.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.info.itemsize

    @property
    def owner(self):
        """What keeps the memory alive: a pyew allocation, or the foreign object it came from."""
        b = self.buffer
        return b.owner if isinstance(b, Foreign) else b

    @property
    def readonly(self) -> bool:
        return isinstance(self.buffer, Foreign) and self.buffer.read_only

    @property
    def device(self) -> rt.Device:
        """The GPU this array lives on."""
        return rt.Device(self.buffer.stream.ordinal)

    @property
    def ordinal(self) -> int:
        """The index of the GPU this array lives on."""
        return self.buffer.stream.ordinal

    def used_on(self, stream) -> None:
        """Work queued on `stream` next writes this array (or may: torch's record_stream): `stream`
        first waits (on the GPU) for the last write and the reads since on other streams; its
        memory is not freed before that work ran, and a consumer of it (DLPack, the CUDA Array
        Interface) waits for that stream. pyew's calls do this for what they write, and read_on
        for what they read, so uses of an array run in the order they were queued whatever their
        streams, and reads on several streams still overlap."""
        self.buffer.used_on(stream)

    def read_on(self, stream) -> None:
        """Work queued on `stream` next reads this array: `stream` first waits for its last write
        on another stream; its memory is not freed before that work ran."""
        self.buffer.read_on(stream)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d DeviceArray")
        return (self[i] for i in range(self.shape[0]))

    def __contains__(self, value) -> bool:
        """`value in d`, numpy's (d == value).any(), on the values copied to the host."""
        return value.get() in self.get() if isinstance(value, DeviceArray) else value in self.get()

    def __index__(self) -> int:
        if self.ndim or self.info.kind != "int":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self.get())

    # -- numpy's operators and ufuncs (pyew.ufuncs) ---------------------------------------------
    __add__, __radd__, __iadd__ = _arith("add", "add")
    __sub__, __rsub__, __isub__ = _arith("subtract", "sub")
    __mul__, __rmul__, __imul__ = _arith("multiply", "mul")
    __truediv__, __rtruediv__, __itruediv__ = _arith("divide", "truediv")
    __floordiv__, __rfloordiv__, __ifloordiv__ = _arith("floor_divide", "floordiv")
    __mod__, __rmod__, __imod__ = _arith("remainder", "mod")
    __and__, __rand__, __iand__ = _arith("bitwise_and", "and")
    __or__, __ror__, __ior__ = _arith("bitwise_or", "or")
    __xor__, __rxor__, __ixor__ = _arith("bitwise_xor", "xor")
    __lshift__, __rlshift__, __ilshift__ = _arith("left_shift", "lshift")
    __rshift__, __rrshift__, __irshift__ = _arith("right_shift", "rshift")
    __lt__ = _compare("less", "lt")
    __le__ = _compare("less_equal", "le")
    __gt__ = _compare("greater", "gt")
    __ge__ = _compare("greater_equal", "ge")
    __eq__ = _compare("equal", "eq")
    __ne__ = _compare("not_equal", "ne")
    __neg__ = _unary("negative", "neg")
    __pos__ = _unary("positive", "pos")
    __abs__ = _unary("absolute", "abs")
    __invert__ = _unary("invert", "invert")

    def __pow__(self, other, mod=None):
        return _ufuncs.power(self, other) if mod is None else NotImplemented

    def __rpow__(self, other, mod=None):
        return _ufuncs.reflected("power", self, other) if mod is None else NotImplemented

    def __ipow__(self, other):
        return _ufuncs.power(self, other, in_place=True)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _ufuncs.array_ufunc(ufunc, method, inputs, kwargs)

    # -- Python scalars of one element (copied to the host, as numpy's and CuPy's) -----------------
    def _one(self, what: str) -> np.ndarray:
        if self.size != 1:
            raise TypeError(f"only 0-dimensional arrays can be converted to Python scalars ({what} of a "
                            f"DeviceArray of shape {self.shape}); copy it to the host with .get()")
        return self.get()

    def __bool__(self) -> bool:
        if self.size > 1:
            raise ValueError("The truth value of an array with more than one element is ambiguous; copy it "
                             "to the host with .get() and use .any() or .all()")
        return bool(self.get())        # numpy's answer, and its error for an empty array

    def __float__(self) -> float:
        return float(self._one("float()"))

    def __int__(self) -> int:
        return int(self._one("int()"))

    # -- other GPU libraries --------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA Array Interface v3. `stream` is the stream whose queued work a consumer must wait
        for (1 = the legacy default stream). bfloat16 has no typestr a consumer understands
        (it reads as '<V2'): use DLPack (torch.from_dlpack) for bfloat16."""
        last = self.buffer.settled()
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr if self.size else 0, self.readonly),
                "version": 3, "strides": None, "stream": last.handle or 1}

    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.KDL_CUDA, self.buffer.stream.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export (array API standard). stream: the consumer's stream (an int: 1 = legacy
        default, 2 = per-thread default, -1 = no synchronization, None = legacy default); pyew's
        queued work on this array is ordered before it with an event, not a device sync.
        max_version: (major, minor) the consumer reads; (1, x) gets a versioned capsule, None or
        (0, x) the legacy one. dl_device: must be this GPU. copy: True exports a copy, False never
        copies (pyew never needs to), None either."""
        ordinal = self.buffer.stream.ordinal
        if dl_device is not None and tuple(dl_device) != (dlpack.KDL_CUDA, ordinal):
            raise BufferError(f"this array is on (kDLCUDA, {ordinal}) and pyew exports it only there, not to "
                              f"{tuple(dl_device)}; move it with .to_device() or copy to the host with .get()")
        if stream is not None and stream != -1:
            if not isinstance(stream, int) or stream == 0:
                raise BufferError(f"__dlpack__: stream must be an int other than 0 (1 = legacy default "
                                  f"stream, 2 = per-thread default), got {stream!r}")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        if self.readonly and not copy and not versioned:
            raise BufferError("this GPU array is read-only, and a DLPack consumer that does not pass max_version "
                              "(1, x) cannot be told so: pass max_version=(1, 0), or copy=True for a writable copy")
        with rt.on(ordinal):
            if copy:
                s = rt.resolve_stream(None)
                src = self.copy(stream=s)
                if stream == -1:        # the consumer synchronizes itself, and cannot with a copy it did not ask for
                    rt.stream_synchronize(s.cu)
            else:
                src = self
            if stream != -1:
                src.buffer.settled_on(rt.foreign_stream(1 if stream is None else stream, ordinal))
        version = min(dlpack.VERSION, tuple(max_version)) if versioned else dlpack.VERSION
        return dlpack.export(src.ptr, src.shape, src.info, ordinal, src, versioned=versioned,
                             version=version, read_only=src.readonly, copied=bool(copy))

    # -- host transfer ------------------------------------------------------------------------
    def get(self, stream=None, out: np.ndarray | None = None) -> np.ndarray:
        """Copy to a new numpy array (or into `out`, any layout) and wait for the copy. The copy
        runs after the work queued on the stream (or the current one) and on this array's own."""
        with rt.on(self.buffer.stream.ordinal):
            return self._get(stream, out)

    def _get(self, stream, out):
        s = rt.resolve_stream(stream)
        if out is None:
            out = pinned.for_result(self.shape, self.dtype)
        elif not isinstance(out, np.ndarray) or out.shape != self.shape or out.dtype != self.dtype \
                or not out.flags.writeable:
            raise ValueError(f"out must be a writeable {self.dtype} numpy array of shape {self.shape}, got "
                             + (f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__))
        if self.size:
            self.buffer.read_on(s)
            transfer.to_host(self.ptr, out, s)
        return out

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DeviceArray is not converted to a numpy array implicitly (that would be a hidden copy "
                        "from the GPU and a wait): call .get() to copy it to the host explicitly")

    # -- views and copies ---------------------------------------------------------------------
    def __getitem__(self, key):
        """Basic indexing on the first axis: d[i] or d[a:b] (step 1), and d[...] or d[()] for the
        whole array; returns a view."""
        if key is Ellipsis or (type(key) is tuple and not key):
            return DeviceArray(self.buffer, self.ptr, self.shape, self.info, self.size)
        if not self.shape:
            raise IndexError("a 0-d DeviceArray cannot be indexed")
        n = self.shape[0]
        row = self.size // n * self.itemsize if n else 0
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise ValueError("DeviceArray slices must have step 1 (views stay contiguous); "
                                 "copy to numpy with .get() for strided access")
            stop = max(stop, start)
            return DeviceArray(self.buffer, self.ptr + start * row, (stop - start,) + self.shape[1:], self.info)
        try:
            if isinstance(key, (bool, np.bool_)):       # numpy reads d[True] as a new axis, not row 1
                raise TypeError
            i = operator.index(key)
        except TypeError:
            raise IndexError(f"DeviceArray supports d[i] and d[a:b] on the first axis, not {key!r}") from None
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
        i %= n
        return DeviceArray(self.buffer, self.ptr + i * row, self.shape[1:], self.info)

    def __setitem__(self, key, value):
        """d[i] = v and d[a:b] = v (the views of __getitem__): a number or host data, assigned as
        numpy assigns (its casting, overflow errors and broadcasting), or a GPU array (converted
        and broadcast on the GPU; from another GPU copied here first; one overlapping the view
        read before it is written). d[a:b] += 1 has already written in place when Python stores
        the view back: that store is the same memory and does nothing."""
        target = self[key]
        if type(value) is DeviceArray and aliasing(target, value) == SAME:
            return
        if self.readonly:
            raise ValueError("assignment destination is read-only (a read-only GPU array of another library)")
        with rt.on(self.buffer.stream.ordinal):
            s = rt.resolve_stream(None)
            if type(value) is not DeviceArray and not isinstance(value, HOST_DATA):
                from .interop import device_index, import_device  # GPU arrays of other libraries
                at = device_index(value)
                if at is not None:
                    with rt.on(at):
                        value = import_device(value, rt.resolve_stream(None), "__setitem__", "value")
            if type(value) is DeviceArray:
                if value.shape != target.shape:
                    try:
                        fits = np.broadcast_shapes(value.shape, target.shape) == target.shape
                    except ValueError:
                        fits = False
                    if not fits:
                        raise ValueError(f"could not broadcast a GPU array of shape {value.shape} into a view of "
                                         f"shape {target.shape}")
                if value.ordinal != target.ordinal:
                    value = value.to_device(target.ordinal)
                elif aliasing(target, value) != SEPARATE:       # d[1:] = d[:-1]: as numpy, a memmove
                    value = value.copy(stream=s)
                if value.shape != target.shape:                 # d[:] = d[0]: broadcast on the GPU
                    if value.info is not target.info:
                        value = cast(value, target.info, s)
                    _ufuncs.broadcast_into(target, value, s)
                    return
                if value.info is target.info:
                    copy_into(target, value, s)
                else:
                    cast(value, target.info, s, out=target)
                return
            try:
                host = np.empty(target.shape, target.dtype)
                host[...] = value               # numpy's own assignment: its casts, errors, broadcasting
            except (TypeError, ValueError, OverflowError) as e:
                raise type(e)(f"could not assign {type(value).__name__} {np.shape(value)} to a DeviceArray view "
                              f"of {target.dtype} {target.shape}: {e}") from None
            target.used_on(s)
            if target.size and np.ndim(value) == 0:          # one value: a fill
                bits = int(host.reshape(-1)[:1].view(f"u{target.itemsize}")[0])
                from .call import fill  # call sits above this module
                fill(target.ptr, target.size, target.info, bits, s)
                return
            transfer.to_device(host, target.ptr, s)

    def reshape(self, *shape, order: str = "C", copy: bool | None = None) -> "DeviceArray":
        """The array with another shape of the same size (ints or one tuple; one dimension may be
        -1). A view, since a DeviceArray is always C-contiguous; copy=True gives a copy."""
        if not shape:
            raise TypeError("reshape() takes a shape: ints or one tuple")
        if order not in ("C", "A"):
            raise ValueError(f"reshape: pyew's arrays are C-ordered; order={order!r} is not supported")
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            try:
                shape = tuple(shape[0])
            except TypeError:
                raise TypeError(f"reshape: a shape is ints or one tuple of ints, not {shape[0]!r}") from None
        try:
            shape = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise TypeError(f"reshape: a shape is ints or one tuple of ints, not {shape!r}") from None
        if shape.count(-1) > 1:
            raise ValueError("can only specify one unknown dimension")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        shape = normalize_shape(shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
        src = self.copy() if copy else self
        return DeviceArray(src.buffer, src.ptr, shape, src.info)

    def ravel(self, order: str = "C") -> "DeviceArray":
        """The array as one dimension: a view (a DeviceArray is always C-contiguous, so 'C', 'A' and
        'K' read it alike; 'F' only for one dimension)."""
        return self.reshape(-1, order=self._flat_order(order))

    def flatten(self, order: str = "C") -> "DeviceArray":
        """A copy of the array as one dimension, on the same GPU (orders as ravel's)."""
        return self.reshape(-1, order=self._flat_order(order), copy=True)

    def _flat_order(self, order: str) -> str:
        return "C" if order == "K" or (order == "F" and self.ndim <= 1) else order

    def _check_order(self, order: str, what: str) -> None:
        """A result's order: pyew's arrays are C-ordered, which 'C', 'A' and 'K' accept, and 'F'
        for one dimension."""
        if order not in ("C", "A", "K") and not (order == "F" and self.ndim <= 1):
            raise ValueError(f"{what}: pyew's arrays are C-ordered; order={order!r} is not supported")

    def copy(self, order: str = "C", *, stream=None) -> "DeviceArray":
        """A copy on the same GPU, after the work queued on this array (as get() is). order: the
        copy is C-ordered ('C', 'A', 'K'; 'F' only for one dimension), as numpy's copy orders."""
        if not isinstance(order, str):
            raise TypeError(f"copy: order is 'C', 'A', 'K' or 'F', not {type(order).__name__} (a stream goes by "
                            "keyword: copy(stream=s))")
        self._check_order(order.upper(), "copy")
        with rt.on(self.buffer.stream.ordinal):
            s = rt.resolve_stream(stream)
            out = DeviceArray.new(self.shape, self.info, s)
            self.buffer.read_on(s)
            rt.copy_dtod(out.ptr, self.ptr, self.nbytes, s.cu)
        return out

    def astype(self, dtype, order: str = "K", casting: str = "unsafe", subok: bool = True, copy: bool = True, *,
               stream=None) -> "DeviceArray":
        """Convert on the GPU with the library's cast op `to_<dtype>`, as numpy's astype: the same
        dtype is a copy, or the array itself with copy=False; `casting` as numpy's ('unsafe' by
        default: float to int saturates toward zero, NaN to 0). order: the result is C-ordered
        ('C', 'A', 'K'; 'F' only for one dimension)."""
        info = lookup_dtype(dtype)
        self._check_order(order, "astype")
        if casting != "unsafe" and not np.can_cast(self.dtype, info.np, casting):
            raise TypeError(f"Cannot cast array data from {self.dtype!r} to {info.np!r} according to the rule "
                            f"{casting!r}")
        if info is self.info:
            return self.copy(stream=stream) if copy else self
        with rt.on(self.buffer.stream.ordinal):
            return cast(self, info, stream)

    def __copy__(self) -> "DeviceArray":
        return self.copy()          # numpy's copy.copy(a) copies the data

    def __deepcopy__(self, memo) -> "DeviceArray":
        return self.copy()

    def __dask_tokenize__(self):
        """A token of its own each time (as dask gives objects it cannot hash): the values live on
        the GPU and change in place, and freed memory is reused, so no cheap token could tell two
        arrays' values apart (pickling them for one would copy them to the host)."""
        return ("pyew.DeviceArray", uuid.uuid4().hex)

    def __reduce__(self):
        """Pickled as its values (copied to the host), as CuPy's arrays are; unpickled onto the current GPU."""
        return _unpickled, (self.get(),)

    def to_device(self, device, stream=None) -> "DeviceArray":
        """This array on GPU `device` (an int or a pyew.Device): itself if it is there already, else a
        copy made with cudaMemcpyPeerAsync. The copy runs on `stream` (a
        stream of the target GPU; its current stream by default) after the work queued on this
        array, without a host sync."""
        j = rt.Device(device).id
        i = self.buffer.stream.ordinal
        if j == i:
            return self
        with rt.on(j):
            s = rt.resolve_stream(stream)
            out = DeviceArray.new(self.shape, self.info, s)
            if self.size:
                rt.stream_wait(s, self.buffer.last)
                rt.copy_peer(out.ptr, j, self.ptr, i, self.nbytes, s.cu)
                # what is queued next on this array's GPU (a write into it) waits for the copy, as it
                # would on one GPU's default stream; an imported array's owner, when the import ends
                rt.stream_wait(self.buffer.last, s)
                self.buffer.read_by(s)
        return out

    # -- printing: the values, copied to the host, as numpy prints them -----------------------------
    def __repr__(self) -> str:
        prefix = "DeviceArray("
        try:
            host, threshold = self._printable()
            with np.printoptions(threshold=threshold):
                body = np.array2string(host, separator=", ", prefix=prefix, suffix=")")
        except Exception as e:    # a broken context should not make repr raise
            return f"{prefix}shape={self.shape}, dtype={self.info.name}, <unreadable: {e}>)"
        extras = []
        if (self.size == 0 and self.shape != (0,)) or self.size > np.get_printoptions()["threshold"]:
            extras.append(f"shape={self.shape}")
        extras.append(f"dtype={self.info.name}")
        extras.append(f"device={self.buffer.stream.ordinal}")
        head = prefix + body + ","
        tail = ", ".join(extras) + ")"
        if len(head.rsplit("\n", 1)[-1]) + len(tail) > np.get_printoptions()["linewidth"]:
            return head + "\n" + " " * len(prefix) + tail
        return head + " " + tail

    def __str__(self) -> str:
        try:
            host, threshold = self._printable()
        except Exception as e:
            return f"<DeviceArray of shape {self.shape}, unreadable: {e}>"
        if not self.shape:
            return str(host[()])           # numpy prints a 0-d array as its scalar
        with np.printoptions(threshold=threshold):
            return np.array2string(host)

    def __format__(self, spec: str) -> str:
        """f"{d:.3f}" as numpy: a 0-d array formats as its scalar (copied to the host); other
        arrays only with an empty spec."""
        if not self.shape:
            return format(self.get()[()], spec)
        return super().__format__(spec)

    def _printable(self) -> tuple[np.ndarray, int]:
        """What to print and the threshold to print it with. Where numpy summarises the array (more
        elements than printoptions' threshold), only what it shows is copied: edgeitems from each
        end of every long axis, with one element between them that numpy prints as '...' when the
        copy is printed with threshold 0. Else the whole array."""
        opts = np.get_printoptions()
        e = opts["edgeitems"]
        long = [i for i, n in enumerate(self.shape) if n > 2 * e]
        if self.size <= opts["threshold"] or not long:
            return self.get(), opts["threshold"]
        j = long[-1]                      # the axes after it are printed whole: copies of whole rows
        inner = math.prod(self.shape[j + 1:])
        kept = [list(range(e + 1)) + list(range(n - e, n)) if n > 2 * e else list(range(n)) for n in self.shape]
        host = np.empty(tuple(len(k) for k in kept), self.dtype)
        flat = self.reshape(-1)
        n = self.shape[j]
        for at in itertools.product(*(enumerate(k) for k in kept[:j])):
            where = tuple(p for p, _ in at)
            base = sum(i * math.prod(self.shape[a + 1:]) for a, (_, i) in enumerate(at))
            head = flat[base: base + (e + 1) * inner].get()
            tail = flat[base + (n - e) * inner: base + n * inner].get()
            host[where] = np.concatenate([head, tail]).reshape(host.shape[j:])
        return host, 0


SEPARATE, SAME, PARTIAL = 0, 1, 2


def aliasing(out: DeviceArray, a) -> int:
    """How an elementwise call's out= shares memory with an input `a`: SEPARATE, SAME (exactly the
    input: same start, shape and dtype, so each element is read before it is written in its place)
    or PARTIAL (a shifted overlap, which would read elements the kernel already wrote). The one
    rule of every GPU call path."""
    if type(a) is not DeviceArray or not out.size or not a.size:
        return SEPARATE
    lo, n = out.ptr, out.size * out.info.itemsize
    if a.ptr >= lo + n or lo >= a.ptr + a.size * a.info.itemsize:
        return SEPARATE
    return SAME if a.ptr == lo and a.shape == out.shape and a.info is out.info else PARTIAL


# host data a call converts itself: numpy arrays and scalars, sequences, Python numbers
HOST_DATA = (np.ndarray, np.generic, list, tuple, bool, int, float, complex)


def copy_into(dst: DeviceArray, src: DeviceArray, stream=None) -> None:
    """Copy src into dst on the GPU (one dtype and shape, one GPU), after the work queued on both."""
    if dst.info is not src.info or dst.shape != src.shape:
        raise ValueError(f"copy_into: dst is {dst.info.name} {dst.shape}, src {src.info.name} {src.shape}")
    with rt.on(dst.buffer.stream.ordinal):
        s = rt.resolve_stream(stream)
        src.buffer.read_on(s)
        dst.buffer.used_on(s)
        if src.nbytes:
            rt.copy_dtod(dst.ptr, src.ptr, src.nbytes, s.cu)


def lookup_dtype(dtype) -> dt.DType:
    try:
        return dt.lookup(dtype)
    except (KeyError, TypeError):
        try:
            shown = str(np.dtype(dtype))        # float16, >f4, <U3
        except TypeError:
            shown = repr(dtype)
        raise TypeError(f"pyew has no dtype {shown}; it knows {', '.join(dt.BY_NAME)}"
                        f"{dt.unsupported_hint(dtype)}") from None


def cast_entry(src: dt.DType, dst: dt.DType) -> library.Entry | None:
    """The forward entry of the cast op `to_<dst>` for src, from the op table, if the library has it."""
    op = library.get().manifest.op(f"to_{dst.name}")
    if op is None or op.kind != "map":
        return None
    k = op.kernel(src)
    return k.entry("forward") if k is not None and k.out_dtype is dst else None


def cast(a: DeviceArray, info: dt.DType, stream=None, out: DeviceArray | None = None) -> DeviceArray:
    """a converted to `info` on the GPU (into `out` if given)."""
    entry = cast_entry(a.info, info)
    if entry is None:
        raise TypeError(f"no cast from {a.dtype} to {info.name} in the library (op to_{info.name} has no "
                        f"{a.info.name} kernel); add it to a spec and rebuild")
    s = rt.resolve_stream(stream)
    res = out if out is not None else DeviceArray.new(a.shape, info, s)
    a.buffer.read_on(s)
    res.buffer.used_on(s)
    if a.size:
        library.launch(entry, (res.ptr, a.ptr, a.size), s)
    return res


def target_device(device, stream) -> int:
    """The GPU a new array goes to: `device`, else `stream`'s, else the current one."""
    if device is not None:
        return rt.Device(device).id
    if stream is not None and hasattr(stream, "ordinal"):
        return stream.ordinal
    return rt.current_ordinal()


def empty(shape, dtype="float32", stream=None, device=None) -> DeviceArray:
    """Uninitialised DeviceArray on `device` (default: the current GPU)."""
    shape, info = normalize_shape(shape), lookup_dtype(dtype)
    with rt.on(target_device(device, stream)):
        return DeviceArray.new(shape, info, rt.resolve_stream(stream))


def zeros(shape, dtype="float32", stream=None, device=None) -> DeviceArray:
    """DeviceArray of zeros on `device` (default: the current GPU)."""
    shape, info = normalize_shape(shape), lookup_dtype(dtype)
    with rt.on(target_device(device, stream)):
        s = rt.resolve_stream(stream)
        a = DeviceArray.new(shape, info, s)
        rt.memset(a.ptr, 0, a.nbytes, s.cu)
    return a


def from_host(a: np.ndarray, stream) -> DeviceArray:
    """A new DeviceArray holding a copy of numpy array a (any layout), through the transfer engine."""
    info = lookup_dtype(a.dtype)
    out = DeviceArray.new(tuple(a.shape), info, stream)
    transfer.to_device(a, out.ptr, stream)
    return out
