"""The call pipeline every op kind (pyew/kinds/) uses: arguments -> operands (classify, promote,
broadcast) -> checks (out=, params) -> buffers -> launch -> result. Everything is validated before
anything is allocated or launched, so a bad call changes nothing. A call with any GPU operand (or
a GPU out=) runs on the GPU and returns a DeviceArray; one with only host operands streams through
the transfer engine and returns numpy.
"""
from __future__ import annotations

import ctypes
import functools
import math
import numbers
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import dtypes as dt
from . import interop, library, pinned, transfer
from . import runtime as rt
from .array import HOST_DATA, PARTIAL, SAME, SEPARATE, Buffer, DeviceArray, aliasing, cast_entry, from_host
from .operands import (
    DEVICE,
    HOST,
    INT64,
    SCALAR,
    Operand,
    aligned_shape,
    broadcast_shape,
    broadcast_strides,
    classify,
    collapse,
    op_dtype,
    past_int64,
    scalar_bits,
    scalar_value,
)

# ---- the device of a call --------------------------------------------------------------------------

def device_of(args: Sequence, out, stream) -> int:
    """The GPU a call runs on: stream='s, else its first GPU operand's (inputs, then out=), else the
    current one. The other operands are checked against it as they are classified."""
    if stream is not None and hasattr(stream, "ordinal"):
        return stream.ordinal
    for a in args:
        i = interop.device_index(a)
        if i is not None:
            return i
    for o in out if isinstance(out, (tuple, list)) else (out,):     # relu_mask's out is a pair
        i = interop.device_index(o) if o is not None else None
        if i is not None:
            return i
    return rt.current_ordinal()


# ---- preparing a call ------------------------------------------------------------------------------

@dataclass(slots=True)
class Prepared:
    """An elementwise call after classification: its operands, the dtype its kernel runs in, the
    kernel, the broadcast shape, and whether it runs on the GPU's data (device) or numpy's. A fused
    formula (pyew/fused.py) has no kernel: its kernel takes each operand's own dtype."""
    operands: list[Operand]
    kernel: library.Kernel | None
    shape: tuple[int, ...]
    device: bool


def prepare(op: library.Op, args: Sequence, stream, broadcast: bool = True) -> Prepared:
    names = op.inputs
    if len(args) != len(names):
        raise TypeError(f"{op.name}() takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}"
                        f"{keyword_hint(op, len(args) - len(names))}")
    operands = past_int64(op, [classify(a, op.name, n, stream) for a, n in zip(args, names)])
    # inputs of a fixed dtype (where's condition) take no part in promotion: they are converted to it
    fixed = op.fixed
    kernel = op.kernel(op_dtype(op, operands))
    shape = broadcast_shape(operands, op.name)
    if not broadcast:
        for o in operands:
            if o.kind != SCALAR and o.shape != shape:
                desc = ", ".join(f"{x.name!r} {x.shape}" for x in operands if x.kind != SCALAR)
                raise ValueError(f"{op.name}: inputs must have one shape (or be scalars), got {desc}")
    for o, want in zip(operands, input_dtypes(kernel, len(operands))):
        if o.kind == SCALAR:
            scalar_value(o, want, op.name)         # refuses out-of-range values now, not at launch
        else:
            need_cast(o.info, want, op.name, o.name, f"the op's input {o.name!r} is always {want.name}"
                      if o.name in fixed else f"the op runs in {want.name}")
    return Prepared(operands, kernel, shape, any(o.kind == DEVICE for o in operands))


def need_cast(have: dt.DType, want: dt.DType, op: str, name: str, why: str) -> None:
    """Refuse, before any GPU work, an input of a dtype the library has no cast from to the one the
    call runs in (`why` says which that is)."""
    if have is not want and cast_entry(have, want) is None:
        raise TypeError(f"{op}: input {name!r} is {have.name} and {why}, but the library has no cast from "
                        f"{have.name} to {want.name} (op to_{want.name}); convert the input first "
                        f"(x.astype(np.{want.np.name})), or add the cast to a spec and rebuild")


def keyword_hint(op: library.Op, extra: int) -> str:
    """What to say when a call gives `extra` more inputs than op takes and op has params: they
    are keywords."""
    if extra <= 0 or not op.params:
        return ""
    return (f"; its params are keywords only: {op.name}({', '.join(op.inputs)}, "
            f"{', '.join(f'{p.name}=...' for p in op.params)})")


