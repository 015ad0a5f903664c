"""Fused formulas: a formula's tree (pyew/formula.py) typed for its operands' dtypes, rendered into
one C++ functor built from the ops' own device functions (build/gen/fn/<op>.cuh), compiled once
per signature (pyew/jit.py) and run as one kernel on the library's call path (pyew/call.py): numpy
operands stream through the transfer engine once, GPU operands are read in place.

Semantics are those of the single ops, applied node by node: numpy's broadcasting over all array
operands, NEP 50 promotion at each op (Python numbers weakly typed), the kernel dtype an op picks
(sigmoid of int32 runs in float64). Values between ops stay in the compute type of their dtype
(float for float16, bfloat16 and float32; double for float64; the integer type for integers) and
are rounded once, when the result is stored; an op whose result has another dtype (a cast, a
comparison) rounds to that dtype where it stands, as it would alone.
"""
from __future__ import annotations

import array as pyarray
import ctypes
import difflib
import functools
import inspect
import math
import struct
import sys
import threading
import types
import warnings
import weakref
from dataclasses import dataclass

import numpy as np

from . import call, formula, interop, jit, library, specs, transfer, ufuncs
from . import dtypes as dt
from . import runtime as rt
from .array import DeviceArray
from .formula import Call, Const, FormulaError, Var
from .operands import (
    COMPARISONS,
    DEVICE,
    HOST,
    SCALAR,
    Operand,
    broadcast_shape,
    classify,
    int_outside,
    kernel_dtype,
    numpy_name,
    past_int64,
    python_number,
    result_dtype,
    scalar_value,
    wide_enough,
)

# ---- the vocabulary -------------------------------------------------------------------------------

_vocab_lock = threading.Lock()
_vocab: tuple[object, dict, frozenset, int] | None = None      # (library, table, its names, specs.version())


def vocabulary() -> dict[str, library.Op]:
    """Function name -> map op of the loaded library: each op by its name, and by the numpy ufunc
    name it implements (pyew.ufuncs' table, the one DeviceArray's operators use), so a formula's
    `multiply` or `*` finds the op `mul`; and the ops of spec files loaded by pyew.load_spec."""
    global _vocab
    lib = library.get()
    v = _vocab
    if v is None or v[0] is not lib or v[3] != specs.version():
        with _vocab_lock:
            version = specs.version()
            table: dict[str, library.Op] = {op.name: op for op in lib.manifest.ops if op.kind == "map"}
            for ufunc, name in ufuncs.ufunc_table().items():
                table.setdefault(ufunc, lib.manifest.op(name))
            for name, op in specs.loaded_ops().items():      # load_spec refuses names taken above
                table.setdefault(name, op)
            v = _vocab = (lib, table, frozenset(table), version)
    return v[1]


def _names() -> frozenset:
    vocabulary()
    return _vocab[2]


def fixed_inputs(op: library.Op) -> dict[str, dt.DType]:
    """Inputs whose dtype the op fixes (where's condition is bool), by name."""
    fixed = getattr(op, "fixed", None) or {}
    items = fixed.items() if isinstance(fixed, dict) else fixed
    return {name: dt.lookup(d) for name, d in items}


# ---- typing and rendering -------------------------------------------------------------------------

@dataclass(frozen=True)
class Arg:
    """An operand as a signature sees it: an array of a dtype, or a scalar (a Python number, weak,
    or a numpy scalar of a dtype)."""
    name: str
    array: bool
    info: dt.DType | None      # None: a Python number
    pytype: type | None = None


def _literal(v, info: dt.DType) -> str:
    """v (a value exact in info's compute type) as a C++ expression of that type."""
    if info.compute == "bool" or info.name == "bool":
        return "true" if v else "false"
    if info.kind == "int" or isinstance(v, (bool, np.bool_)):
        return f"static_cast<{info.compute}>({int(v)}LL)"
    f = float(v)
    if math.isfinite(f):
        lit = f.hex()
    else:   # NaN (its sign kept) and the infinities by their bits: C++ has no literal for them
        lit = f"__longlong_as_double({struct.unpack('<q', struct.pack('<d', f))[0]}LL)"
    return f"static_cast<{info.compute}>({lit})"


def _python_result(n: Call, kids: list[type], text: str) -> type:
    """The type of Python's `n.op` on operands of types `kids` (see Program._python_type)."""
    op, number = n.op, (float if float in kids else int)
    if op in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_not", "logical_and"):
        return bool
    if op in ("divide", "true_divide", "reciprocal", "sqrt"):
        return float
    if op in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"):
        if float in kids:
            raise FormulaError(f"in formula {text!r}: {formula.text(n)} applies {op} to a float")
        return bool if op not in ("left_shift", "right_shift", "invert") and set(kids) == {bool} else int
    if op == "power" and number is int:
        c = n.args[1]
        if not isinstance(c, Const):
            raise FormulaError(f"in formula {text!r}: {formula.text(n)} of Python ints is an int or a float by the "
                               "exponent's sign; write the exponent as a constant, or one operand as a float")
        return int if c.value >= 0 else float
    return number          # add, subtract, multiply, floor_divide, remainder, power, negative, positive


def _is_float(a: Arg) -> bool:
    """A scalar operand travels in the functor as a double (floats) or a long long (ints, bools)."""
    return a.pytype is float if a.info is None else a.info.kind == "float"


_COMMENT_CHARS = 200        # of a formula's text in its kernel's first line


