"""What an op call was given: each argument classified (a pyew DeviceArray, a foreign GPU array,
a numpy array, a scalar), the dtype the call computes in (numpy 2's promotion rules, NEP 50), the
broadcast shape, and the dimension collapsing that turns a broadcast into the few dims a kernel
needs.
"""
from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass

import numpy as np

from . import dtypes as dt
from . import interop
from .array import DeviceArray

DEVICE, HOST, SCALAR = "device", "host", "scalar"


@dataclass(slots=True)
class Operand:
    name: str                        # the input's name in the spec, for messages
    kind: str                        # DEVICE, HOST or SCALAR
    value: object                    # DeviceArray, np.ndarray, or a Python/numpy scalar
    info: dt.DType | None            # its dtype (None for a Python scalar: weakly typed)
    shape: tuple[int, ...]


def classify(a, op: str, name: str, stream, *, scalars: bool = True) -> Operand:
    """One argument as an Operand: DeviceArrays and foreign GPU arrays (CUDA Array Interface,
    DLPack) are DEVICE, numpy arrays (and what np.asarray takes) HOST, numbers SCALAR."""
    if type(a) is DeviceArray:
        if a.ordinal != stream.ordinal:
            interop.wrong_device(a.ordinal, stream, op, name)
        return Operand(name, DEVICE, a, a.info, a.shape)
    if not scalars and isinstance(a, (np.generic, bool, int, float, complex)):
        raise TypeError(f"{op}: {name} must be an array, not a scalar")
    if isinstance(a, np.generic):     # before Python's numbers: np.float64 is a float, but typed
        return Operand(name, SCALAR, a, _info(a.dtype, op, name), ())
    if isinstance(a, (bool, int, float, complex)):
        if type(a) not in _WEAK:          # an IntEnum, a float subclass: numpy types them (int64, float64)
            typed = np.asarray(a)
            if typed.dtype == object:     # an int subclass past int64: numpy would compute on objects
                raise OverflowError(f"{op}: input {name!r} is a {type(a).__name__} past int64 ({int(a).bit_length()} "
                                    "bits), which no dtype holds; pass int(...) of it, a Python int, to compare")
            return classify(typed[()], op, name, stream)
        return Operand(name, SCALAR, a, None, ())
    if not isinstance(a, np.ndarray):
        d = interop.import_device(a, stream, op, name)
        if d is not None:
            return Operand(name, DEVICE, d, d.info, d.shape)
        given = type(a).__name__
        try:
            a = np.asarray(a)
        except Exception:
            a = None
        if a is None or a.dtype == object:
            raise TypeError(f"{op}: input {name!r} is a {given}, not an array or number")
    if type(a) is not np.ndarray:
        if isinstance(a, np.ma.MaskedArray):
            raise TypeError(f"{op}: input {name!r} is a masked array, and pyew has no masks (it would compute the "
                            "masked values too): pass a.filled(value), or a.data to compute every element")
        a = a.view(np.ndarray)          # np.matrix and other subclasses: their data, read as numpy reads it
    if a.ndim == 0 and scalars:
        return Operand(name, SCALAR, a[()], _info(a.dtype, op, name), ())
    return Operand(name, HOST, a, _info(a.dtype, op, name), tuple(a.shape))


_WEAK = frozenset((bool, int, float, complex))


def python_number(v) -> bool:
    """A weakly typed number (NEP 50): Python's, not numpy's (np.float64 is a float, but typed)."""
    return isinstance(v, (bool, int, float)) and not isinstance(v, np.generic)


def _info(npd, op: str, name: str) -> dt.DType:
    try:
        return dt.lookup(npd)
    except (KeyError, TypeError):
        raise TypeError(f"{op}: input {name!r} has dtype {npd}, which pyew does not support "
                        f"(it knows {', '.join(d.name for d in dt.TABLE)}){dt.unsupported_hint(npd)}") from None


