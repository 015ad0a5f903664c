"""Formulas as expression trees: numexpr-style text parsed with `ast` against an allow-list (user
text is never evaluated or compiled as Python), and Python functions traced with stand-in
operands (pyew.fuse). Both give the same tree of frozen nodes, which pyew/fused.py types and
compiles into one kernel.

The language: numbers, names, the arithmetic operators (+ - * / // % **, unary - and +),
comparisons (< <= > >= == !=, chained as in Python), & | ^ ~ (and << >> where the library has
left_shift and right_shift), and calls of the library's map ops
and numpy's ufunc names by name, with op params as keywords (elu(x, alpha=0.5)). numexpr's
function names map to the ufuncs of the same meaning (abs -> absolute, arctan2, where, ...).
"""
from __future__ import annotations

import ast
import difflib
import io
import numbers
import operator
import tokenize
from dataclasses import dataclass

import numpy as np

from .errors import PyewError


class FormulaError(PyewError, ValueError):
    """A formula pyew cannot take: a syntax error, an unknown name, or something outside the
    language. Raised before anything is compiled or written."""


# ---- the tree -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Var:
    """An operand: an array, or a Python number passed at run time (a kernel parameter)."""
    name: str


@dataclass(frozen=True)
class Const:
    """A number written in the formula (baked into the kernel): a Python number, weakly typed, or
    with `dtype` a numpy scalar of that dtype (pyew.fuse meeting np.float32(0.5))."""
    value: bool | int | float
    dtype: str | None = None


@dataclass(frozen=True)
class Call:
    """An op applied to its inputs; params are (name, number) pairs, sorted. `operator`: written as
    Python's operator (x + y, x ** 2), which on Python numbers alone is Python's arithmetic, giving
    a Python number (weak); a function call gives a typed result, as numpy's ufuncs do."""
    op: str
    args: tuple
    params: tuple = ()
    operator: bool = False


Node = Var | Const | Call

# Python's operators -> numpy ufunc names (the op implementing each is found by name or by its
# spec's `ufunc` field).
BINARY = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
          ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "power",
          ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor",
          ast.LShift: "left_shift", ast.RShift: "right_shift"}
UNARY = {ast.USub: "negative", ast.UAdd: "positive", ast.Invert: "invert"}
COMPARE = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
           ast.Eq: "equal", ast.NotEq: "not_equal"}
# numexpr's function names that differ from numpy's ufunc names
ALIASES = {"abs": "absolute", "pow": "power", "mod": "remainder", "neg": "negative", "round": "rint",
           "true_divide": "divide"}
# numexpr's functions that are formulas of one argument here: copy(x) is x (a formula's result is
# new anyway), ones_like(x) ones of x's dtype (True, NEP 50's weak bool, takes it)
SPELLED = {"copy": lambda x: x, "ones_like": lambda x: Call("where", (Const(True), Const(True), x))}
# numexpr's reductions: a formula is elementwise (a library op of the name is called as any other)
REDUCTIONS = {"sum": "np.sum(evaluate(...))", "prod": "np.prod(evaluate(...))",
              "min": "minimum(a, b) elementwise, or np.min(...) of the result",
              "max": "maximum(a, b) elementwise, or np.max(...) of the result"}
# numexpr's functions of complex numbers and strings, which pyew has no dtypes for
_COMPLEX = "takes complex numbers in numexpr; pyew has no complex dtype"
NOT_NUMBERS = {"complex": "makes complex numbers in numexpr; pyew has no complex dtype: compute the real and "
                          "imaginary parts as two formulas",
               "real": f"{_COMPLEX}: of a real array it is the array itself, so leave real() out",
               "conj": f"{_COMPLEX}: of a real array it is the array itself, so leave conj() out",
               "imag": f"{_COMPLEX}: of a real array it is 0",
               "contains": "compares strings in numexpr; pyew's dtypes are numbers and bools: compare on the "
                           "host with numpy's string functions"}


_SYMBOLS = {2: {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "floor_divide": "//", "remainder": "%",
                "power": "**", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "less": "<",
                "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==", "not_equal": "!="},
            1: {"negative": "-", "positive": "+", "invert": "~"}}


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
        return Call(node.op, tuple(substitute(a, mapping) for a in node.args), node.params, node.operator)
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


def comment(s: str) -> str:
    """s made safe as one line of a generated C++ comment (// or /* */): whitespace folded to single
    spaces (no newline ends it), no */ or ?? in it, and no trailing backslash to splice the next
    line into it."""
    s = " ".join(s.split()).replace("*/", "* /").replace("??", "? ?")
    return s + "." if s.endswith("\\") else s