class Program:
    """A formula typed for one signature: its C++ source, output dtype, input dtypes (arrays, in
    order), scalar parameters (in the functor, in order) and launch shape."""

    def __init__(self, tree, args: tuple[Arg, ...], text: str):
        self.tree = tree
        self.text = text
        self.lib = library.get()
        self.version = specs.version()
        self.vocab = vocabulary()       # the ops as loaded now: a later definition makes another Program
        self.arrays = [a for a in args if a.array]
        self.scalars = [a for a in args if not a.array]
        if not self.arrays:
            raise FormulaError(f"formula {text!r} has no array operand: give at least one array")
        if len(self.arrays) > jit.MAX_ARRAYS:
            raise FormulaError(f"formula {text!r} has {len(self.arrays)} array operands; a fused kernel takes at most "
                               f"{jit.MAX_ARRAYS}: split it into formulas of fewer arrays")
        self._index = {a.name: i for i, a in enumerate(self.arrays)}
        self._param = {a.name: i for i, a in enumerate(self.scalars)}
        self._by_name = {a.name: a for a in args}
        self.lines: list[str] = []
        self.uses: list[tuple[int, dt.DType, str]] = []   # (scalar operand, dtype it converts to, op)
        self.int_exponents: list[int] = []                  # scalar operands that are integer powers' exponents
        self.ops: set[str] = set()
        self.compute = False
        self.given = len(self.scalars)      # the call's numbers; parts computed from them follow (derived)
        self.derived: list[Call] = []
        self._typed: dict[int, tuple] = {}   # id(node) -> (node, its value): a node used twice is typed once
        self._weak_known: dict[int, bool] = {}    # id(node) -> _weak_only's answer (the tree holds the nodes)
        self._tmp = 0
        info, expr = self._node(tree, root=True)
        if info is None or isinstance(expr, tuple):
            raise FormulaError(f"formula {text!r} computes nothing from its arrays")
        self.out = info
        self.tuning = 1 if self.compute else 0
        in_t = [a.info.ctype for a in self.arrays]
        # a Python int that meets float dtypes alone is passed as a double: any int numpy takes there
        ints = {i for i, want, _ in self.uses if want.kind != "float"}
        self.doubles = [_is_float(a) or i not in ints for i, a in enumerate(self.scalars)]
        params = "".join(f"  {'double' if d else 'long long'} p{i};\n" for i, d in enumerate(self.doubles))
        sig = ", ".join(f"const {t} a{i}" for i, t in enumerate(in_t))
        body = "".join(f"    {ln}\n" for ln in self.lines)
        includes = "".join(f'#include "fn/{op}.cuh"\n' for op in sorted(self.ops))
        # libew's headers, the same in every formula (the numpy functions that every op's header
        # includes among them), end at the first declaration: NVRTC's automatic precompiled header
        # (jit.OPTIONS' -pch) covers them, so a process's later formulas skip parsing them again;
        # the ops' own headers come after.
        head = '#include "broadcast.cuh"\n#include "ew_math.cuh"\n#include "ew_numpy.cuh"\nnamespace ew_jit {}\n'
        # the tree written back, not the caller's text (one kernel for one formula however spaced),
        # and as a comment that its names (a fused function's keyword arguments: any strings) cannot
        # end; a trace's text can be long, so only its start
        shown = formula.comment(formula.text(tree)[:_COMMENT_CHARS])
        self.source = (f"// pyew fused formula: {shown}\n{head}{includes}"
                       f"namespace ew_jit {{\nstruct fn {{\n{params}"
                       f"  __device__ __forceinline__ {self.out.ctype} operator()({sig}) const {{\n{body}"
                       f"    return ::ew::convert<{self.out.ctype}>({expr});\n  }}\n}};\n}}  // namespace ew_jit\n")
        self.in_types = in_t
        self.in_sizes = (ctypes.c_int * len(in_t))(*[a.info.itemsize for a in self.arrays])
        self.in_sizes_at = ctypes.addressof(self.in_sizes)
        self.fmt = "<" + "".join("d" if d else "q" for d in self.doubles)
        self.read = frozenset(i for i, _, _ in self.uses)     # the numbers the kernel reads
        self.slots: dict[str, jit.Slots] = {}

    # A node's value: (its dtype, or None for a weak Python number; a C++ expression). Arrays
    # are their storage values; scalars, the functor's params; ops, a temporary in the compute
    # type of their result's dtype.
    def _node(self, n, root=False):
        if isinstance(n, Const):
            if n.dtype is None:
                return None, n.value
            try:
                info = dt.lookup(n.dtype)
            except (KeyError, TypeError):
                raise FormulaError(f"formula {self.text!r} holds a numpy {n.dtype} number, a dtype pyew does not "
                                   "support") from None
            return info, _literal(n.value, info)
        if isinstance(n, Var):
            a = self._by_name[n.name]
            if a.array:
                return a.info, f"a{self._index[n.name]}"
            return a.info, ("param", self._param[n.name], a)
        hit = self._typed.get(id(n))
        if hit is None:
            hit = self._typed[id(n)] = (n, self._call(n, root))
        return hit[1]

    def _weak(self, n: Call):
        """Operators over Python numbers alone: Python's arithmetic, whose result is a Python number
        (weak, NEP 50), not a float64 or int64 that would promote the formula. Numbers of the
        formula alone fold now; with the call's numbers, the part is computed on the host for each
        call and passed to the kernel as one more number (derived)."""
        pytype = self._python_type(n)
        if not formula.variables(n):         # numbers of the formula: folded
            try:
                return None, formula.python_value(n, {})
            except (ArithmeticError, ValueError, TypeError) as e:
                raise FormulaError(f"in formula {self.text!r}: {formula.text(n)} fails in Python: {e}") from None
        arg = Arg(formula.text(n), False, None, pytype)
        self.scalars.append(arg)
        self.derived.append(n)
        return None, ("param", len(self.scalars) - 1, arg)

    def _python_type(self, n) -> type:
        """The type Python's arithmetic gives a part made of Python numbers: from the operands'
        types (bool, int, float), as Python's rules have it (True + True is an int, 1 / 2 a float)."""
        if isinstance(n, Const):
            t = type(n.value)
        elif isinstance(n, Var):
            t = self._by_name[n.name].pytype
        else:
            kids = [self._python_type(a) for a in n.args]
            t = _python_result(n, kids, self.text)
        if t not in (bool, int, float):
            raise TypeError(f"in formula {self.text!r}: {formula.text(n)} is a {t.__name__}; pyew has no complex "
                            "dtypes")
        return t

    def _power(self, n: Call, base_info: dt.DType):
        """x ** c (c a Python number of the formula) as numexpr computes it where numpy's result is
        the same: c of 1..4 as multiplications of x or, for floats, -1..-4 of 1/x, 0.5 as sqrt;
        anything else through power. An int x takes an int c as such (int ** 2 is an int), a
        float c in float64 (numpy's int ** 2.0); int ** a negative int goes to power, which refuses it."""
        base, c = n.args[0], n.args[1].value
        if isinstance(c, bool) or not isinstance(c, (int, float)) or base_info.kind not in ("int", "float"):
            return None
        if base_info.kind == "int" and isinstance(c, float):
            # numpy: int ** 2.0 is float64 ** 2.0, whose special exponents it computes exactly so
            if "to_float64" not in vocabulary() or not (c == 0.5 or (float(c).is_integer() and 1 <= abs(c) <= 4)):
                return None
            base, base_info = Call("to_float64", (base,)), dt.BY_NAME["float64"]
        elif isinstance(c, float):
            # as numpy's power: bfloat16 ** 0.5 is float32 (ml_dtypes' rule), float16 ** 0.5 float16
            wide = dt.lookup(result_dtype([Operand("x", DEVICE, None, base_info, ()),
                                           Operand("c", SCALAR, c, None, ())], "power"))
            if wide is not base_info:
                if f"to_{wide.name}" not in vocabulary():
                    return None
                base, base_info = Call(f"to_{wide.name}", (base,)), wide
        if base_info.kind == "int":
            if c < 0:
                return None
        elif c == 0.5:
            return Call("sqrt", (base,), operator=True)
        if not (math.isfinite(c) and float(c).is_integer() and 1 <= abs(c) <= 4):
            return None
        factor = base if c > 0 else Call("reciprocal", (base,), operator=True)
        out = factor
        for _ in range(int(abs(c)) - 1):
            out = Call("multiply", (out, factor), operator=True)
        return out

    def complete(self, values) -> list:
        """The call's numbers followed by the parts computed from them (see _weak)."""
        values = list(values)
        if self.derived:
            env = {a.name: v for a, v in zip(self.scalars, values)}
            for n, a in zip(self.derived, self.scalars[self.given:]):
                try:
                    v = formula.python_value(n, env)
                except (ArithmeticError, ValueError) as e:
                    raise type(e)(f"in formula {self.text!r}: {formula.text(n)}: {e}") from None
                if type(v) is not a.pytype:        # complex: (-4) ** 0.5
                    raise TypeError(f"in formula {self.text!r}: {formula.text(n)} = {v!r}, not a {a.pytype.__name__}; "
                                    "pyew has no complex dtypes")
                values.append(v)
        return values

    def packed(self, values) -> ctypes.Array:
        """The functor's bytes for a call's numbers, each checked against the dtypes it meets."""
        return self.packed_complete(self.complete(values))

    def packed_complete(self, values) -> ctypes.Array:
        """packed() of numbers complete() gave."""
        self.check_scalars(values)
        return self.pack(values)

    def past_int64(self, values) -> bool:
        """Whether a number the kernel reads among complete()'s (a derived one too) is a Python int
        past int64, which none of its 64-bit parameters holds (the formula then runs op by op, as
        the single ops take such ints)."""
        read = self.read
        return any(int_outside(v) and i in read for i, v in enumerate(values))

    def _weak_only(self, n) -> bool:
        """Whether n is Python's operators over Python numbers alone (the call's and the formula's);
        known once per node, as _node asks it of every node on the way down."""
        if isinstance(n, Const):
            return n.dtype is None
        if isinstance(n, Var):
            a = self._by_name[n.name]
            return not a.array and a.info is None
        hit = self._weak_known.get(id(n))
        if hit is None:
            hit = n.operator and n.op in formula.PYTHON_OPS and not n.params and all(map(self._weak_only, n.args))
            self._weak_known[id(n)] = hit
        return hit

    def _call(self, n: Call, root: bool):
        if self._weak_only(n):
            return self._weak(n)
        if n.operator and n.op == "power" and isinstance(n.args[1], Const) and n.args[1].dtype is None:
            base_info, _ = self._node(n.args[0])
            rewritten = self._power(n, base_info) if base_info is not None else None
            if rewritten is not None:
                return self._node(rewritten, root)
        op = self.vocab.get(n.op)
        if op is None:
            raise FormulaError(f"formula {self.text!r} uses {n.op!r}, which the loaded library has no op for; add it "
                               "to a spec and rebuild")
        if len(n.args) != len(op.inputs):
            raise FormulaError(f"{n.op}() takes {len(op.inputs)} input(s) ({', '.join(op.inputs)}), got {len(n.args)} "
                               f"in formula {self.text!r}{call.keyword_hint(op, len(n.args) - len(op.inputs))}")
        given = dict(n.params)
        unknown = set(given) - {p.name for p in op.params}
        if unknown:
            have = ", ".join(p.name for p in op.params) or "none"
            raise FormulaError(f"{n.op}() has no param {', '.join(sorted(unknown))} (its params: {have})")
        kids = [self._node(a) for a in n.args]
        fixed = fixed_inputs(op)
        operands = []
        for name, (info, expr) in zip(op.inputs, kids):
            if name in fixed:
                continue
            if info is None:      # a Python number: weakly typed, as NEP 50 has it
                operands.append(Operand(name, SCALAR, expr[2].pytype(0) if isinstance(expr, tuple) else expr, None, ()))
            else:
                operands.append(Operand(name, DEVICE, None, info, ()))
        # a comparison of integers with a constant past int64: numpy 2 answers it; it stands as the
        # infinity of its sign, compared in float64, where each integer is finite (as the single ops)
        past = past_int64(op, operands)
        inf = {a.name: b.value for a, b in zip(operands, past) if a is not b}
        operands = past
        try:
            result = result_dtype(operands, n.op) if operands else np.dtype(np.float64)
            if numpy_name(op) in COMPARISONS and result.kind in "iu":
                # numpy 2 answers int32 < 2**40: a call's Python int may be any, so compare in int64
                given = any(info is None and isinstance(e, tuple) and e[2].pytype is int for info, e in kids)
                result = np.dtype(np.int64) if given else wide_enough(result, operands)
            kd = kernel_dtype(result, op.dtypes, n.op, numpy_name(op))
        except TypeError as e:
            raise FormulaError(f"in formula {self.text!r}: {e}") from None
        kernel = op.kernel(kd)
        out = kernel.out_dtype
        self.ops.add(op.name)
        if op.call_tuning == "compute":
            self.compute = True
        args = []
        for at, (name, (info, expr)) in enumerate(zip(op.inputs, kids)):
            want = fixed.get(name, kd)
            if at == 1 and want.kind == "int" and numpy_name(op) == "power":
                if isinstance(expr, tuple):
                    self.int_exponents.append(expr[1])      # numpy refuses a negative one: checked per call
                elif isinstance(n.args[1], Const) and n.args[1].value < 0:
                    raise FormulaError(f"in formula {self.text!r}: {formula.text(n)}: integers to negative integer "
                                       f"powers are not allowed (numpy's rule); write the exponent as a float "
                                       f"({float(n.args[1].value)!r}) for a float result")
            args.append(self._as(info, inf.get(name, expr), want, n.op, name))
        for p in op.params:
            v = given.get(p.name, p.default)
            if v is None:
                raise FormulaError(f"{n.op}() needs param {p.name!r} in formula {self.text!r}")
            if p.type != "float" and (isinstance(v, bool) or int(v) != v):
                raise FormulaError(f"{n.op}() takes an integer for param {p.name!r}, not {v!r} (formula {self.text!r})")
            args.append(_literal(v, kd) if p.type == "float" else f"static_cast<::int64_t>({int(v)}LL)")
        r = out.ctype if (root or out is not kd) else out.compute
        call_ = f"::ewf::{op.name}_fn<{r}>{{}}({', '.join(args)})"
        if out is not kd:
            call_ = f"::ew::convert<{out.ctype}>({call_})"
        t = f"t{self._tmp}"
        self._tmp += 1
        self.lines.append(f"const {out.compute} {t} = ::ew::convert<{out.compute}>({call_});")
        return out, t

    def _as(self, info, expr, want: dt.DType, op: str, name: str) -> str:
        """An input of an op converted to the compute type of the dtype the op runs in."""
        if isinstance(expr, tuple):           # a scalar operand: rounded to `want` in the kernel, as numpy does
            _, i, a = expr
            self.uses.append((i, want, op))
            if a.info is None and a.pytype is int and want.kind == "float":
                return f"::ew::convert<{want.compute}>(::ew::convert<{want.ctype}>(static_cast<double>(p{i})))"
            return f"::ew::convert<{want.compute}>(::ew::convert<{want.ctype}>(p{i}))"
        if info is None:                      # a number of the formula: exact in `want`, checked now
            try:
                v = scalar_value(Operand(name, SCALAR, expr, None, ()), want, op)
            except OverflowError as e:          # numpy's error for int32 + 2**40
                raise OverflowError(f"in formula {self.text!r}: {e}") from None
            except TypeError as e:
                raise FormulaError(f"in formula {self.text!r}: {e}") from None
            return _literal(v.item() if hasattr(v, "item") else v, want)
        return f"::ew::convert<{want.compute}>({expr})"

    def pack(self, values) -> ctypes.Array:
        """The functor's bytes for these scalar values (in self.scalars' order); a number the kernel
        never reads (one only a derived part uses) is packed as 0, whatever its size."""
        read = self.read
        values = [v if i in read else 0 for i, v in enumerate(values)]
        raw = struct.pack(self.fmt, *values) if values else b"\0" * 8
        return ctypes.create_string_buffer(raw, max(len(raw), 8))

    def check_scalars(self, values) -> None:
        """Each number given for a scalar operand fits every dtype it is used in (numpy's NEP 50
        refuses int32 + 2**40); raises before anything runs."""
        for i, want, op in self.uses:
            v = values[i]
            if self.doubles[i]:
                try:
                    float(v)
                except OverflowError:       # numpy's error for float32 * 10**400
                    raise OverflowError(f"{self.text}: {self.scalars[i].name} is an int too large for a float "
                                        f"({v.bit_length()} bits)") from None
                continue
            if isinstance(v, int) and not isinstance(v, bool) and not -(1 << 63) <= v < (1 << 63):
                raise OverflowError(f"{self.text}: {self.scalars[i].name} = "
                                    f"{v if abs(v) < 1 << 128 else f'an int of {v.bit_length()} bits'} "
                                    "does not fit in 64 bits")
            if want.kind == "int":
                scalar_value(Operand(self.scalars[i].name, SCALAR, v, None, ()), want, op)
        for i in self.int_exponents:
            if values[i] < 0:
                raise ValueError(f"Integers to negative integer powers are not allowed ({self.scalars[i].name} = "
                                 f"{values[i]} in {self.text})")

    def launch(self, ins, out_ptr: int, out_shape, stream, blob):
        """Queue the kernel: ins are call.DevIn of the arrays, in order. Returns the layout it used
        (None: contiguous)."""
        contiguous = all(i.shape == tuple(out_shape) for i in ins)
        lay = None if contiguous else call.layout(tuple(out_shape), ins)
        self.launch_ptrs([i.ptr for i in ins], out_ptr, out_shape, stream, blob, lay)
        return lay

    def map(self, slots: jit.Slots, blob_at: int, n: int, out_ptr: int, ptrs: pyarray.array, lay_at: int, stream,
            need_at: int) -> bool:
        """libew's ew_jit_map for one launch (ptrs: the arrays' pointers); False where a kernel it
        needs is not compiled yet (described at need_at), an error raised as CudaError."""
        rc = self.lib.jit_map(slots.table_at, self.tuning, blob_at, n, out_ptr, ptrs.buffer_info()[0], len(ptrs),
                              self.out.itemsize, self.in_sizes_at, lay_at, slots.overlap, need_at, stream.handle,
                              *stream.dims)
        if rc == jit.MISSING:
            return False
        if rc:
            self.lib.check(rc, f"formula {self.text!r}")
        return True

    def slots_on(self, ordinal: int) -> jit.Slots:
        """The formula's kernel slots on a GPU, made empty on first use."""
        slots = self.slots.get(ordinal)
        if slots is None:
            slots = self.slots.setdefault(ordinal, jit.slots_for(ordinal, self.lib.jit_slot_count))
        return slots

    def launch_ptrs(self, in_ptrs, out_ptr: int, out_shape, stream, blob, lay, n: int | None = None) -> None:
        if n is None:
            n = math.prod(out_shape)
        if n == 0:
            return
        slots = self.slots_on(stream.ordinal)
        ptrs = pyarray.array("Q", in_ptrs)      # the pointers as one C array
        blob_at = ctypes.addressof(blob)
        lay_at = 0 if lay is None else ctypes.addressof(lay)
        need, need_at = None, slots.need_at
        for _ in range(6):
            if self.map(slots, blob_at, n, out_ptr, ptrs, lay_at, stream, need_at):
                return
            if need is None:
                # Another thread missing a kernel of this formula writes the shared description
                # too: ask again into this call's own, so the kernel compiled is the one asked for.
                need = (ctypes.c_int64 * 16)()
                need_at = ctypes.addressof(need)
                continue
            expr = jit.name_expression(need, self.out.ctype, self.in_types)
            slots.table[int(need[0])] = jit.kernel(self.source, expr, slots.arch, self.text)
        raise RuntimeError(f"formula {self.text!r}: libew kept asking for kernels")