# ---- promotion ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _promote_key(key) -> np.dtype:
    # the arrays' and numpy scalars' dtypes first, together (numpy's n-ary rule: int8, uint8 and
    # float16 give float16, where pairs would give float32), then Python numbers, which NEP 50 lets
    # only adjust the result (bool, 0 and float32 give float32); bfloat16 pairs as ml_dtypes has it
    strong = [k for k in key if isinstance(k, np.dtype)]
    weak = [k(0) for k in key if not isinstance(k, np.dtype)]
    if strong and all(k.kind in "biuf" for k in strong):
        samples = [np.zeros(1, np.result_type(*strong))]
    else:
        samples = [np.zeros(1, k) for k in strong]
    samples += weak
    acc = samples[0]
    for s in samples[1:]:
        acc = np.add(acc, s)
    return np.asarray(acc).dtype


def result_dtype(operands: list[Operand], op: str) -> np.dtype:
    """The dtype numpy 2 gives these operands (arrays and numpy scalars strongly typed, Python
    numbers weakly), as its ufuncs resolve it: ml_dtypes' bfloat16 mixes as it does with numpy."""
    key = tuple(o.info.np if o.info is not None else type(o.value) for o in operands)
    try:
        return _promote_key(key)
    except Exception as e:
        what = ", ".join(str(o.info.name) if o.info is not None else type(o.value).__name__ for o in operands)
        raise TypeError(f"{op}: numpy has no common dtype for inputs of {what} ({type(e).__name__}); "
                        "convert them with .astype() first") from None


def kernel_dtype(result: np.dtype, have: tuple[dt.DType, ...], op: str, ufunc: str | None = None) -> dt.DType:
    """The dtype of the kernel that runs: the result dtype if the op has it, else, as numpy picks a
    ufunc loop, the smallest of the op's dtypes the result casts to safely (sigmoid of int32
    runs in float64). An op that is numpy's `ufunc` takes numpy's own loop for the result dtype
    first (or its refusal: numpy has no subtract of bools; bool floor_divide runs in int8, so in
    the smallest int kernel), then the nearest kernel of that loop's kind."""
    try:
        info = dt.lookup(result)
    except (KeyError, TypeError):
        info = None
    if info is not None and info in have:
        return info
    if ufunc is not None and result.kind in "biu":      # floats: the rule below is numpy's
        result = _numpy_loop(result, ufunc, op)
        info = next((d for d in have if d.np == result), None)
        if info is not None:
            return info
    fits = [d for d in have if np.can_cast(result, d.np, "safe")]
    if not fits:
        raise TypeError(f"{op} has no kernel for {result} inputs (its dtypes: {', '.join(d.name for d in have)}); "
                        "convert the inputs with .astype() first")
    return min(fits, key=lambda d: (d.kind != _KIND.get(result.kind), d.itemsize, have.index(d)))


_KIND = {"b": "bool", "i": "int", "u": "int", "f": "float"}


def numpy_name(op) -> str:
    """The numpy ufunc an op implements, by its spec's `ufunc` or its own name (a name that is no
    numpy ufunc, such as gelu, leaves numpy's loops out of its kernel choice)."""
    return getattr(op, "ufunc", None) or op.name


@functools.lru_cache(maxsize=256)
def _numpy_loop(result: np.dtype, ufunc: str, op: str) -> np.dtype:
    """The input dtype of numpy's loop of `ufunc` for inputs of `result` (numpy's own refusal as a
    TypeError naming the op); `result` itself where numpy has no such ufunc or cannot say."""
    uf = getattr(np, ufunc, None)
    if not isinstance(uf, np.ufunc) or uf.nout != 1:
        return result
    try:
        return np.dtype(uf.resolve_dtypes((result,) * uf.nin + (None,))[0])
    except TypeError as e:              # numpy has no loop: no negative or subtract of bools
        raise TypeError(f"{op}: numpy's {ufunc} refuses {result} inputs ({e})") from None
    except Exception:                    # a dtype numpy's resolver does not know (bfloat16)
        return result