def text(node) -> str:
    """The tree written back as a formula (for messages and the bench): operators as operators."""
    if isinstance(node, Var):
        return node.name
    if isinstance(node, Const):
        v = node.value
        if isinstance(v, int) and v.bit_length() > _MAX_INT_BITS:     # repr refuses ints past 4300 digits
            return f"<an int of {v.bit_length()} bits>"
        return repr(v)
    if node.operator and not node.params:
        if len(node.args) == 2 and node.op in _SYMBOLS[2]:
            return f"({text(node.args[0])} {_SYMBOLS[2][node.op]} {text(node.args[1])})"
        if len(node.args) == 1 and node.op in _SYMBOLS[1]:
            return f"({_SYMBOLS[1][node.op]}{text(node.args[0])})"
    args = [text(a) for a in node.args] + [f"{k}={v!r}" for k, v in node.params]
    return f"{node.op}({', '.join(args)})"


# ---- parsing text ---------------------------------------------------------------------------------

def _where(expr: str, node: ast.AST) -> str:
    col = getattr(node, "col_offset", None)
    if col is None:
        return ""
    line = expr.split("\n")[node.lineno - 1]
    col = len(line.encode()[:col].decode(errors="ignore"))      # ast counts UTF-8 bytes from the line's start
    return f"\n    {line}\n    {' ' * col}^"


def _without_comments(expr: str) -> bytes:
    """expr's UTF-8 with comments and line continuations as spaces (byte offsets unchanged)."""
    lines = expr.split("\n")
    for tok in tokenize.generate_tokens(io.StringIO(expr).readline):
        if tok.type == tokenize.COMMENT:
            (row, col), (_, end) = tok.start, tok.end
            line = lines[row - 1]
            lines[row - 1] = line[:col] + " " * len(line[col:end].encode()) + line[end:]
    return "\n".join(lines).encode().replace(b"\\\n", b"  ")