def input_dtypes(kernel: library.Kernel | None, count: int) -> list:
    """The dtype each of `count` operands reaches the kernel in: the kernel's dtype, or the input's
    fixed dtype (where's condition: bool); None for each where there is no kernel (a fused formula
    converts its operands in registers). Operands past the kernel's inputs (mask_backward's mask)
    are listed in the kernel's dtype."""
    if kernel is None:
        return [None] * count
    have = kernel.in_dtypes
    return [have[j] if j < len(have) else kernel.dtype for j in range(count)]


def param_values(op: library.Op, kw: dict) -> tuple:
    """The op's params in ABI order: given as keywords, else their defaults; int params must fit
    int64 and floats may be any double (inf and NaN included)."""
    if kw and not kw.keys() <= {p.name for p in op.params}:
        bad = sorted(set(kw) - {p.name for p in op.params})
        have = ", ".join(p.name for p in op.params) or "none"
        raise TypeError(f"{op.name}() got unexpected keyword argument(s) {', '.join(bad)}; its params: {have}")
    vals = []
    for p in op.params:
        v = kw.get(p.name, p.default)
        if v is None:
            raise TypeError(f"{op.name}() missing required param {p.name!r}")
        if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.generic)) or \
                (isinstance(v, np.generic) and not np.isrealobj(v)):
            raise TypeError(f"{op.name}(): param {p.name!r} must be a {p.type}, not {type(v).__name__}")
        if p.type == "int":
            if isinstance(v, (float, np.floating)) and not float(v).is_integer():
                raise TypeError(f"{op.name}(): param {p.name!r} must be an int, not {v!r}")
            v = int(v)
            if not INT64[0] <= v <= INT64[1]:
                raise OverflowError(f"{op.name}(): param {p.name!r} = {v} does not fit in int64")
        else:
            v = float(v)
        vals.append(v)
    return tuple(vals)


# ---- out= -------------------------------------------------------------------------------------------

def device_out(out, stream, op: str, what: str = "out"):
    """out= of a GPU call as a DeviceArray (a foreign GPU array is imported without a copy), or
    None if it is not a GPU array."""
    if out is None:
        return None
    if type(out) is DeviceArray:
        d = out
        if d.ordinal != stream.ordinal:
            interop.wrong_device(d.ordinal, stream, op, what)
    elif isinstance(out, np.ndarray):
        return None
    else:
        d = interop.import_device(out, stream, op, what)
        if d is None:
            return None
    if d.readonly:
        raise ValueError(f"{op}: {what} is a read-only GPU array")
    return d


def returned(out, res):
    """What a call given out= returns: the caller's own objects, as numpy does, where pyew wrote
    into another library's GPU array through a view imported for the call (dropping the view
    makes the owner's stream wait for pyew's work: array.Foreign). relu_mask's out is a pair."""
    if type(out) is DeviceArray or isinstance(out, np.ndarray):
        return res
    if isinstance(out, (tuple, list)) and isinstance(res, tuple) and len(out) == len(res):
        return tuple(returned(o, r) if o is not None else r for o, r in zip(out, res))
    return out if isinstance(res, DeviceArray) else res


def check_out(out, device: bool, shape, info: dt.DType, op: str, stream):
    """Validate out= for a result of `shape` and `info`: a GPU array (pyew's or foreign) for a GPU
    call, a writeable numpy array for a host call. Returns the out to write (imported if foreign)."""
    if out is None:
        return None
    d = device_out(out, stream, op)
    if d is not None:
        out, got, oshape = d, d.info, d.shape
    elif device:
        raise TypeError(f"{op}: out must be a GPU array (a DeviceArray, or one with "
                        f"__cuda_array_interface__ / __dlpack__) when an input is on the GPU, "
                        f"not {type(out).__name__}")
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{op}: out must be a numpy array or a GPU array, not {type(out).__name__}")
        if not out.flags.writeable:
            raise ValueError(f"{op}: out is a read-only numpy array")
        try:
            got = dt.lookup(out.dtype)
        except (KeyError, TypeError):
            got = None
        oshape = out.shape
    if got is not info or tuple(oshape) != tuple(shape):
        raise OutMismatch(f"{op}: out is {out.dtype} {tuple(oshape)}, the result is {info.name} {tuple(shape)}",
                          info, tuple(shape))
    return out