def op_dtype(op, operands: list[Operand]) -> dt.DType:
    """The dtype of the kernel `op` (a library.Op) runs for these operands, one per input: numpy 2's
    promotion of the inputs whose dtype the op does not fix (where's condition takes no part), then
    numpy's loop choice among the op's dtypes (kernel_dtype)."""
    fixed = op.fixed
    free = [o for o, name in zip(operands, op.inputs) if name not in fixed] if fixed else operands
    first = free[0].info
    if first is not None and all(o.info is first for o in free):
        result = first.np
    else:
        result = result_dtype(free, op.name)
    name = numpy_name(op)
    if name in COMPARISONS and result.kind in "iu":
        result = wide_enough(result, free)
    return kernel_dtype(result, op.dtypes, op.name, name)


COMPARISONS = frozenset({"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"})


INT64 = (-(1 << 63), (1 << 63) - 1)


def int_outside(v, lo: int = INT64[0], hi: int = INT64[1]) -> bool:
    """Whether v is a Python int (weak: typed by no dtype) outside [lo, hi], by default int64's."""
    return type(v) is int and not lo <= v <= hi


def _int_outside(o: Operand, lo: int, hi: int) -> bool:
    return o.kind == SCALAR and o.info is None and int_outside(o.value, lo, hi)


def wide_enough(result: np.dtype, operands: list[Operand]) -> np.dtype:
    """An integer comparison with a Python int its dtype cannot hold: numpy 2 still answers it
    (int32 == 2**40 is False), so it runs in int64, which holds any such int that fits 64 bits."""
    lim = np.iinfo(result)
    if any(_int_outside(o, int(lim.min), int(lim.max)) for o in operands):
        return np.dtype(np.int64)
    return result


def past_int64(op, operands: list[Operand]) -> list[Operand]:
    """A comparison of integer arrays with a Python int past int64: numpy 2 answers it (every
    element is less than 2**70), so the int stands as an infinity of its sign and the comparison
    runs in float64, where every element is finite and the answers are exact. (Such a call
    converts its arrays first, so it makes no plan that later calls would replay.) Bool arrays
    take numpy's OverflowError, as numpy gives them one. Two such ints would both stand as one
    infinity: refused (numpy answers them; Python's own comparison does)."""
    if numpy_name(op) not in COMPARISONS:
        return operands
    past = [_int_outside(o, *INT64) for o in operands]
    if not any(past) or sum(past) > 1 or any(o.kind != SCALAR and o.info.kind != "int" for o in operands):
        return operands
    return [Operand(o.name, SCALAR, math.inf if o.value > 0 else -math.inf, None, ()) if p else o
            for o, p in zip(operands, past)]


def scalar_value(o: Operand, info: dt.DType, op: str):
    """A scalar operand as a numpy scalar of the kernel dtype; refuses what numpy refuses (a Python
    int out of the dtype's range) and what cannot be exact in kind (2.5 for an int kernel)."""
    v = o.value
    if isinstance(v, complex) or (isinstance(v, np.generic) and np.iscomplexobj(v)):
        raise TypeError(f"{op}: input {o.name!r} is complex; pyew has no complex dtypes")
    if info.kind == "int":
        if isinstance(v, (float, np.floating)) and not float(v).is_integer():
            raise TypeError(f"{op}: input {o.name!r} is {v!r}, not an integer, but the op runs in {info.name}")
        iv = int(v)
        lim = np.iinfo(info.np)
        if not lim.min <= iv <= lim.max:
            shown = iv if abs(iv) < 1 << 128 else f"an int of {iv.bit_length()} bits"
            raise OverflowError(f"{op}: input {o.name!r} = {shown} is out of bounds for {info.name} "
                                f"[{lim.min}, {lim.max}]")
        return info.np.type(iv)
    with np.errstate(over="ignore"):
        return np.asarray(v).astype(info.np)[()]


def scalar_bits(value, info: dt.DType) -> int:
    return int(np.asarray(value, info.np).reshape(1).view(f"u{info.itemsize}")[0])