_programs: dict = {}
_programs_lock = threading.Lock()


def program(tree, args: tuple[Arg, ...], text: str) -> Program:
    """The formula typed for these operands; cached by the tree's identity (trees are kept by the
    parse cache and by pyew.fuse's functions, so hashing them per call is avoided)."""
    key = (id(tree), args, id(library.get()), specs.version())
    hit = _programs.get(key)
    if hit is not None and hit[0] is tree:
        return hit[1]
    p = Program(tree, args, text)
    with _programs_lock:
        if len(_programs) > 4096:
            _programs.clear()
        _programs[key] = (tree, p)
    return p


# ---- running a formula ----------------------------------------------------------------------------

_fallback_warned = False
_plans = call.plans()
_replayers: dict = {}               # id(tree) -> (tree, its C replayer or None)
_REPLAYERS_MAX = 256


def _replayer(tree, arity: int):
    """The C function that replays the tree's plans (call.native_replayer), made once per tree."""
    got = _replayers.get(id(tree))
    if got is None or got[0] is not tree:
        if len(_replayers) >= _REPLAYERS_MAX:
            _replayers.clear()
        got = _replayers[id(tree)] = (tree, call.native_replayer(tree, arity))
    return got[1]


def run(tree, values: dict, text: str, out=None, stream=None, names=None, casting: str = "same_kind"):
    """The formula over these operands (name -> array or number): one kernel on the call path.
    names: the tree's variables, where the caller has them; casting: numpy's rule for an out= of
    another dtype."""
    if names is None:
        names = formula.variables(tree)
    if out is None and stream is None:
        # a call like one before on GPU arrays (pyew's, torch's, CuPy's) and numbers on the only GPU:
        # its plan, replayed in C from the lookup to the launch
        native = _replayer(tree, len(names))
        if native is not None:
            res = native(tuple([values[n] for n in names]))
            if res is not None:
                return res
    if out is None and stream is None and rt.only_one_gpu():
        # else in one Python frame from the lookup to the launch (numpy operands, another library's
        # arrays and anything else: below)
        vals = [values[n] for n in names]
        key = call.plan_key(tree, vals)
        plan = _plans.get(key) if key is not None else None
        if plan is not None and plan.target is tree:
            try:
                res = call.replay(plan, vals, None, rt.resolve_stream(None))
            except jit.Unavailable:     # NVRTC gone since: nothing ran, and _run runs it op by op
                res = None
            if res is not None:
                return res
    if type(out) is tuple and len(out) == 1:        # numpy's out=(o,)
        out = out[0]
    if (out is None or (type(out) is np.ndarray and not out.ndim)) and _zero_d_only(values[n] for n in names):
        # numpy's 0-d operands alone (numexpr takes them): computed as one-element arrays, a 0-d result
        ones = {n: (np.asarray(v).reshape(1) if not python_number(v) else v) for n, v in values.items()}
        res = run(tree, ones, text, out=None if out is None else out.reshape(1), stream=stream, names=names,
                  casting=casting)
        return res.reshape(())[()] if out is None else out

    if out is None:
        res = _on_gpu(tree, values, text, None, stream, names, casting)
        return res[()] if type(res) is np.ndarray and not res.ndim else res
    try:
        return call.returned(out, _on_gpu(tree, values, text, out, stream, names, casting))
    except call.OutMismatch as e:      # out= of another dtype or shape: written as numpy's out= is
        return call.write_out(out, e, lambda: _on_gpu(tree, values, text, None, stream, names, casting), text, stream,
                              f"formula {text!r}", casting)


