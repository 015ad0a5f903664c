"""numpy's names for the ops: which op of the loaded library implements a numpy ufunc, Python's
operators as numpy names them, and how DeviceArray's operators and numpy's ufuncs
(`__array_ufunc__`) reach the op functions.

The mapping is read from the library's manifest alone: the op whose `ufunc` field names the ufunc
(op `sub` declares ufunc = "subtract"), else the map op of that name (`exp`). An operator or ufunc
the library has no op for raises TypeError naming the op to add; nothing falls back to numpy on
the host. Every call goes through the op functions (pyew.<op>(a, b, out=...)), so promotion
(numpy 2's rules, Python numbers weak), broadcasting and out= are the ops' own.
"""
from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

import numpy as np

from . import array, formula, interop, kinds, library
from .array import DeviceArray
from .errors import LibraryError


@dataclass(frozen=True)
class Operator:
    """One of Python's operators on arrays: `symbol` as written, `method` the stem of its special
    methods (__<method>__, and where `reflected`, __r<method>__ and __i<method>__), `ufunc` the
    numpy ufunc it is on numpy arrays, `arity` 1 or 2."""
    symbol: str
    method: str
    ufunc: str
    arity: int
    reflected: bool

    @property
    def methods(self) -> tuple[str, ...]:
        """Its special methods: __add__, __radd__, __iadd__ (one for unary operators and comparisons,
        which Python reflects by swapping the comparison)."""
        m = self.method
        return (f"__{m}__", f"__r{m}__", f"__i{m}__") if self.reflected else (f"__{m}__",)


def _arith(symbol, method, ufunc):
    return Operator(symbol, method, ufunc, 2, True)


def _compare(symbol, method, ufunc):
    return Operator(symbol, method, ufunc, 2, False)


def _unary(symbol, method, ufunc):
    return Operator(symbol, method, ufunc, 1, False)


# Python's operators, not ops: which ufunc each one is comes from numpy (ndarray's own operators).
OPERATORS: tuple[Operator, ...] = (
    _arith("+", "add", "add"),
    _arith("-", "sub", "subtract"),
    _arith("*", "mul", "multiply"),
    _arith("/", "truediv", "divide"),          # np.true_divide is np.divide
    _arith("//", "floordiv", "floor_divide"),
    _arith("%", "mod", "remainder"),
    _arith("**", "pow", "power"),
    _arith("&", "and", "bitwise_and"),
    _arith("|", "or", "bitwise_or"),
    _arith("^", "xor", "bitwise_xor"),
    _arith("<<", "lshift", "left_shift"),
    _arith(">>", "rshift", "right_shift"),
    _compare("<", "lt", "less"),
    _compare("<=", "le", "less_equal"),
    _compare(">", "gt", "greater"),
    _compare(">=", "ge", "greater_equal"),
    _compare("==", "eq", "equal"),
    _compare("!=", "ne", "not_equal"),
    _unary("-x", "neg", "negative"),
    _unary("+x", "pos", "positive"),
    _unary("abs(x)", "abs", "absolute"),
    _unary("~x", "invert", "invert"),
)

BY_METHOD: Mapping[str, Operator] = MappingProxyType({m: o for o in OPERATORS for m in o.methods})
_SYMBOL = {o.ufunc: o.symbol for o in OPERATORS}


# ---- the mapping, from the manifest --------------------------------------------------------------

def derive(ops: Iterable) -> dict[str, str]:
    """ufunc name -> op name for these ops (the manifest's): a map op's `ufunc` field where it has
    one (numpy's aliases read as the ufunc's __name__, which numpy hands __array_ufunc__), else its
    own name. Two ops declaring one ufunc are an error of the spec."""
    claimed: dict[str, str] = {}
    named: dict[str, str] = {}
    for op in ops:
        if op.kind != "map":
            continue
        u = getattr(op, "ufunc", None)
        if u:
            alias = getattr(np, u, None)            # "true_divide" is numpy's "divide"
            u = alias.__name__ if isinstance(alias, np.ufunc) else u
        if not u:
            named[op.name] = op.name
        elif u in claimed:
            raise LibraryError(f"ops {claimed[u]!r} and {op.name!r} of the loaded library both declare "
                               f"ufunc = {u!r}; keep it on one of them in the spec and rebuild")
        else:
            claimed[u] = op.name
    named.update(claimed)           # a declared ufunc wins over an op that merely has its name
    return named