_F32, _F64 = struct.Struct("<f"), struct.Struct("<d")
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_EXACT_INT = 1 << 53                 # Python ints below this convert to float64 exactly
_half_bits: dict = {}                # (dtype row, type, value, sign) -> bits, for 16-bit floats
_keeps: dict = {}                    # (dtype row, int or float) -> numpy keeps the array's dtype


def weak_scalar_bits(v, info: dt.DType) -> int | None:
    """The bits of number v (Python's or a numpy scalar) as one element of `info`, where an array of
    `info` with v keeps its dtype (result_dtype's rule: NEP 50, so a Python float with a float array
    or a Python int with any array, except as ml_dtypes' bfloat16 resolves a float; a numpy scalar
    where its dtype promotes into info's) and the conversion is plain; None for
    anything the general path must decide (promotion, an int out of range or too large to
    convert exactly, a float that overflows float32)."""
    t = type(v)
    keeps = _keeps.get((info, t))
    if keeps is None:
        keeps = _keeps[info, t] = _promote_key((info.np, t)) == info.np
    if not keeps:
        return None
    if info.kind == "float":
        if t is int and not -_EXACT_INT < v < _EXACT_INT:
            return None
        if info.itemsize == 4:
            try:
                return _U32.unpack(_F32.pack(v))[0]
            except OverflowError:
                return None
        if info.itemsize == 8:
            return _U64.unpack(_F64.pack(v))[0]
        key = (info, t, v, math.copysign(1.0, v))
        bits = _half_bits.get(key)
        if bits is None:
            with np.errstate(over="ignore"):
                bits = scalar_bits(np.asarray(v).astype(info.np)[()], info)
            if len(_half_bits) >= 4096:
                _half_bits.clear()
            _half_bits[key] = bits
        return bits
    if t is not int:
        if not (t is bool or issubclass(t, (np.integer, np.bool_))):
            return None
        v = int(v)
    width = 8 * info.itemsize
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if info.name.startswith("int") else (0, (1 << width) - 1)
    if not lo <= v <= hi:
        return None
    return v & ((1 << width) - 1)


# ---- shapes -----------------------------------------------------------------------------------------

def broadcast_shape(operands: list[Operand], op: str) -> tuple[int, ...]:
    shapes = [o.shape for o in operands if o.kind != SCALAR]
    if not shapes:
        return ()
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        desc = ", ".join(f"{o.name!r} {o.shape}" for o in operands if o.kind != SCALAR)
        raise ValueError(f"{op}: input shapes do not broadcast together: {desc} (numpy's broadcasting "
                         "rules: dims are compared from the right and must be equal or 1)") from None


def aligned_shape(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    step = 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def broadcast_strides(op_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-ordered operand over out_shape: its own where it has the dim, 0 where
    it is broadcast."""
    shp = aligned_shape(op_shape, len(out_shape))
    own = (0,) * (len(out_shape) - len(op_shape)) + contiguous_strides(op_shape)
    return tuple(0 if (n == 1 and m != 1) else s for n, m, s in zip(shp, out_shape, own))


def collapse(shape: tuple[int, ...], strides: list[tuple[int, ...]]):
    """Drop size-1 dims and merge neighbours that every operand walks contiguously (as PyTorch's
    TensorIterator does), so a row bias is 2 dims and a channel bias 3 whatever the rank. The
    output (C-contiguous over `shape`) takes part implicitly. Returns (shape, strides)."""
    keep = [i for i, n in enumerate(shape) if n != 1]
    if not keep:
        return (1,), [(0,) for _ in strides]
    shp = [shape[i] for i in keep]
    sts = [[s[i] for i in keep] for s in strides]
    out_st = list(contiguous_strides(tuple(shp)))
    i = len(shp) - 1
    while i > 0:
        # dims i-1 and i merge when stepping dim i-1 is the same as stepping dim i shp[i] times,
        # for the output and every input
        if all(st[i - 1] == st[i] * shp[i] for st in sts + [out_st]):
            shp[i - 1] *= shp[i]
            for st in sts + [out_st]:
                st[i - 1] = st[i]
                del st[i]
            del shp[i]
        i -= 1
    return tuple(shp), [tuple(s) for s in sts]