def _on_gpu(tree, values: dict, text: str, out, stream, names, casting):
    """_run on the operands' GPU where there are several (the caller's current device restored)."""
    if rt.several():
        with rt.on(call.device_of([values[n] for n in names], out, stream)):
            return _run(tree, values, text, out, stream, names, casting)
    return _run(tree, values, text, out, stream, names, casting)


def _zero_d_only(given) -> bool:
    """Numbers and 0-d numpy operands alone, one of them typed (numpy's, not Python's)."""
    typed = False
    for v in given:
        t = type(v)
        if t is float or t is int or t is bool:
            continue
        if isinstance(v, np.generic) or (t is np.ndarray and not v.ndim):
            typed = True
            continue
        return False
    return typed


def _run(tree, values: dict, text: str, out, stream, names, casting):
    try:
        return _run_fused(tree, values, text, out, stream, names, casting)
    except jit.Unavailable as e:     # NVRTC gone since its record was made: nothing ran or was written
        return _op_by_op(tree, values, text, out, stream, str(e), casting)


def _run_fused(tree, values: dict, text: str, out, stream, names, casting):
    s = rt.resolve_stream(stream)
    vals = [values[n] for n in names]
    # pyew's arrays and numbers on the only GPU need no import (plan_args checks each array's GPU)
    key = call.plan_key(tree, vals) if rt.only_one_gpu() else None
    dev = vals if key is not None else call.plan_args(vals, s, text, names)
    plan = None
    if dev is not None:
        vals = dev
        if out is not None and type(out) is not DeviceArray and not isinstance(out, np.ndarray):
            imported = interop.import_device(out, s, text, "out")
            out = out if imported is None else imported
        if key is None:
            key = call.plan_key(tree, dev)
        plan = call.find_plan(key, tree)
        if plan is not None:
            res = call.replay(plan, dev, out, s)
            if res is not None:
                return res
    operands = [classify(v, text, n, s) for n, v in zip(names, vals)]
    args = tuple(Arg(o.name, o.kind != SCALAR, o.info, None if o.info is not None else type(o.value))
                 for o in operands)
    why = jit.unavailable()
    if why:
        return _op_by_op(tree, values, text, out, stream, why, casting)
    prog = program(tree, args, text)
    arrays = [o for o in operands if o.kind != SCALAR]
    scalars = prog.complete(_python_values([o.value for o in operands if o.kind == SCALAR]))
    try:
        blob = prog.packed_complete(scalars)
    except OverflowError as e:
        if not prog.past_int64(scalars):
            raise
        # a Python int past int64, which a kernel's 64-bit number cannot hold: the single ops take
        # it where numpy 2 does (comparing integers with it), op by op; elsewhere the formula's error
        try:
            return _op_by_op(tree, values, text, out, stream, None, casting)
        except OverflowError:
            raise e from None
    shape = broadcast_shape(arrays, text)
    device = any(o.kind == DEVICE for o in arrays)
    o = call.check_out(out, device, shape, prog.out, text, s)
    if isinstance(o, DeviceArray):
        device = True
        call.check_alias(o, arrays, text)
    if key is not None and plan is None:
        if device and all(a.kind == DEVICE for a in arrays):
            plan = _plan(tree, prog, operands, shape, blob, s)
        elif not device and all(a.kind == HOST for a in arrays):
            plan = _host_plan(tree, prog, operands, shape, blob)
        if plan is not None:
            if prog.version == specs.version():     # else load_spec redefined an op meanwhile: not kept
                call.keep_plan(key, plan)
            res = call.replay(plan, vals, o, s)
            if res is not None:
                return res
    p = call.Prepared(arrays, None, shape, device)

    def step(ins, outs, shapes, st):
        prog.launch(ins, outs[0], shapes[0], st, blob)

    return call.run_elementwise(p, s, [(shape, prog.out, o)], step)[0]


