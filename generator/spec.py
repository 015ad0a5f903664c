"""Parse spec files (TOML) into a frozen, validated model.

Every error names the file, the op and the field, so a user with several spec files knows where to
look. Parsing is all-or-nothing: the generator writes nothing until every file has parsed.
"""
from __future__ import annotations

import hashlib
import keyword
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pyew import dtypes as dt
from pyew.names import RESERVED as PYEW_RESERVED

from . import abi
from .kinds import KINDS, Kind

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CALL = re.compile(r"(?<![:.\w])([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_ANY_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_:]*)\s*(?:<[^<>()]*>)?\s*\(")    # f( ns::f( f<R>(
# Names the expression's scope already uses: C is the compute type, ewf the op namespace.
_EXPR_RESERVED = {"C", "ewf", "ew", "out", "n", "stream", "i"}
_CPP_KEYWORDS = set(
    "alignas alignof and asm auto bool break case catch char class const constexpr continue "
    "decltype default delete do double else enum explicit export extern false float for friend "
    "goto if inline int long mutable namespace new noexcept not nullptr operator or private "
    "protected public register return short signed sizeof static struct switch template this "
    "throw true try typedef typename union unsigned using virtual void volatile while".split())


class SpecError(ValueError):
    """A spec file is wrong; the message names the file, the op and the field."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str                       # "float" or "int"
    default: float | int | None     # None: the caller must pass it


@dataclass(frozen=True)
class Op:
    name: str
    kind: str
    inputs: tuple[str, ...]
    dtypes: tuple[dt.DType, ...]
    doc: str
    source: str
    expr: str = ""
    ref: str = ""
    params: tuple[Param, ...] = ()
    pair: tuple[tuple[str, str], ...] = ()    # (dtype name, paired expression)
    out: str | None = None                     # fixed output dtype name (casts)
    rtol: float | None = None                  # test tolerance override for float32/float64
    calls: tuple[str, ...] = ()                # other ops this expression calls
    tuning: str | None = None                  # "memory" | "compute"; None: see op_tuning

    def out_dtype(self, dtype: dt.DType) -> dt.DType:
        return dt.BY_NAME[self.out] if self.out else dtype

    def pair_expr(self, dtype: dt.DType) -> str | None:
        return dict(self.pair).get(dtype.name)

    @property
    def kind_info(self) -> Kind:
        return KINDS[self.kind]

    def kernels(self) -> list["Kernel"]:
        return [Kernel(self, d) for d in self.dtypes]


@dataclass(frozen=True)
class Kernel:
    """One (op, dtype) instantiation; its procedural name is its identity (and its .cu's name)."""
    op: Op
    dtype: dt.DType

    @property
    def name(self) -> str:
        return abi.symbol(self.op.name, self.dtype)

    @property
    def out_dtype(self) -> dt.DType:
        return self.op.out_dtype(self.dtype)

    def entries(self):
        return self.op.kind_info.entries(self.op, self.dtype)


@dataclass(frozen=True)
class SpecFile:
    path: str
    sha256: str


@dataclass(frozen=True)
class Spec:
    ops: tuple[Op, ...]
    files: tuple[SpecFile, ...] = field(default=())

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def kernels(self) -> list[Kernel]:
        return [k for o in self.ops for k in o.kernels()]


def _fail(path, op, fld, msg):
    where = f"{path}"
    if op is not None:
        where += f": op '{op}'"
    if fld is not None:
        where += f": field '{fld}'"
    raise SpecError(f"{where}: {msg}")


def _ident(value, path, op, fld, what):
    if not isinstance(value, str) or not _IDENT.match(value):
        _fail(path, op, fld, f"{what} {value!r} is not a C identifier")
    if value in _CPP_KEYWORDS or keyword.iskeyword(value):
        _fail(path, op, fld, f"{what} {value!r} is a C++ or Python keyword")
    return value


def _dtypes(value, path, op):
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        _fail(path, op, "dtypes", "must be a non-empty list of dtype names or groups")
    out: list[dt.DType] = []
    for v in value:
        names = dt.GROUPS.get(v, (v,)) if isinstance(v, str) else (v,)
        for n in names:
            if n not in dt.BY_NAME:
                _fail(path, op, "dtypes", f"unknown dtype {n!r}; known: "
                      f"{', '.join(dt.BY_NAME)}; groups: {', '.join(dt.GROUPS)}")
            if dt.BY_NAME[n] not in out:
                out.append(dt.BY_NAME[n])
    return tuple(out)


def _params(value, path, op, taken):
    if not isinstance(value, list):
        _fail(path, op, "params", "must be a list of tables {name, type, default}")
    params = []
    for p in value:
        if not isinstance(p, dict):
            _fail(path, op, "params", f"entry {p!r} is not a table")
        unknown = set(p) - {"name", "type", "default"}
        if unknown:
            _fail(path, op, "params", f"unknown key(s) {sorted(unknown)}; allowed: name, type, default")
        if "name" not in p or "type" not in p:
            _fail(path, op, "params", f"entry {p!r} needs 'name' and 'type'")
        name = _ident(p["name"], path, op, "params", "param name")
        if name in taken or name in _EXPR_RESERVED or name in PYEW_RESERVED:
            _fail(path, op, "params", f"param name {name!r} is already used")
        taken.add(name)
        if p["type"] not in ("float", "int"):
            _fail(path, op, "params", f"param {name!r}: type must be 'float' or 'int', not {p['type']!r}")
        default = p.get("default")
        if default is not None:
            ok = (isinstance(default, (int, float)) if p["type"] == "float"
                  else isinstance(default, int)) and not isinstance(default, bool)
            if not ok:
                _fail(path, op, "params", f"param {name!r}: default {default!r} is not a {p['type']}")
            default = float(default) if p["type"] == "float" else int(default)
        params.append(Param(name, p["type"], default))
    seen_default = False
    for p in params:
        if p.default is not None:
            seen_default = True
        elif seen_default:
            _fail(path, op, "params", f"param {p.name!r} without a default follows one with a default")
    return tuple(params)


def _str(entry, key, path, op, required, single_line=False):
    if key not in entry:
        if required:
            _fail(path, op, key, "is missing")
        return ""
    v = entry[key]
    if not isinstance(v, str) or not v.strip():
        _fail(path, op, key, "must be a non-empty string")
    if single_line and "\n" in v.strip():
        _fail(path, op, key, "must be one line")
    return v.strip()


def parse_op(entry, path) -> Op:
    if not isinstance(entry, dict):
        _fail(path, None, "op", f"each [[op]] must be a table, got {entry!r}")
    name = entry.get("name")
    if name is None:
        _fail(path, None, "name", "an [[op]] has no name")
    name = _ident(name, path, name, "name", "op name")
    if name in PYEW_RESERVED:
        _fail(path, name, "name", f"{name!r} is a pyew function name; pick another")
    kind_name = entry.get("kind", "map")
    if kind_name not in KINDS:
        _fail(path, name, "kind", f"unknown kind {kind_name!r}; known: {', '.join(KINDS)}")
    kind = KINDS[kind_name]
    unknown = set(entry) - kind.allowed - {"name", "kind"}
    if unknown:
        _fail(path, name, sorted(unknown)[0],
              f"unknown key for a '{kind_name}' op; allowed: {', '.join(sorted(kind.allowed | {'name', 'kind'}))}")
    for req in kind.required:
        if req not in entry:
            _fail(path, name, req, "is missing")

    inputs = entry.get("inputs", list(kind.default_inputs))
    if not isinstance(inputs, list) or not inputs:
        _fail(path, name, "inputs", "must be a non-empty list of names")
    inputs = tuple(_ident(i, path, name, "inputs", "input name") for i in inputs)
    if len(set(inputs)) != len(inputs):
        _fail(path, name, "inputs", f"duplicate input names in {list(inputs)}")
    for i in inputs:
        if i in _EXPR_RESERVED or i in PYEW_RESERVED:
            _fail(path, name, "inputs", f"input name {i!r} is reserved")
    if not (kind.min_inputs <= len(inputs) <= kind.max_inputs):
        _fail(path, name, "inputs", f"a '{kind_name}' op takes {kind.min_inputs}..{kind.max_inputs} inputs, "
              f"got {len(inputs)}")
    dtypes = _dtypes(entry["dtypes"], path, name)
    for d in dtypes:
        if d.name not in kind.dtypes:
            _fail(path, name, "dtypes", f"a '{kind_name}' op supports {', '.join(kind.dtypes)}; not {d.name}")
    params = _params(entry.get("params", []), path, name, set(inputs))
    doc = _str(entry, "doc", path, name, True, single_line=True)
    expr = _str(entry, "expr", path, name, "expr" in kind.required)
    ref = _str(entry, "ref", path, name, "ref" in kind.required)
    if ref:
        try:
            compile(ref, f"{path}:{name}.ref", "eval")
        except SyntaxError as e:
            _fail(path, name, "ref", f"not a Python expression: {e.msg}")
    out = entry.get("out")
    if out is not None:
        if out not in dt.BY_NAME:
            _fail(path, name, "out", f"unknown dtype {out!r}; known: {', '.join(dt.BY_NAME)}")
    pair = entry.get("pair", {})
    if not isinstance(pair, dict):
        _fail(path, name, "pair", "must be a table {dtype = \"paired expression\"}")
    for k, v in pair.items():
        if k not in dt.BY_NAME or dt.BY_NAME[k] not in dtypes:
            _fail(path, name, "pair", f"dtype {k!r} is not one of this op's dtypes")
        if dt.BY_NAME[k].pair is None:
            _fail(path, name, "pair", f"dtype {k!r} has no paired type")
        if out is not None and dt.BY_NAME[out].pair is None:
            _fail(path, name, "pair", f"output dtype {out!r} has no paired type")
        if not isinstance(v, str) or not v.strip():
            _fail(path, name, "pair", f"the {k} expression must be a non-empty string")
    rtol = entry.get("rtol")
    if rtol is not None and (isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 < rtol < 1):
        _fail(path, name, "rtol", f"must be a number in (0, 1), got {rtol!r}")
    tuning = entry.get("tuning")
    if tuning is not None and tuning not in TUNINGS:
        _fail(path, name, "tuning", f"must be one of {', '.join(map(repr, TUNINGS))}, got {tuning!r}")
    calls = tuple(sorted({c for c in _CALL.findall(expr)}))
    op = Op(name=name, kind=kind_name, inputs=inputs, dtypes=dtypes, doc=doc, source=str(path),
            expr=expr, ref=ref, params=params,
            pair=tuple(sorted((k, v.strip()) for k, v in pair.items())), out=out, calls=calls,
            rtol=None if rtol is None else float(rtol), tuning=tuning)
    _check_entry_args(op, path)
    return op


def _check_entry_args(op: Op, path):
    """Inputs and params become C parameters next to the kind's fixed ones (y, mask, n, stream,
    sms, ...); a clash would only surface as a compile error in generated code."""
    for e in Kernel(op, op.dtypes[0]).entries():
        names = [a for a, _ in e.args]
        for a in names:
            if names.count(a) > 1:
                fld = "params" if a in {p.name for p in op.params} else "inputs"
                _fail(path, op.name, fld, f"name {a!r} clashes with a parameter of the C entry point "
                      f"{e.symbol}({', '.join(names)}); pick another")


def parse_text(text: str, path: str) -> list[Op]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    unknown = set(data) - {"op"}
    if unknown:
        _fail(path, None, sorted(unknown)[0], "unknown top-level key; a spec holds only [[op]] tables")
    ops = data.get("op", [])
    if not isinstance(ops, list):
        _fail(path, None, "op", "must be an array of tables ([[op]])")
    return [parse_op(e, path) for e in ops]


def load(paths) -> Spec:
    """Parse every spec file; ops from all files form one spec."""
    ops: list[Op] = []
    files: list[SpecFile] = []
    where: dict[str, str] = {}
    for p in paths:
        path = Path(p)
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise SpecError(f"{path}: cannot read spec file: {e.strerror}") from None
        files.append(SpecFile(str(path.resolve()), hashlib.sha256(raw).hexdigest()))
        for op in parse_text(raw.decode("utf-8"), str(path)):
            if op.name in where:
                _fail(path, op.name, "name", f"duplicate op name; first defined in {where[op.name]}")
            where[op.name] = str(path)
            ops.append(op)
    if not ops:
        raise SpecError(f"{', '.join(map(str, paths)) or '(no files)'}: no ops defined")
    _check_calls(ops)
    return Spec(tuple(ops), tuple(files))


def _check_calls(ops):
    """Ops may call other ops' functions; refuse a cycle (it could never compile)."""
    by_name = {o.name: o for o in ops}
    state: dict[str, int] = {}

    def visit(o, stack):
        if state.get(o.name) == 2:
            return
        if state.get(o.name) == 1:
            _fail(o.source, o.name, "expr", f"calls form a cycle: {' -> '.join(stack + [o.name])}")
        state[o.name] = 1
        for c in o.calls:
            if c in by_name and c != o.name:
                visit(by_name[c], stack + [o.name])
            elif c == o.name:
                _fail(o.source, o.name, "expr", "an op's expression cannot call itself")
        state[o.name] = 2

    for o in ops:
        visit(o, [])


# Launch shapes of the map kernel (ew::MemoryBoundTuning / ew::ComputeBoundTuning in
# libew/elementwise.cuh), chosen per op; benchmarks/RESULTS.md has the sweep behind them.
TUNINGS = ("memory", "compute")
# Calls that cost a few instructions at most: they leave an op "memory".
_CHEAP_CALLS = {"C", "static_cast", "min", "max", "fmin", "fmax", "fminf", "fmaxf", "fabs", "fabsf",
                "abs", "copysign", "copysignf", "ew::wrap_add", "ew::wrap_sub", "ew::wrap_mul"}


def op_tuning(op: Op, spec: Spec) -> str:
    """The spec's `tuning`, else "compute" when the expression calls a function (a math function,
    an ew:: helper, or an op that is itself "compute"), else "memory". Casts like C(0), min/max/abs,
    the ew::wrap_* integer helpers and calls of "memory" ops (relu(x + y)) keep an op "memory"."""
    if op.tuning is not None:
        return op.tuning
    names = {o.name for o in spec.ops}
    for c in _ANY_CALL.findall(op.expr):
        if c in _CHEAP_CALLS:
            continue
        if c in names:
            if c != op.name and op_tuning(spec.op(c), spec) == "compute":
                return "compute"
            continue
        return "compute"
    return "memory"


def direct_calls(op: Op, spec: Spec) -> list[Op]:
    """The ops this op's expression calls itself, in order of first call."""
    names = {o.name for o in spec.ops}
    return [spec.op(c) for c in dict.fromkeys(op.calls) if c in names and c != op.name]


def op_calls(op: Op, spec: Spec) -> list[Op]:
    """The ops this op's expression calls, dependencies first."""
    names = {o.name for o in spec.ops}
    seen: list[Op] = []

    def walk(o):
        for c in o.calls:
            if c in names and c != o.name:
                dep = spec.op(c)
                walk(dep)
                if dep not in seen:
                    seen.append(dep)

    walk(op)
    return seen