_table: Mapping[str, str] | None = None
_entries: dict[str, tuple[Callable, library.Op] | None] = {}     # ufunc name -> (function, op)


def ufunc_table() -> Mapping[str, str]:
    """numpy ufunc name -> the name of the op that implements it, for the loaded library (map ops
    without a `ufunc` field are listed under their own names)."""
    global _table
    if _table is None:
        _table = MappingProxyType(derive(library.get().manifest.ops))
    return _table


def _entry(name: str) -> tuple[Callable, library.Op] | None:
    try:
        return _entries[name]
    except KeyError:
        pass
    table = ufunc_table()
    op = table.get(name)
    if op is None:
        alias = getattr(np, name, None)           # np.true_divide, np.abs: numpy's own aliases
        if isinstance(alias, np.ufunc):
            op = table.get(alias.__name__)
    e = (kinds.table()[op], library.get().manifest.op(op)) if op is not None else None
    _entries[name] = e
    return e


def ufunc_op(name) -> Callable | None:
    """The op function that implements numpy ufunc `name` (a name such as "subtract", or the ufunc
    itself), or None where the loaded library has none."""
    e = _entry(name if isinstance(name, str) else name.__name__)
    return e[0] if e is not None else None


def _forget() -> None:
    global _table
    _table = None
    _entries.clear()


kinds.on_reset(_forget)


def missing(ufunc: str, what: str) -> TypeError:
    """The error for a ufunc the loaded library has no op for: which op to add, and how."""
    lib = library.get()
    u = getattr(np, ufunc, None)
    if isinstance(u, np.ufunc) and u.signature is not None:       # matmul, vecdot: not elementwise
        return TypeError(f"{what}: numpy's {ufunc} is not elementwise (its signature {u.signature}), and pyew's ops "
                         "are; compute it with torch or CuPy on the same memory (no copy), or on the host after .get()")
    return TypeError(f"{what} needs an op for numpy's {ufunc!r}, and the loaded library ({lib.path}) has none: "
                     f'add an [[op]] with name = "{ufunc}" (or with ufunc = "{ufunc}") to a spec and rebuild '
                     f'(make all; your own spec file: make all SPEC="libew/ops.toml my_ops.toml")')


def _function(ufunc: str, what: str | None = None) -> tuple[Callable, library.Op]:
    e = _entries.get(ufunc) or _entry(ufunc)
    if e is None:
        raise missing(ufunc, what or f"operator {_SYMBOL.get(ufunc, ufunc)}")
    return e


# ---- which operands pyew takes -----------------------------------------------------------------------

_PLAIN = frozenset((DeviceArray, np.ndarray, float, int, bool))


def takes(x) -> bool:
    """Whether an operator or ufunc with a DeviceArray runs x through pyew's ops: DeviceArrays, GPU
    arrays of other libraries, numpy arrays and scalars, Python numbers, lists. For anything else
    (a type that sets __array_ufunc__ = None, dask or pandas objects, ...) the DeviceArray answers
    NotImplemented, so Python or numpy asks the other operand."""
    t = type(x)
    if t in _PLAIN:
        return True
    if getattr(t, "__array_ufunc__", True) is None:
        return False
    if isinstance(x, (np.ndarray, np.generic, numbers.Number, list, tuple, range)):
        return True
    return interop.device_index(x) is not None


# ---- operators ----------------------------------------------------------------------------------------

def binary(ufunc: str, a, b):
    """a <op> b for DeviceArray a on the left (__add__, and comparisons either way round)."""
    if type(b) not in _PLAIN:         # arrays and numbers skip both checks
        if ufunc in ("equal", "not_equal") and _equals_no_element(b):
            return _no_element_equal(ufunc, a)
        if not takes(b):
            return NotImplemented
    e = _entries.get(ufunc) or _function(ufunc)
    return e[0](a, b)


def _equals_no_element(b) -> bool:
    """An operand numpy compares as an object that no element equals: None, a string, or a plain
    object with Python's own equality (not an array or number of any library)."""
    if b is None or isinstance(b, (str, bytes)):
        return True
    t = type(b)
    return (t.__eq__ is object.__eq__ and not takes(b)
            and not any(hasattr(t, a) for a in ("__array_ufunc__", "__array__", "__array_interface__",
                                                 "__cuda_array_interface__", "__dlpack__")))


def _no_element_equal(ufunc: str, a):
    res = array.zeros(a.shape, "bool", device=a.ordinal)       # numpy 2: elementwise, all False
    return res if ufunc == "equal" else unary("logical_not", res)