def _span(expr: str, node: ast.AST) -> tuple[int, int]:
    """node's start and end as byte offsets into expr's UTF-8 (ast gives them per line)."""
    starts = [0]
    for ln in expr.encode().split(b"\n")[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    return starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset


def parse(expr: str, callables) -> Node:
    """The tree of `expr`. `callables`: the function names the formula may call (ops and ufunc
    names of the loaded library); a call of anything else is refused, naming the close ones."""
    if not isinstance(expr, str):
        raise TypeError(f"a formula is a string, not {type(expr).__name__}")
    expr = expr.replace("\r\n", "\n").replace("\r", "\n")       # line ends as Python's parser reads them
    try:
        tree = ast.parse(expr.strip(), mode="eval")
        return _Parser(expr.strip(), frozenset(callables)).visit(tree.body)
    except SyntaxError as e:
        col = (e.offset or 1) - 1
        lines = expr.strip().split("\n")
        at = f"column {col + 1}"
        if len(lines) > 1 and e.lineno and 1 <= e.lineno <= len(lines):      # the caret under its own line
            at = f"line {e.lineno}, {at}"
            lines = [lines[e.lineno - 1]]
        raise FormulaError(f"syntax error in formula at {at}: {e.msg}\n    {lines[0]}\n    {' ' * col}^") from None
    except (RecursionError, MemoryError):
        raise FormulaError(f"formula nests too deeply to parse ({len(expr)} characters); split it into "
                           "smaller formulas") from None


class _Parser:
    def __init__(self, expr: str, callables: frozenset):
        self.expr = expr
        self.callables = callables

    def refuse(self, node, what: str):
        raise FormulaError(f"{what} is not allowed in a formula{_where(self.expr, node)}\n"
                           "formulas take numbers, names, arithmetic, comparisons, & | ^ ~ and calls of ops")

    def fails(self, node, why: str):
        raise FormulaError(f"the formula's arithmetic on its numbers fails: {why}{_where(self.expr, node)}")

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
                return fold(node.op, left.value, right.value, lambda why: self.fails(node, why))
            return Call(BINARY[type(node.op)], (left, right), operator=True)
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            operand = self.visit(node.operand)
            if isinstance(operand, Const):
                return fold_unary(node.op, operand.value, lambda why: self.fails(node, why))
            return Call(UNARY[type(node.op)], (operand,), operator=True)
        if isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            word = "not" if isinstance(node, ast.UnaryOp) else "and" if isinstance(node.op, ast.And) else "or"
            raise FormulaError(f"{word!r} is not allowed in a formula: it takes the truth of one value, as numpy and "
                               f"numexpr refuse it for arrays; use & | ~ (with brackets around comparisons: "
                               f"(x > 0) & (y > 0)){_where(self.expr, node)}")
        if isinstance(node, ast.Compare):
            if len(node.ops) > 1:
                self._bitwise_in_chain(node)
            parts = []
            left = self.visit(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                if type(op) not in COMPARE:
                    self.refuse(node, f"the comparison {type(op).__name__}")
                right = self.visit(right_node)
                parts.append(Call(COMPARE[type(op)], (left, right), operator=True))
                left = right
            out = parts[0]
            for p in parts[1:]:
                out = Call("logical_and", (out, p), operator=True)
            return out
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                self.refuse(node, "calling anything but an op by name")
            if node.func.id.startswith("__"):
                self.refuse(node, f"the name {node.func.id!r}")
            name = canonical(node.func.id)
            if name not in self.callables and name in SPELLED:
                if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
                    self.refuse(node, f"{name}() of anything but one argument")
                return SPELLED[name](self.visit(node.args[0]))
            if name not in self.callables and name in REDUCTIONS:
                raise FormulaError(f"{name}() is a reduction in numexpr; formulas are elementwise: use "
                                   f"{REDUCTIONS[name]}{_where(self.expr, node)}")
            if name not in self.callables and name in NOT_NUMBERS:
                raise FormulaError(f"{name}() {NOT_NUMBERS[name]}{_where(self.expr, node)}")
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

    def _bitwise_in_chain(self, node: ast.Compare) -> None:
        """x > 0 & y > 0 is Python's chain x > (0 & y) > 0, as & binds tighter than a comparison;
        numpy raises on it and numexpr refuses it, so a chain with an unbracketed & | ^ operand is
        refused, naming what was meant."""
        bare = _without_comments(self.expr)

        def seg(n):                 # n's text, on one line
            a, b = _span(self.expr, n)
            return " ".join(bare[a:b].decode().split())
        for i, part in enumerate([node.left, *node.comparators]):
            if not (isinstance(part, ast.BinOp) and isinstance(part.op, (ast.BitAnd, ast.BitOr, ast.BitXor))):
                continue
            a, b = _span(self.expr, part)
            if bare[:a].rstrip().endswith(b"(") and bare[b:].lstrip().startswith(b")"):
                continue            # x > (0 & y) > 0, written so
            sym = _SYMBOLS[2][BINARY[type(part.op)]]
            hint = ""
            if len(node.ops) == 2 and i == 1:
                first, second = (_SYMBOLS[2][COMPARE[type(o)]] for o in node.ops)
                hint = (f"; for the {sym} of two comparisons write ({seg(node.left)} {first} {seg(part.left)}) {sym} "
                        f"({seg(part.right)} {second} {seg(node.comparators[1])})")
            raise FormulaError(f"this parses as a chain of comparisons over {seg(part)} ({sym} binds tighter than a "
                               f"comparison){hint}{_where(self.expr, part)}")


def fold(op, a, b, refuse) -> Const:
    """Arithmetic between two numbers of the formula, done by Python as it would be in numpy code
    (2 ** 40 is a Python int, weakly typed, before it meets an array). refuse(why) raises."""
    try:
        v = PYTHON_OPS[BINARY[type(op)]](a, b)
    except (ArithmeticError, TypeError, ValueError, MemoryError) as e:
        refuse(f"{type(e).__name__}: {e}")
    return _folded(v, refuse)


def fold_unary(op, a, refuse) -> Const:
    """-c, +c and ~c of a number of the formula, by Python."""
    try:
        v = PYTHON_OPS[UNARY[type(op)]](a)
    except (ArithmeticError, TypeError, ValueError) as e:
        refuse(f"{type(e).__name__}: {e}")
    return _folded(v, refuse)


def _folded(v, refuse) -> Const:
    if isinstance(v, complex):
        refuse(f"a complex result, {v!r}")
    return Const(v)


_MAX_INT_BITS = 4096    # far past any dtype (float64 overflows at 1024 bits)


def _too_wide(bits: int) -> OverflowError:
    return OverflowError(f"the result is an int of about {bits} bits, more than any dtype holds")


def _pow(a, b):
    """Python's a ** b, refusing an int result too wide for any dtype before computing it (9 ** 9
    ** 9 would take minutes and gigabytes)."""
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and (a.bit_length() - 1) * b > _MAX_INT_BITS:
        raise _too_wide((a.bit_length() - 1) * b)
    return operator.pow(a, b)


def _lshift(a, b):
    if isinstance(a, int) and isinstance(b, int) and a and b > _MAX_INT_BITS:
        raise _too_wide(a.bit_length() + b)
    return operator.lshift(a, b)


# Python's arithmetic of the operators, by the ufunc name the tree gives each: what a formula's
# operators compute on Python numbers alone (fused.py evaluates such parts on the host).
PYTHON_OPS = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "divide": operator.truediv,
              "true_divide": operator.truediv, "floor_divide": operator.floordiv, "remainder": operator.mod,
              "power": _pow, "bitwise_and": operator.and_, "bitwise_or": operator.or_,
              "bitwise_xor": operator.xor, "left_shift": _lshift, "right_shift": operator.rshift,
              "negative": operator.neg, "positive": operator.pos, "invert": operator.invert,
              "logical_not": operator.not_, "logical_and": lambda a, b: bool(a and b), "less": operator.lt,
              "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge, "equal": operator.eq,
              "not_equal": operator.ne, "reciprocal": lambda a: 1 / a, "sqrt": lambda a: a ** 0.5}


def python_value(node, env: dict):
    """A tree of operators over Python numbers (Consts, and Vars given in env) as Python computes
    it; its errors (ZeroDivisionError, OverflowError) are Python's."""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Var):
        return env[node.name]
    return PYTHON_OPS[node.op](*[python_value(a, env) for a in node.args])


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
        raise TypeError("pyew.fuse traced a call that converts its operand to numpy (a numpy function that is not a "
                        "ufunc: np.where, np.clip, ...); use operators, numpy ufuncs or pyew ops (pyew.where, "
                        "pyew.clip) on the function's arguments")

    def __getattr__(self, name):
        raise AttributeError(f"pyew.fuse: a traced value has no attribute {name!r}: a fused function computes "
                             "elementwise with operators, numpy ufuncs and pyew ops; reductions, casts and "
                             "reshapes go outside it")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise TypeError(f"pyew.fuse cannot trace np.{ufunc.__name__}.{method} or its keywords {sorted(kwargs)}")
        return Traced(Call(ufunc.__name__, tuple(node_of(i) for i in inputs)))