class OutMismatch(ValueError):
    """out= that the kernel cannot write directly: another dtype, another shape, or a GPU array
    overlapping an input in part. Raised before anything is allocated or queued; an op function
    or formula then writes its result into out as numpy's out= does (write_out), and anything else
    reports it as it is."""

    def __init__(self, message: str, info: dt.DType | None = None, shape: tuple | None = None):
        super().__init__(message)
        self.info, self.shape = info, shape


def write_out(out, why: OutMismatch, compute: Callable, op: str, stream, label: str, casting: str = "same_kind"):
    """out= as numpy's: the result computed without it (`compute()`), then written into out, cast
    with `casting` (checked first, so a refused cast computes nothing) and, for a numpy
    out, broadcast to its shape. Another library's GPU array is checked and written through the
    view pyew imports of it. `label`: what a refused cast's message calls the call (numpy's
    "ufunc 'add'"). Returns out."""
    target = out
    if type(out) is not DeviceArray and not isinstance(out, np.ndarray):
        target = device_out(out, resolve_stream_of(out, stream), op)
        if target is None:
            raise why
    if why.info is not None:
        if not np.can_cast(why.info.np, target.dtype, casting):
            raise TypeError(f"Cannot cast {label} output from {why.info.np!r} to "
                            f"{np.dtype(target.dtype)!r} with casting rule {casting!r}") from None
        if type(target) is DeviceArray and target.info is not why.info and cast_entry(why.info, target.info) is None:
            raise TypeError(f"{op}: the result is {why.info.name} and out is {target.info.name}, but the library has "
                            f"no cast from {why.info.name} to {target.info.name} (op to_{target.info.name}); add it "
                            f"to a spec and rebuild, or write into a {why.info.name} array") from None
        oshape = tuple(target.shape)
        try:
            both = np.broadcast_shapes(why.shape, oshape)
        except ValueError:
            both = why.shape
        if both != oshape:
            raise ValueError(f"{op}: non-broadcastable output operand with shape {oshape} doesn't match the "
                             f"broadcast shape {both}") from None
    res = compute()
    if isinstance(target, np.ndarray):
        np.copyto(target, res.get() if isinstance(res, DeviceArray) else res, casting=casting)
        return out
    with resolve_stream_of(out, stream):
        target[...] = res
    return out


def resolve_stream_of(out, stream):
    """The stream a result is written into `out` on: stream=, else the current one of out's GPU."""
    if stream is not None:
        return rt.resolve_stream(stream)
    i = interop.device_index(out)
    with rt.on(rt.current_ordinal() if i is None else i):
        return rt.current_stream()


def check_alias(out: DeviceArray, ins: Sequence[Operand], op: str, exact_ok: bool = True) -> None:
    """A GPU out= may be exactly an input of its shape (elementwise in place); a shifted overlap
    would read what the kernel already wrote (array.aliasing, the one rule)."""
    for o in ins:
        if o.kind == DEVICE:
            how = aliasing(out, o.value)
            if how == PARTIAL or how == SAME and not exact_ok:
                raise OutMismatch(f"{op}: out overlaps input {o.name!r} without being exactly it; use a separate out")


def overlaps(a: DeviceArray, b) -> bool:
    """a and the GPU array b share memory in any way."""
    return aliasing(a, b) != SEPARATE


def overlaps_host(a: np.ndarray, out: np.ndarray) -> bool:
    """A numpy input shares memory with a numpy out= other than exactly (same start, strides and
    shape, so each element is read before it is written in its place): the host side of
    array.aliasing's rule."""
    return np.may_share_memory(a, out) and not (a.ctypes.data == out.ctypes.data and a.strides == out.strides
                                                and a.shape == out.shape)


# ---- plans: a GPU call classified once, replayed for later calls of its kind --------------------------