def power(a, b, in_place: bool = False):
    """a ** b (and a **= b) for DeviceArray a, as numpy's operator: for a float array and a Python
    exponent of 2, -1 or 0.5 the ufunc numpy's operator takes instead (square, reciprocal, sqrt:
    exact where power's exp(y log x) may round the other way); an integer array to a negative
    integer power is numpy's ValueError."""
    if a.info.name in ("float16", "float32", "float64"):        # numpy's float types (not bfloat16)
        t = type(b)
        fast = ("square" if t is int and b == 2 else "reciprocal" if t is int and b == -1 else
                "sqrt" if t is float and b == 0.5 else None)
        e = (_entries.get(fast) or _entry(fast)) if fast is not None else None
        if e is not None:
            fn, op = e
            if not in_place:
                return fn(a)
            into(fn, (a,), a)
            return a
    negative_int_power(a, b)
    return inplace("power", a, b) if in_place else binary("power", a, b)


def negative_int_power(a, b) -> None:
    """numpy's error for an integer (or bool) base to a negative integer exponent, where the
    exponent is host data: a number, a numpy array or a list. A GPU array of exponents is not read
    back to check: the op's own rule (1 / x^|y| toward zero) applies there, as its doc says."""
    if not _integral(a):
        return
    if type(b) is int:                  # d ** 2: no numpy array made to ask
        negative = b < 0
    elif _integral(b) and not isinstance(b, DeviceArray) and interop.device_index(b) is None:
        negative = bool(np.any(np.asarray(b) < 0))
    else:
        return
    if negative:
        raise ValueError("Integers to negative integer powers are not allowed.")


def _integral(x) -> bool:
    """Whether x holds integers or bools (a DeviceArray, another library's GPU array, host data)."""
    if isinstance(x, DeviceArray):
        return x.info.kind in ("int", "bool")
    if isinstance(x, (bool, int, np.integer, np.bool_)):
        return True
    if isinstance(x, (float, complex, np.inexact)):
        return False
    dtype = getattr(x, "dtype", None)
    if dtype is None and isinstance(x, (list, tuple, range)):
        try:
            dtype = np.asarray(x).dtype
        except (TypeError, ValueError):
            return False
    try:
        return dtype is not None and np.dtype(dtype).kind in "iub"
    except TypeError:
        return False


def reflected(ufunc: str, a, b):
    """b <op> a, for DeviceArray a on the right (__radd__ and the like)."""
    if type(b) not in _PLAIN and not takes(b):
        return NotImplemented
    e = _entries.get(ufunc) or _function(ufunc)
    return e[0](b, a)


def unary(ufunc: str, a):
    """<op> a: -a, +a, abs(a), ~a."""
    e = _entries.get(ufunc) or _function(ufunc)
    return e[0](a)


def inplace(ufunc: str, a, b):
    """a <op>= b: into a itself, as numpy's in-place operators (out=a, casting 'same_kind')."""
    if type(b) not in _PLAIN and not takes(b):
        return NotImplemented
    fn, op = _entries.get(ufunc) or _function(ufunc)
    into(fn, (a, b), a)
    return a


# ---- out= ---------------------------------------------------------------------------------------------

def into(fn: Callable, args: tuple, out):
    """fn(*args) written into out, numpy's way: the op function's own out=, which casts with
    'same_kind' (as numpy's out= and in-place operators allow) and, where out overlaps an input
    without being exactly it, writes the result after every input was read. Returns out."""
    fn(*args, out=out)
    return out


def broadcast_into(target, value, stream) -> None:
    """value (a DeviceArray of target's dtype and GPU, not overlapping it) written into target,
    broadcast to its shape on the GPU: the where op with a true condition, out=target (the only
    elementwise copy the library has that broadcasts)."""
    e = _entries.get("where") or _entry("where")
    if e is None:
        raise missing("where", f"broadcasting a GPU array of shape {value.shape} into one of shape {target.shape}")
    e[0](True, value, target, out=target, stream=stream)


# ---- numpy's ufuncs on DeviceArrays (NEP 13) ----------------------------------------------------------

# keywords a ufunc call may pass at values that change nothing here: pyew's results are C-ordered
# DeviceArrays, never a subclass (dtype= is taken where it is the result's own: below)
_NO_CHANGE = {"where": (True,), "casting": ("same_kind",), "order": ("K", "C"), "subok": (True, False),
              "signature": (None,), "dtype": (None,)}


