"""Formulas as expression trees: numexpr-style text parsed with `ast` against an allow-list (user
text is never evaluated or compiled as Python), and Python functions traced with stand-in
operands (pyew.fuse). Both give the same tree of frozen nodes, which pyew/fused.py types and
compiles into one kernel.

The language: numbers, names, the arithmetic operators (+ - * / // % **, unary - and +),
comparisons (< <= > >= == !=, chained as in Python), & | ^ ~, and calls of the library's map ops
and numpy's ufunc names by name, with op params as keywords (elu(x, alpha=0.5)). numexpr's
function names map to the ufuncs of the same meaning (abs -> absolute, arctan2, where, ...).
"""
from __future__ import annotations

import ast
import difflib
import math
import numbers
from dataclasses import dataclass

import numpy as np


class FormulaError(ValueError):
    """A formula pyew cannot take: a syntax error, an unknown name, or something outside the
    language. Raised before anything is compiled or written."""


# ---- the tree -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Var:
    """An operand: an array, or a Python number passed at run time (a kernel parameter)."""
    name: str


@dataclass(frozen=True)
class Const:
    """A number written in the formula (baked into the kernel)."""
    value: bool | int | float


@dataclass(frozen=True)
class Call:
    """An op applied to its inputs; params are (name, number) pairs, sorted."""
    op: str
    args: tuple
    params: tuple = ()


Node = Var | Const | Call

# Python's operators -> numpy ufunc names (the op implementing each is found by name or by its
# spec's `ufunc` field).
BINARY = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
          ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "power",
          ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor"}
UNARY = {ast.USub: "negative", ast.UAdd: "positive", ast.Invert: "invert", ast.Not: "logical_not"}
COMPARE = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
           ast.Eq: "equal", ast.NotEq: "not_equal"}
# numexpr's function names that differ from numpy's ufunc names
ALIASES = {"abs": "absolute", "pow": "power", "mod": "remainder", "min": "minimum", "max": "maximum",
           "neg": "negative"}


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def variables(node) -> list[str]:
    """The Var names of a tree, in first-use order."""
    seen: dict[str, None] = {}

    def walk(n):
        if isinstance(n, Var):
            seen.setdefault(n.name)
        elif isinstance(n, Call):
            for a in n.args:
                walk(a)
    walk(node)
    return list(seen)


def substitute(node, mapping: dict):
    """The tree with each Var named in mapping replaced by mapping's node."""
    if isinstance(node, Var):
        return mapping.get(node.name, node)
    if isinstance(node, Call):
        return Call(node.op, tuple(substitute(a, mapping) for a in node.args), node.params)
    return node


def calls(node) -> list[Call]:
    out = []

    def walk(n):
        if isinstance(n, Call):
            for a in n.args:
                walk(a)
            out.append(n)
    walk(node)
    return out


def text(node) -> str:
    """The tree written back as a formula (for messages and the bench)."""
    if isinstance(node, Var):
        return node.name
    if isinstance(node, Const):
        return repr(node.value)
    args = [text(a) for a in node.args] + [f"{k}={v!r}" for k, v in node.params]
    return f"{node.op}({', '.join(args)})"


# ---- parsing text ---------------------------------------------------------------------------------

def _where(expr: str, node: ast.AST) -> str:
    col = getattr(node, "col_offset", None)
    if col is None:
        return ""
    return f"\n    {expr}\n    {' ' * col}^"