class Plan:
    """A call on GPU arrays or numpy arrays, and numbers, after classification: the result's shape and dtype,
    which arguments are arrays and which numbers, and how to launch. Every later call of the same
    key (plan_key: the target, each array's dtype and shape, each number's type, the params)
    replays it without classifying again. Map ops and fused formulas make plans alike.

    numbers(args, stream) turns the numbers of one call (at numbers_at in args) into what launch
    takes, or returns None where the general path must say what is wrong with them (a value out of
    its dtype's range); launch(out_ptr, args, that, stream) queues the kernel on the arrays at
    `arrays` in args (each a DeviceArray, already marked used on the stream).

    native: the same launch in the C extension's terms (library.native), for plans that
    native_replayer replays without Python; None for the others. host: for numpy arrays in and a
    numpy result out, (period, scales) of its runs (transfer.one_shot); launch then takes
    (in_ptrs, out_ptrs, stream, n, what numbers() gave) for a run of n elements."""
    __slots__ = ("target", "shape", "n", "out_info", "arrays", "numbers_at", "numbers", "launch", "host", "native")

    def __init__(self, target, shape, out_info, arrays, numbers_at, numbers, launch, host=(), native=None):
        self.target, self.shape, self.n, self.out_info = target, shape, math.prod(shape), out_info
        self.arrays, self.numbers_at, self.numbers, self.launch = tuple(arrays), tuple(numbers_at), numbers, launch
        self.host, self.native = host, native


_plans: dict = {}
# The number types a plan takes, keyed by type: Python's (weak, NEP 50) and numpy's scalars of the
# dtype table (typed: the type fixes the promotion). bfloat16's scalars (ml_dtypes, imported only
# when a bfloat16 array is met) take the general path.
NUMBERS = frozenset({float, int, bool} | {d.np.type for d in dt.TABLE if d.name != "bfloat16"})
_PLANS_MAX = 4096


def reuse_last(convert: Callable):
    """convert(values), for a plan's numbers, reusing the last call's result when that call was
    given the same objects (a loop's literal is converted once, any other object again). The last
    call is kept as one tuple, so a thread never pairs its values with another call's result."""
    last = [None]

    def converted(values):
        seen = last[0]
        # (a 0-d numpy array is the same object after a += 1: only numbers, which cannot change, are reused)
        if seen is not None and all(a is b and type(a) is not np.ndarray for a, b in zip(values, seen[0])):
            return seen[1]
        got = convert(values)
        last[0] = (tuple(values), got)
        return got
    return converted


def plan_key(target, args: Sequence, kw: dict | None = None):
    """The key a call's plan is kept under (a DeviceArray by its dtype row and shape, a C-ordered
    numpy array by its numpy dtype and shape, a Python or numpy number by its type), or None for a call
    that is not planned. GPU arrays of other libraries must have been imported (plan_args) first."""
    parts = [id(target)]
    for a in args:
        t = type(a)
        if t is DeviceArray:
            parts.append(a.info)
            parts.append(a.shape)
        elif t in NUMBERS:
            parts.append(t)
        elif t is np.ndarray and a.ndim and a.flags.c_contiguous:     # a 0-d one: the general path
            parts.append(a.dtype)
            parts.append(a.shape)
        else:
            return None
    if kw:
        given = exact_params(kw.items())
        if given is None:
            return None
        parts.append(given)
    return tuple(parts)


def exact_params(items):
    """(name, value) pairs as a key that tells what == does not: -0.0 from 0.0 and True from 1 (by
    type, and a float by its hex; NaN equal to itself); None for values of other types."""
    key = []
    for k, v in items:
        t = type(v)
        if t is float:
            key.append((k, t, v.hex()))
        elif t is int or t is bool:
            key.append((k, t, v))
        else:
            return None
    return tuple(key)


def plan_args(args: Sequence, stream, op: str, names: Sequence[str] | None = None):
    """args with GPU arrays of other libraries imported as DeviceArrays (no copy; the call's stream
    waits for the producer's), numpy arrays as they are, or None if any operand is other host data,
    not an array at all, or on another GPU than the stream's (the general path says which)."""
    out = []
    for i, a in enumerate(args):
        t = type(a)
        if t is DeviceArray:
            if a.ordinal != stream.ordinal:
                return None
            out.append(a)
            continue
        if t in NUMBERS or t is np.ndarray:
            out.append(a)
            continue
        if issubclass(t, HOST_DATA):     # by type: isinstance would ask a GPU tensor for its __class__
            return None
        d = interop.import_device(a, stream, op, names[i] if names else f"#{i}")
        if d is None:
            return None
        out.append(d)
    return out