def _known(ufunc: np.ufunc) -> bool:
    """numpy's own ufunc, or scipy.special's (erf, erfc: where scipy is loaded); a ufunc of
    another library (numba's @vectorize) may share an op's name, not its meaning."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return True
    special = sys.modules.get("scipy.special")
    return special is not None and getattr(special, name, None) is ufunc


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict):
    """DeviceArray.__array_ufunc__: np.exp(d), np.add(d, x, out=d) run the op that implements the
    ufunc and return DeviceArrays; numpy operands are uploaded, as the ops do. Anything else (a
    ufunc pyew has no op for, reduce/accumulate/outer/at, keywords other than out=) is a
    TypeError: no silent host copy."""
    name = ufunc.__name__
    out = kwargs.pop("out", None)
    outs = out if out is not None else ()
    # np.add.at(d, indices, v): the indices are no operand, and the method is refused by name below
    operands = inputs[:1] + inputs[2:] if method == "at" else inputs
    if name in ("equal", "not_equal") and method == "__call__" and len(inputs) == 2 and not kwargs \
            and out is None and _known(ufunc):
        devs = [x for x in inputs if isinstance(x, DeviceArray)]
        if len(devs) == 1 and _equals_no_element(inputs[1] if inputs[0] is devs[0] else inputs[0]):
            return _no_element_equal(name, devs[0])
    if not all(takes(x) for x in operands) or not all(x is None or takes(x) for x in outs):
        return NotImplemented           # an operand of another library's: numpy asks it next
    if not _known(ufunc):
        raise TypeError(f"ufunc {name!r} is neither numpy's nor scipy.special's, so pyew does not run it on "
                        f"DeviceArrays (its op of that name may compute something else); call pyew's op "
                        f"directly, or copy to the host with .get()")
    if method != "__call__":
        raise TypeError(f"numpy's {name}.{method} is not supported on DeviceArrays: pyew's ops are elementwise "
                        f"(np.{name}(...) itself runs on the GPU); copy to the host with .get() for numpy's "
                        f"{name}.{method}")
    dtype = None
    for k, v in kwargs.items():
        if k == "dtype" and v is not None and out is None and _numpys_own_result(ufunc, operands, v):
            dtype = np.dtype(v)          # pyew's result must be it too: checked once computed
            continue
        if not any(v is ok or (isinstance(v, (str, bool, np.bool_)) and v == ok) for ok in _NO_CHANGE.get(k, ())):
            raise TypeError(f"np.{name}(..., {k}={v!r}) is not supported on DeviceArrays: pyew's ops take out= only "
                            "(convert dtypes with .astype())")
    if ufunc.nout != 1:
        raise TypeError(f"numpy's {name} has {ufunc.nout} outputs; pyew's ops have one, so it has no DeviceArray "
                        "version")
    if ufunc.signature is not None:
        raise missing(name, f"np.{name} on a DeviceArray")
    fn, op = _entries.get(name) or _function(name, f"np.{name} on a DeviceArray")
    if len(op.inputs) != ufunc.nin:
        raise TypeError(f"op {op.name} implements numpy's {name} in the loaded library but takes "
                        f"{len(op.inputs)} input(s), and numpy's {name} takes {ufunc.nin}; fix its spec")
    if name == "power":
        negative_int_power(inputs[0], inputs[1])
    o = outs[0] if outs else None
    if o is None:
        res = fn(*inputs)
        if dtype is not None and res.dtype != dtype:        # a new array: nothing of the caller's written
            raise TypeError(f"np.{name}(..., dtype={dtype}) is not supported on DeviceArrays here: pyew computes "
                            f"these inputs in {res.dtype} (convert them, or the result, with .astype())")
        return res
    return into(fn, inputs, o)


def _numpys_own_result(ufunc: np.ufunc, operands: tuple, dtype) -> bool:
    """Whether dtype= names the dtype numpy's ufunc gives these operands anyway (so it changes
    nothing): np.add(d, 1, dtype=np.float32) for a float32 d."""
    kinds = []
    for x in operands:
        if type(x) in (bool, int, float):
            kinds.append(type(x))                    # weak, as NEP 50 has Python numbers
        elif isinstance(x, (DeviceArray, np.ndarray, np.generic)):
            kinds.append(x.dtype)
        else:
            return False
    try:
        return ufunc.resolve_dtypes((*kinds, None))[-1] == np.dtype(dtype)
    except (TypeError, ValueError):
        return False


array.use_ufuncs(sys.modules[__name__])
formula.use_operators(OPERATORS)