def _python_values(values) -> list:
    """A call's numbers as the general path packs them: numpy scalars as their Python values (the
    program already has their dtypes)."""
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def _addressed(packed: ctypes.Array) -> tuple[int, ctypes.Array]:
    return ctypes.addressof(packed), packed


def _plan_numbers(prog: Program, operands):
    """Where a plan's arrays and numbers sit among the operands, and its numbers(args, stream): each
    call's numbers checked and packed into the functor's bytes (their address, and the bytes),
    reused while a call passes the same number objects."""
    array_at = [i for i, op in enumerate(operands) if op.kind != SCALAR]
    numbers_at = [i for i, op in enumerate(operands) if op.kind == SCALAR]

    def convert(values):
        values = prog.complete(_python_values(values))
        if prog.past_int64(values):
            return None         # the general path runs it op by op
        return _addressed(prog.packed_complete(values))
    packed_of = call.reuse_last(convert)

    def numbers(args, s):
        return packed_of([args[i] for i in numbers_at])
    return array_at, numbers_at, numbers


def _plan(tree, prog: Program, operands, shape, blob, s) -> call.Plan:
    """The plan of a formula's call on GPU arrays and numbers (Python's or numpy's): the layout of its
    broadcast (None where every array has the result's shape), the numbers of each call checked
    and packed into the functor's bytes (their address, and the bytes); its native form calls
    ew_jit_map, which declines a launch whose kernel is still to compile (Python compiles it)."""
    array_at, numbers_at, numbers = _plan_numbers(prog, operands)
    ins = [call.DevIn(0, operands[i].shape, operands[i].info) for i in array_at]
    layout = None if all(i.shape == shape for i in ins) else call.layout(shape, ins)

    n, launch_ptrs, map_, slots_of = math.prod(shape), prog.launch_ptrs, prog.map, prog.slots.get
    # the functor's and the layout's addresses, the same for every launch of the plan, taken once
    blob_at, lay_at = ctypes.addressof(blob), 0 if layout is None else ctypes.addressof(layout)

    def launch(out_ptr, args, packed, s, _alive=(blob, layout)):     # libew reads them by address
        ptrs = pyarray.array("Q", [args[i].ptr for i in array_at])
        slots = slots_of(s.ordinal)
        if slots is not None and n and map_(slots, blob_at if packed is None else packed[0], n,
                                            out_ptr, ptrs, lay_at, s, slots.need_at):
            return
        # a kernel to compile first (or none to launch): the general launch
        launch_ptrs(ptrs, out_ptr, shape, s, blob if packed is None else packed[1], layout, n)

    native = None
    if prog.lib.ext is not None:        # the C extension replays it
        slots = prog.slots_on(s.ordinal)
        native = library.native(
            prog.lib.jit_map, [("c", slots.table_at), ("c", prog.tuning), ("n", 0) if numbers_at else ("c", blob_at),
                               ("c", n), ("o", 0), ("A", 0), ("c", len(array_at)), ("c", prog.out.itemsize),
                               ("c", prog.in_sizes_at), ("c", lay_at), ("c", slots.overlap), ("c", slots.need_at)],
            shape, prog.out, n, declines=jit.MISSING)
    return call.Plan(tree, shape, prog.out, array_at, numbers_at, numbers, launch, native=native)