def node_of(v) -> Node:
    if isinstance(v, Traced):
        return v.node
    if isinstance(v, np.generic) and isinstance(v, (np.number, np.bool_)):      # typed, as numpy has it
        return Const(v.item(), v.dtype.name)
    if isinstance(v, bool):
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
        return Traced(Call(name, (o, self.node) if reflected else (self.node, o), operator=True))
    return f


def _unary(name):
    return lambda self: Traced(Call(name, (self.node,), operator=True))


def _power(self, other, mod=None):
    if mod is not None:
        return NotImplemented
    try:
        o = node_of(other)
    except TypeError:
        return NotImplemented
    return Traced(Call("power", (self.node, o), operator=True))


Traced.__hash__ = None


class NeedsValue(TypeError):
    """An op's param was given a value computed from traced arguments while pyew.fuse traced: the
    arguments `names`, if Python numbers, are traced again by their values."""

    def __init__(self, names: list[str], op: str, param: str):
        super().__init__(f"pyew.fuse: param {param!r} of {op} takes a number, not a value computed from "
                         f"{', '.join(names)}")
        self.names, self.op, self.param = names, op, param


def traced_call(op: str, args, params: dict) -> Traced:
    """An op function called on traced operands (pyew/kinds routes such calls here)."""
    for k, v in params.items():
        if isinstance(v, Traced):
            raise NeedsValue(variables(v.node), op, k)
        if not isinstance(v, (numbers.Real, np.generic)):
            raise TypeError(f"pyew.fuse: param {k!r} of {op} must be a number, not {type(v).__name__}")
    return Traced(Call(op, tuple(node_of(a) for a in args), tuple(sorted((k, v if isinstance(v, (bool, int, float))
                                                                          else v.item()) for k, v in params.items()))))


def trace_if_traced(name: str, args, kwargs, fusable: bool = True):
    """For the op functions: a call with a traced operand (inside pyew.fuse) builds the tree (or,
    for an op a formula cannot hold, raises); None for an ordinary call."""
    for a in args:
        if isinstance(a, Traced):
            if not fusable:
                raise TypeError(f"pyew.fuse: {name} is not an elementwise map op, so it cannot be part of a fused "
                                "formula; call it outside the fused function")
            if kwargs.get("out") is not None:
                raise TypeError(f"pyew.fuse: {name}(..., out=) inside a fused function: return the value, and give "
                                "out= to the fused function's call")
            params = {k: v for k, v in kwargs.items() if k not in ("out", "stream")}
            return traced_call(name, args, params)
    return None