def parse(expr: str, callables) -> Node:
    """The tree of `expr`. `callables`: the function names the formula may call (ops and ufunc
    names of the loaded library); a call of anything else is refused, naming the close ones."""
    if not isinstance(expr, str):
        raise TypeError(f"a formula is a string, not {type(expr).__name__}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        col = (e.offset or 1) - 1
        raise FormulaError(f"syntax error in formula at column {col + 1}: {e.msg}\n    {expr.strip()}\n    "
                           f"{' ' * col}^") from None
    return _Parser(expr.strip(), frozenset(callables)).visit(tree.body)


class _Parser:
    def __init__(self, expr: str, callables: frozenset):
        self.expr = expr
        self.callables = callables

    def refuse(self, node, what: str):
        raise FormulaError(f"{what} is not allowed in a formula{_where(self.expr, node)}\n"
                           "formulas take numbers, names, arithmetic, comparisons, & | ^ ~ and calls of ops")

    def visit(self, node):
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool) or (isinstance(v, (int, float)) and not isinstance(v, complex)):
                return Const(v)
            self.refuse(node, f"the constant {v!r}")
        if isinstance(node, ast.Name):
            if node.id.startswith("__"):
                self.refuse(node, f"the name {node.id!r}")
            if node.id in ("True", "False"):
                return Const(node.id == "True")
            if node.id in ("inf", "nan"):
                return Const(float(node.id))
            return Var(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            left, right = self.visit(node.left), self.visit(node.right)
            if isinstance(left, Const) and isinstance(right, Const):
                return fold(node.op, left.value, right.value, lambda: self.refuse(node, "this constant arithmetic"))
            if isinstance(node.op, ast.Pow):
                return power(left, right, lambda: self.refuse(node, "a power with a non-constant exponent"))
            return Call(BINARY[type(node.op)], (left, right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            operand = self.visit(node.operand)
            if isinstance(node.op, ast.USub) and isinstance(operand, Const) and not isinstance(operand.value, bool):
                return Const(-operand.value)
            return Call(UNARY[type(node.op)], (operand,))
        if isinstance(node, ast.Compare):
            parts = []
            left = self.visit(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                if type(op) not in COMPARE:
                    self.refuse(node, f"the comparison {type(op).__name__}")
                right = self.visit(right_node)
                parts.append(Call(COMPARE[type(op)], (left, right)))
                left = right
            out = parts[0]
            for p in parts[1:]:
                out = Call("logical_and", (out, p))
            return out
        if isinstance(node, ast.BoolOp):
            name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
            vals = [self.visit(v) for v in node.values]
            out = vals[0]
            for v in vals[1:]:
                out = Call(name, (out, v))
            return out
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                self.refuse(node, "calling anything but an op by name")
            if node.func.id.startswith("__"):
                self.refuse(node, f"the name {node.func.id!r}")
            name = canonical(node.func.id)
            if name not in self.callables:
                close = difflib.get_close_matches(name, sorted(self.callables), n=4)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise FormulaError(f"unknown function {node.func.id!r} in formula{hint}{_where(self.expr, node)}")
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                self.refuse(node, "*args or **kwargs")
            args = tuple(self.visit(a) for a in node.args)
            params = []
            for k in node.keywords:
                v = self.visit(k.value)
                if not isinstance(v, Const):
                    self.refuse(k.value, f"a non-constant value for param {k.arg!r}")
                params.append((k.arg, v.value))
            return Call(name, args, tuple(sorted(params)))
        kinds = {ast.Attribute: "an attribute", ast.Subscript: "a subscript", ast.Lambda: "a lambda",
                 ast.IfExp: "a conditional expression (use where(cond, a, b))", ast.ListComp: "a comprehension",
                 ast.List: "a list", ast.Tuple: "a tuple", ast.Dict: "a dict", ast.NamedExpr: "an assignment"}
        self.refuse(node, kinds.get(type(node), f"{type(node).__name__}"))


_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
         ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
         ast.Pow: lambda a, b: a ** b, ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
         ast.BitXor: lambda a, b: a ^ b}


def fold(op, a, b, refuse) -> Const:
    """Arithmetic between two numbers of the formula, done by Python as it would be in numpy code
    (2 ** 40 is a Python int, weakly typed, before it meets an array)."""
    try:
        v = _FOLD[type(op)](a, b)
    except (ArithmeticError, TypeError, ValueError):
        refuse()
    if isinstance(v, complex) or (isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1 << 64):
        refuse()
    return Const(v)


def power(base, exponent, refuse) -> Node:
    """x ** c as numexpr does: small integer constants as multiplications (exact, and as fast as
    the float path), 0.5 as sqrt, -1 as reciprocal, other constants through power."""
    if not isinstance(exponent, Const):
        refuse()
    c = exponent.value
    if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and float(c).is_integer() \
            and 1 <= abs(c) <= 4 and not isinstance(base, Const):
        n = int(abs(c))
        out = base
        for _ in range(n - 1):
            out = Call("multiply", (out, base))
        return out if c > 0 else Call("reciprocal", (out,))
    if c == 0.5 and not isinstance(base, Const):
        return Call("sqrt", (base,))
    return Call("power", (base, exponent))


# ---- tracing Python functions (pyew.fuse) ----------------------------------------------------------

class Traced:
    """A stand-in operand while pyew.fuse traces a function: operators, numpy ufuncs and pyew's op
    functions applied to it build the tree instead of computing."""
    __slots__ = ("node",)
    __array_priority__ = 1000

    def __init__(self, node):
        self.node = node

    def __bool__(self):
        raise TypeError("a traced value has no truth value while pyew.fuse traces: use pyew.where(cond, a, b) "
                        "instead of if/else, and & | ~ instead of and/or/not")

    def __array__(self, *a, **k):
        raise TypeError("pyew.fuse traced a call that converts its operand to numpy; use operators, numpy "
                        "ufuncs or pyew ops on the function's arguments")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise TypeError(f"pyew.fuse cannot trace np.{ufunc.__name__}.{method} or its keywords {sorted(kwargs)}")
        return Traced(Call(ufunc.__name__, tuple(node_of(i) for i in inputs)))


def node_of(v) -> Node:
    if isinstance(v, Traced):
        return v.node
    if isinstance(v, (bool, np.bool_)):
        return Const(bool(v))
    if isinstance(v, numbers.Integral):
        return Const(int(v))
    if isinstance(v, numbers.Real):
        return Const(float(v))
    raise TypeError(f"pyew.fuse: a {type(v).__name__} appeared in the traced function; operands must be its "
                    "arguments or Python numbers")


def use_operators(operators) -> None:
    """Give Traced the operators DeviceArray has (pyew.ufuncs.OPERATORS hands them over when it is
    imported): what pyew.fuse traces is exactly what DeviceArray runs."""
    for o in operators:
        if o.arity == 1:
            setattr(Traced, f"__{o.method}__", _unary(o.ufunc))
        elif o.ufunc == "power":
            Traced.__pow__, Traced.__rpow__ = _power, _binary("power", reflected=True)
        else:
            setattr(Traced, f"__{o.method}__", _binary(o.ufunc))
            if o.reflected:
                setattr(Traced, f"__r{o.method}__", _binary(o.ufunc, reflected=True))


def _binary(name, reflected=False):
    def f(self, other):
        try:
            o = node_of(other)
        except TypeError:
            return NotImplemented
        return Traced(Call(name, (o, self.node) if reflected else (self.node, o)))
    return f


def _unary(name):
    return lambda self: Traced(Call(name, (self.node,)))


def _power(self, other, mod=None):
    if mod is not None:
        return NotImplemented
    o = node_of(other)
    return Traced(power(self.node, o, lambda: None) if isinstance(o, Const) else Call("power", (self.node, o)))


Traced.__hash__ = None


def traced_call(op: str, args, params: dict) -> Traced:
    """An op function called on traced operands (pyew/kinds routes such calls here)."""
    for k, v in params.items():
        if isinstance(v, Traced) or not isinstance(v, (numbers.Real, np.generic)):
            raise TypeError(f"pyew.fuse: param {k!r} of {op} must be a number while tracing")
    return Traced(Call(op, tuple(node_of(a) for a in args), tuple(sorted((k, v if isinstance(v, (bool, int, float))
                                                                          else v.item()) for k, v in params.items()))))


def trace_if_traced(name: str, args, kwargs):
    """For the op functions: a call with a traced operand (inside pyew.fuse) builds the tree; None
    for an ordinary call."""
    for a in args:
        if isinstance(a, Traced):
            params = {k: v for k, v in kwargs.items() if k not in ("out", "stream")}
            return traced_call(name, args, params)
    return None