def _host_plan(tree, prog: Program, operands, shape, blob) -> call.Plan | None:
    """The plan of a formula's call on numpy arrays, each of the result's shape, a row or a column
    of it (transfer.runs_of), and numbers: replayed in one shot when it is small
    (call.replay), in runs of whole rows whose copies up and down overlap; else streamed. The
    kernel converts each array's dtype in registers, so it takes the arrays as they are."""
    array_at, numbers_at, numbers = _plan_numbers(prog, operands)
    shapes = [operands[i].shape for i in array_at]
    runs = transfer.runs_of(shapes, shape)
    if runs is None:
        return None
    every = all(a == shape for a in shapes)

    def launch(in_ptrs, out_ptrs, s, m, packed):
        run, own = runs.shapes(m)
        # broadcast_plan's cache keeps the layout: a plan's runs have one or two lengths
        lay = None if every else call.broadcast_plan(tuple(own))[0]
        prog.launch_ptrs(in_ptrs, out_ptrs[0], run, s, blob if packed is None else packed[1], lay)
    return call.Plan(tree, shape, prog.out, array_at, numbers_at, numbers, launch, host=(runs.period, runs.scales))


def _op_by_op(tree, values: dict, text: str, out, stream, why: str | None, casting: str = "same_kind"):
    """The formula one op at a time on the GPU, numpy operands uploaded once and the result brought
    back once: without NVRTC (`why`, said once), or for a number no kernel can hold (why None)."""
    global _fallback_warned
    if why is not None and not _fallback_warned:
        _fallback_warned = True
        warnings.warn(f"pyew: formulas run one kernel per op, not fused: {why}", RuntimeWarning, stacklevel=4)
    from . import kinds
    table = kinds.table()
    vocab = vocabulary()
    host = not any(isinstance(v, DeviceArray) or interop.device_index(v) is not None
                   for v in list(values.values()) + [out] if v is not None and not isinstance(v, (int, float, bool)))
    dev = {}
    for k, v in values.items():
        dev[k] = interop.asarray(v) if isinstance(v, np.ndarray) else v

    def ev(n):
        if isinstance(n, Const):
            return n.value if n.dtype is None else np.dtype(n.dtype).type(n.value)
        if isinstance(n, Var):
            return dev[n.name]
        args = [ev(a) for a in n.args]
        if n.operator and n.op in formula.PYTHON_OPS and not n.params and all(map(python_number, args)):
            return formula.PYTHON_OPS[n.op](*args)        # Python's arithmetic, as in the kernel (Program._weak)
        op = vocab.get(n.op)
        if op is None:
            raise FormulaError(f"formula {text!r} uses {n.op!r}, which the loaded library has no op for")
        fn = table.get(op.name)
        if fn is None:
            raise FormulaError(f"formula {text!r} uses {n.op!r}, an op of {op.source} loaded by pyew.load_spec, "
                               f"which runs only compiled: {why or 'a number past int64 does not fit a kernel'}")
        return fn(*args, **dict(n.params), stream=stream)

    r = ev(tree)
    if not isinstance(r, DeviceArray):
        raise FormulaError(f"formula {text!r} has no array operand: give at least one array")
    if out is None:
        return r.get() if host else r
    try:           # the fused path's check of out=, so either path takes and refuses the same outs
        o = call.check_out(out, not host, r.shape, r.info, text, rt.resolve_stream(stream))
    except call.OutMismatch as e:      # another dtype or a shape the result broadcasts to: as numpy's out=
        return call.write_out(out, e, lambda: r, text, stream, f"formula {text!r}", casting)
    if isinstance(o, np.ndarray):
        return r.get(out=o)
    with call.resolve_stream_of(out, stream):
        o[...] = r
    return call.returned(out, o)