def native_replayer(target, arity: int):
    """A C function that replays target's calls of `arity` positional arguments from their plans
    (pyew/_ewcall.c: replayer), returning None for a call it leaves to Python (keywords, an operand
    it does not read, a plan without a native form, a foreign array whose producer's stream the
    call must wait for); None without the C extension."""
    ext = library.get().ext
    if ext is None or not hasattr(ext, "replayer"):
        return None
    return ext.replayer(target, arity, _plans, rt.current_if_one_gpu, DeviceArray.new, DeviceArray,
                        interop.replay_readers(), interop.dlpack_dtypes(), library.check, library,
                        library.LIBEW_LAUNCH, NUMBERS)


def plans() -> dict:
    """The plans by key (a function's closure looks them up directly)."""
    return _plans


def find_plan(key, target) -> Plan | None:
    plan = _plans.get(key) if key is not None else None
    return plan if plan is not None and plan.target is target else None


def keep_plan(key, plan: Plan) -> None:
    if len(_plans) >= _PLANS_MAX:          # the half made first goes (a hit does not refresh a plan)
        for k in list(_plans)[:_PLANS_MAX // 2]:
            _plans.pop(k, None)
    _plans[key] = plan


def replay(plan: Plan, args: Sequence, out, stream):
    """Run a plan on a call's arguments (of its key), or None where the general path must run it:
    an out= that does not fit or overlaps an input in part, numbers out of range (the general
    path then raises with its message; nothing was queued or written)."""
    got = None
    if plan.numbers_at:
        got = plan.numbers(args, stream)
        if got is None:
            return None
    if plan.host:
        return _replay_host(plan, args, out, stream, got)
    if out is None:
        res = DeviceArray.new(plan.shape, plan.out_info, stream, plan.n)
    else:
        if type(out) is not DeviceArray or out.info is not plan.out_info or out.shape != plan.shape \
                or out.readonly or out.ordinal != stream.ordinal:
            return None
        if any(aliasing(out, args[i]) == PARTIAL for i in plan.arrays):
            return None
        res = out
        out.used_on(stream)
    for i in plan.arrays:
        args[i].read_on(stream)
    if plan.n:
        plan.launch(res.ptr, args, got, stream)
    return res


def _replay_host(plan: Plan, args: Sequence, out, stream, got):
    """A small call on numpy arrays and numbers in one shot through the transfer engine (in runs of
    the plan's period); None where the general path must run it."""
    arrays = [args[i] for i in plan.arrays]
    if out is not None:
        if (type(out) is not np.ndarray or out.dtype != plan.out_info.np or out.shape != plan.shape
                or not out.flags.c_contiguous or not out.flags.writeable):
            return None
        if any(overlaps_host(a, out) for a in arrays):
            return None
    nbytes = plan.n * plan.out_info.itemsize
    for a in arrays:
        nbytes += a.nbytes
    if not plan.n or nbytes > transfer.small_bytes():
        return None
    launch = plan.launch
    res = pinned.for_result(plan.shape, plan.out_info.np) if out is None else out
    ok = transfer.one_shot(arrays, (res,), lambda i, o, s, m: launch(i, o, s, m, got), stream, *plan.host)
    return res if ok else None


# ---- launching elementwise work -----------------------------------------------------------------------

@dataclass(slots=True)
class DevIn:
    """An input as a kernel sees it: a C-ordered device buffer, its shape over the call (1 on
    broadcast dims; () for a scalar), its dtype, and for a scalar the host value (so a library
    without strided kernels can still fill a buffer with it)."""
    ptr: int
    shape: tuple[int, ...]
    info: dt.DType
    value: object = None


def layout(out_shape: tuple[int, ...], ins: Sequence[DevIn]):
    """The strided entry's layout argument: [ndim, shape..., strides of each input...] in
    elements, after collapsing dims, as a ctypes array."""
    shp, sts = collapse(out_shape, [broadcast_strides(i.shape, out_shape) for i in ins])
    if len(shp) > 8:
        raise ValueError(f"this broadcast needs {len(shp)} dims after collapsing; pyew's kernels take at most 8")
    vals = [len(shp), *shp]
    for s in sts:
        vals.extend(s)
    return (ctypes.c_int64 * len(vals))(*vals)


@functools.lru_cache(maxsize=1024)
def broadcast_plan(shapes: tuple) -> tuple | None:
    """For C-contiguous inputs of these shapes (None: a scalar): (the strided entry's layout, the
    element count of their broadcast), or None where they do not broadcast or need more than 8
    dims (the general path then says why). The layout is shared between calls: entries only read it."""
    try:
        shape = tuple(np.broadcast_shapes(*(s for s in shapes if s is not None)))
        lay = layout(shape, [DevIn(0, () if s is None else s, None) for s in shapes])
    except ValueError:
        return None
    return lay, math.prod(shape)


def launch_elementwise(kernel: library.Kernel, pvals: tuple, ins: Sequence[DevIn], out_ptr: int,
                       out_shape: tuple[int, ...], stream, extra_out: tuple = ()) -> None:
    """Queue the kernel on `stream`: inputs of another dtype are converted on the GPU first; inputs
    that all have the output's shape take the contiguous entry, anything broadcast the strided one."""
    n = math.prod(out_shape)
    if n == 0:          # a launch of no blocks is an error in CUDA
        return
    keep = []
    ptrs = []
    ready = []
    for i, want in zip(ins, input_dtypes(kernel, len(ins))):
        if i.info is not want:
            entry = cast_entry(i.info, want)
            if entry is None:           # prepare() refuses these (need_cast); a kind that skips it must not launch
                raise TypeError(f"no cast from {i.info.name} to {want.name} in the library (op to_{want.name}); "
                                "add it to a spec and rebuild")
            m = math.prod(i.shape)
            tmp = Buffer(m * want.itemsize, stream)
            keep.append(tmp)
            if m:
                library.launch(entry, (tmp.ptr, i.ptr, m), stream)
            i = DevIn(tmp.ptr, i.shape, want, i.value)
        ready.append(i)
        ptrs.append(i.ptr)
    if not all(i.shape == out_shape for i in ready):
        strided = kernel.entry("strided") if not extra_out else None
        if strided is not None:
            lay = layout(out_shape, ready)
            library.launch(strided, (out_ptr, *ptrs, n, *pvals, ctypes.addressof(lay)), stream)
            return
        # No strided entry (a special kind, or a library built without them): scalars are filled
        # out to the output's size; anything else broadcast is refused.
        ptrs = []
        for i in ready:
            if i.shape == out_shape:
                ptrs.append(i.ptr)
            elif i.value is not None:
                buf = Buffer(n * i.info.itemsize, stream)
                keep.append(buf)
                fill(buf.ptr, n, i.info, scalar_bits(i.value, i.info), stream)
                ptrs.append(buf.ptr)
            else:
                raise ValueError(f"{kernel.entry('forward').symbol} cannot broadcast an input of shape {i.shape} "
                                 f"to {out_shape}: give inputs of one shape")
    library.launch(kernel.entry("forward"), (out_ptr, *extra_out, *ptrs, n, *pvals), stream)


def fill(ptr: int, n: int, info: dt.DType, bits: int, stream) -> None:
    lib = library.get()
    lib.check(lib.fill(ptr, n, info.itemsize, bits, stream.handle, *stream.dims), "ew_fill")


def scalar_input(o: Operand, kd: dt.DType, stream, keep: list) -> DevIn:
    """A scalar operand as one element of the kernel dtype in device memory: the GPU's slot for
    that value (runtime.constant), or a buffer of its own when the slots are used up."""
    v = scalar_value(o, kd, "")
    bits = scalar_bits(v, kd)
    ptr = rt.constant(bits, kd.itemsize, stream.ordinal)
    if not ptr:
        buf = Buffer(kd.itemsize, stream)
        keep.append(buf)
        fill(buf.ptr, 1, kd, bits, stream)
        ptr = buf.ptr
    return DevIn(ptr, (), kd, v)


# ---- running an elementwise call ------------------------------------------------------------------

def run_elementwise(p: Prepared, stream, outputs: Sequence[tuple], step: Callable,
                    *, out_scale: Sequence[int] = (), in_scale: Sequence[int] = (), align: int = 1):
    """Run a prepared elementwise call, on the GPU or streamed from the host.

    outputs: per result, (shape, dtype row, out= given for it or None).
    out_scale / in_scale / align: for bitmask operands (one word per 32 elements), as in
    transfer.stream_call.
    step(ins: list[DevIn], out_ptrs, out_shapes, stream) queues the kernel(s) for one block (the
    whole call on the GPU path). Returns the result(s): DeviceArrays on the GPU path, numpy arrays
    on the host path."""
    if p.device:
        results = []
        for shape, info, o in outputs:
            if o is not None:
                o.used_on(stream)
                results.append(o)
            else:
                results.append(DeviceArray.new(tuple(shape), info, stream))
        # GPU arrays as they are, host ones copied up in their own dtype (converted on the GPU
        # afterwards), scalars as one-element buffers; `keep` holds what must outlive the launch
        keep: list = []
        ins = []
        for o, want in zip(p.operands, input_dtypes(p.kernel, len(p.operands))):
            if o.kind == SCALAR:
                ins.append(scalar_input(o, want, stream, keep))
            else:
                d = on_device(o, stream, keep)
                ins.append(DevIn(d.ptr, d.shape, d.info))
        if math.prod(p.shape):
            step(ins, [r.ptr for r in results], [tuple(r.shape) for r in results], stream)
        return results
    wants = input_dtypes(p.kernel, len(p.operands))    # None: a fused formula, which converts in registers
    results = [o if o is not None else pinned.for_result(shape, info.np) for shape, info, o in outputs]
    # an input sharing a numpy out='s memory is copied first, as numpy does: blocks are written
    # before later blocks are read
    for o in p.operands:
        if o.kind == HOST and any(overlaps_host(o.value, r) for r in results):
            o.value = o.value.copy()
    nd = len(p.shape)
    host_ops = [transfer.HostOperand(o.value, aligned_shape(o.shape, nd)) for o in p.operands if o.kind == HOST]
    keep = []
    scalars = {}
    for i, o in enumerate(p.operands):
        if o.kind == SCALAR:
            scalars[i] = scalar_input(o, wants[i], stream, keep)
    casts = sum(w.itemsize for o, w in zip(p.operands, wants) if w is not None and o.kind == HOST and o.info is not w)

    def block(chunk: transfer.DeviceChunk):
        ins = []
        hosts = iter(zip(chunk.inputs, chunk.input_shapes))
        for i, o in enumerate(p.operands):
            if o.kind == SCALAR:
                ins.append(scalars[i])
            else:
                ptr, shp = next(hosts)
                ins.append(DevIn(ptr, shp, o.info))
        step(ins, list(chunk.out), list(chunk.out_shapes), chunk.stream)

    transfer.stream_call(host_ops, results, p.shape, block, stream, out_scale=out_scale, in_scale=in_scale,
                         align=align, scratch_per_elem=casts)
    return results


def to_numpy(d: DeviceArray, out, stream) -> np.ndarray:
    """The host result of a one-shot GPU computation: into out= (numpy) or a new array."""
    host = out if out is not None else pinned.for_result(d.shape, d.dtype)
    d.get(stream, out=host)
    return host


# ---- whole-array kinds (upsample, dot, scatter) ----------------------------------------------------

def on_device(o: Operand, stream, keep: list) -> DeviceArray:
    """An array operand on the GPU: a GPU array as it is (marked used on the stream), a host array
    copied up through the transfer engine (kept alive in `keep` until the launch is queued)."""
    if o.kind == DEVICE:
        o.value.read_on(stream)
        return o.value
    d = from_host(o.value, stream)
    keep.append(d)
    return d


def kernel_for(op: library.Op, info: dt.DType, role: str = "forward", what: str = "") -> library.Entry:
    """The entry of `role` for dtype `info`, or a TypeError naming the dtypes that have one."""
    k = op.kernel(info)
    e = k.entry(role) if k is not None else None
    if e is None:
        have = ", ".join(k.dtype.name for k in op.kernels if k.entry(role) is not None)
        raise TypeError(f"{op.name}{what} has no {info.name} kernel; it supports {have}")
    return e