# ---- the public functions -------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _parsed(expr: str, lib_id: int, callables: frozenset):
    tree = formula.parse(expr, callables)
    return tree, formula.variables(tree)


def parse(expr: str):
    """(tree, variable names) of a formula for the loaded library, cached per text."""
    return _parsed(expr, id(library.get()), _names())


def lookup_names(expr: str, names, local_dict, global_dict, frame) -> dict:
    """The formula's operands by name: from local_dict, then global_dict, as numexpr does: either
    one not given is `frame`'s own (its locals, its globals)."""
    scopes = (frame.f_locals if local_dict is None else local_dict,
              frame.f_globals if global_dict is None else global_dict)
    values = {}
    for n in names:
        for sc in scopes:
            if n in sc:
                values[n] = sc[n]
                break
        else:
            pool = sorted({k for sc in scopes for k in sc if isinstance(k, str) and not k.startswith("_")})
            close = difflib.get_close_matches(n, pool, n=4)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise FormulaError(f"formula {expr!r} uses the name {n!r}, which is not defined{hint}")
    return values


def evaluate(expr: str, local_dict: dict | None = None, global_dict: dict | None = None, out=None,
             order: str = "K", casting: str = "same_kind", *, stream=None):
    """Evaluate a formula over arrays as one GPU kernel, as numexpr.evaluate does on the CPU.

    Names are looked up in local_dict, then global_dict, as numexpr does: either one not given
    is the caller's (its locals, its globals). Operands may be numpy arrays (streamed
    through the GPU once; the result is numpy), GPU arrays (pyew's DeviceArray, torch, CuPy, ...:
    the result is a DeviceArray) and numbers. `out=` receives the result as numpy's out= does
    (another dtype by `casting`, numpy's rule: 'same_kind' unless given, where numexpr's default
    is 'safe'; a numpy out the result broadcasts to) and is returned; `stream=` runs it on a
    pyew.Stream. Results are C-ordered: `order` may be numexpr's 'K' (its default), 'A' or 'C'.

    The language: numbers, names, + - * / // % **, comparisons (put brackets around them beside
    & | ^: (x > 0) & (y > 0)), & | ^ ~ << >>, where(c, a, b), numexpr's functions (exp, log, sqrt,
    sin, arctan2, abs, round, copy, ones_like, true_divide, ...) and every map op of the loaded
    library by name with its params as keywords: evaluate("elu(x, alpha=0.5)"). and/or/not,
    numexpr's reductions (sum, max) and its functions of complex numbers and strings (real, conj,
    contains) are refused. The first call of a formula compiles its kernel (cached in memory and
    on disk: python -m pyew cache)."""
    if order not in ("K", "A", "C"):
        raise ValueError(f"evaluate: order={order!r}; pyew's results are C-ordered: 'K', 'A' or 'C' (write "
                         "into an F-ordered out= for another layout)")
    if casting not in _CASTINGS:
        raise ValueError(f"evaluate: casting must be one of {', '.join(map(repr, _CASTINGS))}, not {casting!r}")
    tree, names = parse(expr)
    values = lookup_names(expr, names, local_dict, global_dict, sys._getframe(1))
    try:
        return run(tree, values, expr.strip(), out=out, stream=stream, names=names, casting=casting)
    except RecursionError:
        raise FormulaError(f"formula nests too deeply to compile ({len(expr)} characters, {len(names)} names); "
                           "split it into smaller formulas") from None


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


class Fused:
    """A Python function of arrays traced once per signature into one fused kernel (pyew.fuse)."""

    def __init__(self, fn):
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.trees: dict = {}
        self.static: set[str] = set()      # number arguments an op's param takes: traced by value
        params = self.signature.parameters.values()
        self.varargs = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
        # a call that gives every parameter by position binds without inspect (a few microseconds less)
        plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self.positional = tuple(self.signature.parameters) if plain else None
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        """As a method: the instance is an argument like any other that is not an array."""
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, out=None, stream=None, **kwargs):
        names = self.positional
        if names is not None and not kwargs and len(args) == len(names):
            arguments = leaves = dict(zip(names, args))
        else:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
            leaves = _leaves(self.signature, arguments) if self.varargs else arguments
        while True:
            if self.static:
                static = {k for k in self.static if _number(leaves.get(k))}
                key = tuple([(k, _value_key(v) if k in static else _kind_of(k, v)) for k, v in leaves.items()])
            else:
                static = self.static
                key = tuple([(k, _kind_of(k, v)) for k, v in leaves.items()])
            traced = self.trees.get(key)
            if traced is not None:
                break
            if len(self.trees) >= _TREES_MAX:
                self.trees.clear()
            proxies = {k: v if k in static or not _operand(v) else formula.Traced(Var(k)) for k, v in leaves.items()}
            try:
                r = self.fn(*_rebuilt(self.signature, arguments, proxies, positional=True),
                            **_rebuilt(self.signature, arguments, proxies, positional=False))
            except formula.NeedsValue as e:
                arrays = [n for n in e.names if not _number(leaves.get(n))]
                if not arrays and not static >= set(e.names):
                    self.static = self.static | set(e.names)     # traced again, by their values
                    continue
                raise TypeError(f"pyew.fuse: param {e.param!r} of {e.op} takes a number, and is computed from "
                                f"{', '.join(map(repr, arrays or e.names))}, an array here") from None
            if not isinstance(r, formula.Traced):
                raise TypeError(f"pyew.fuse: {self.fn.__name__} must return a value computed from its arguments, "
                                f"not {type(r).__name__}")
            tree = r.node
            try:
                traced = (tree, formula.variables(tree), f"{self.fn.__name__}: {formula.text(tree)}")
            except RecursionError:
                raise _too_deep(self.fn) from None
            self.trees[key] = traced
            break
        tree, used, text = traced
        values = leaves if len(used) == len(leaves) else {k: leaves[k] for k in used}
        try:
            return run(tree, values, text, out=out, stream=stream, names=used)
        except RecursionError:
            raise _too_deep(self.fn) from None


def _leaves(sig: inspect.Signature, arguments) -> dict:
    """The call's arguments by name, *args as name[i] and **kwargs by their own names."""
    out = {}
    for name, v in arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out.update((f"{name}[{i}]", x) for i, x in enumerate(v))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(v)
        else:
            out[name] = v
    return out


def _rebuilt(sig: inspect.Signature, arguments, leaves: dict, positional: bool):
    """The call of the function again, with `leaves` (by _leaves' names) in place of the values:
    its positional arguments, or its keyword arguments."""
    P = inspect.Parameter
    args, kw = [], {}
    for name, v in arguments.items():
        kind = sig.parameters[name].kind
        if kind is P.VAR_POSITIONAL:
            args.extend(leaves[f"{name}[{i}]"] for i in range(len(v)))
        elif kind is P.VAR_KEYWORD:
            kw.update((k, leaves[k]) for k in v)
        elif kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            args.append(leaves[name])
        else:
            kw[name] = leaves[name]
    return args if positional else kw


def _too_deep(fn) -> FormulaError:
    return FormulaError(f"pyew.fuse: {fn.__name__} builds a formula nested too deeply to compile (a loop of many "
                        "steps, each on the last one's result); fuse fewer steps per function, calling it in turn")


_TREES_MAX = 1024       # traces kept per fused function (a param swept over many values)


def _number(v) -> bool:
    """A Python or numpy number: what an op's param may be traced by the value of."""
    return python_number(v) or isinstance(v, (np.number, np.bool_))


def _value_key(v):
    """A number's trace key by its value: floats by their bits (-0.0 is not 0.0, NaN is NaN)."""
    if isinstance(v, float):
        return ("value", type(v), v.hex())
    if isinstance(v, np.generic):
        return ("value", type(v), v.tobytes())
    return ("value", type(v), v)


def _operand(v) -> bool:
    """An argument pyew.fuse traces as an operand: an array (with a dtype; a list or tuple as numpy
    reads it) or a number. Anything else (a string, None, True or False) is passed to the function
    as it is while tracing: a flag selects what is traced."""
    return (isinstance(v, (int, float, np.generic, list, tuple)) and not isinstance(v, bool)) or \
        (not isinstance(v, type) and getattr(v, "dtype", None) is not None)


_ARRAY_TYPES: set = set()       # types whose objects _kind_of has seen to be arrays with hashable dtypes


def _kind_of(name: str, v):
    """What a trace depends on: a number's type, an array's dtype, any other argument's value."""
    t = type(v)
    if t is DeviceArray or t is np.ndarray:
        return v.dtype
    if t in _ARRAY_TYPES:
        d = v.dtype
        if d is not None:
            return d
    if t is float or t is int:
        return t
    if python_number(v) and not isinstance(v, bool) or isinstance(v, (list, tuple)):
        return type(v)                  # its values are the call's, not the trace's
    if _operand(v):
        d = v.dtype
        if type(d).__hash__ is None:
            return str(d)
        if len(_ARRAY_TYPES) < 64:
            _ARRAY_TYPES.add(t)         # another library's arrays: known by their type from now on
        return d
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"pyew.fuse: argument {name!r} is a {type(v).__name__}, neither an array nor a number; "
                        "such arguments select what is traced, by their value, and must be hashable (for a "
                        "method, a class with __hash__: a frozen dataclass, or eq=False)") from None
    if t.__hash__ is object.__hash__:
        return _instance_key(v)
    return _value_key(v)


def _instance_key(v):
    """The trace key of an object hashed by identity (a method's self): the object, held weakly
    where it can be, and its own attributes, which a trace may have read: setting one traces
    again. State deeper than its own attributes (an attribute object's attributes) is read once,
    when traced."""
    state = getattr(v, "__dict__", None)
    snap = tuple([(k, _state_key(x)) for k, x in state.items()]) if state else ()
    try:
        ref = weakref.ref(v)
    except TypeError:
        ref = v
    return ("instance", ref, snap)


def _state_key(x, depth: int = 0):
    """An attribute in a trace key: numbers, strings and flags by value, tuples and lists by their
    items, other values hashed by value as they are, anything else by identity, held (an id alone
    could be taken by a later object, which would replay the first one's trace)."""
    if x is None or isinstance(x, (bool, int, float, str, bytes, np.generic)):
        return _value_key(x)
    if isinstance(x, (tuple, list)) and depth < 4:
        return (type(x), tuple(_state_key(e, depth + 1) for e in x))
    if type(x).__hash__ not in (None, object.__hash__):
        try:
            hash(x)
            return ("value", type(x), x)
        except TypeError:
            pass
    return _Held(x)


class _Held:
    """An object in a key by its identity, kept alive with the key."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Held and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


def fuse(fn=None):
    """Decorator: the function's operators, numpy ufuncs and pyew ops on its arguments run as one
    fused kernel (CuPy's fuse, numexpr's evaluate for functions). Traced once per signature
    (argument dtypes and kinds); Python numbers among the arguments are kernel parameters, so
    another value does not recompile, except a number an op takes as its param (elu(x,
    alpha=a)), which is traced again for each value, as are True, False and arguments that are
    neither arrays nor numbers. Numbers the function reads from elsewhere (globals, closures) are
    taken when it is traced. Called like the function, plus out= and stream=; works on methods."""
    if fn is None:
        return fuse
    return Fused(fn)
