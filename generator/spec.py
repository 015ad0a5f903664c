"""Parse spec files (TOML) into a frozen, validated model.

Every error names the file, the op and the field, so a user with several spec files knows where to
look. Parsing is all-or-nothing: the generator writes nothing until every file has parsed and the
ops of all files have been checked together (calls between ops, entry-point symbols).
"""
from __future__ import annotations

# names first: it must see pyew before anything else imports it (see generator/names.py)
from . import names as nm

# isort: split
import ast
import builtins
import functools
import hashlib
import math
import os
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyew import dtypes as dt
from pyew.formula import ALIASES

from . import abi
from . import expr as ex
from .kinds import KINDS, Kind

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = "libew/ops.toml"
INT64 = (-(1 << 63), (1 << 63) - 1)
# Characters a one-line field may not hold: control characters (C0, DEL, C1), line and paragraph
# separators, and the bidirectional overrides that make text read differently from how it compiles.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


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
    source: str                                # the spec file, as spec_path() spells it
    expr: str = ""
    ref: str = ""
    params: tuple[Param, ...] = ()
    pair: tuple[tuple[str, str], ...] = ()    # (dtype name, paired expression)
    out: str | None = None                     # fixed output dtype name (casts)
    rtol: float | None = None                  # test tolerance override for float32/float64
    calls: tuple[str, ...] = ()                # names the expression calls unqualified: f(...)
    tuning: str | None = None                  # "memory" | "compute"; None: see op_tuning
    ufunc: str | None = None                   # the numpy ufunc it implements, where its name differs
    fixed: tuple[tuple[str, str], ...] = ()    # (input name, dtype name): inputs of a dtype of their own
    ulp: int | None = None                     # test tolerance for float32, in ulp of the rounded reference
    launch: str = "tuned"                      # "tuned" | "basic": the contiguous entry's kernels (LAUNCHES)

    def out_dtype(self, dtype: dt.DType) -> dt.DType:
        return dt.BY_NAME[self.out] if self.out else dtype

    def in_dtypes(self, dtype: dt.DType) -> tuple[dt.DType, ...]:
        """Each input's dtype in the kernel of `dtype`: its fixed dtype, else `dtype`."""
        fixed = dict(self.fixed)
        return tuple(dt.BY_NAME[fixed[i]] if i in fixed else dtype for i in self.inputs)

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

    @property
    def in_dtypes(self) -> tuple[dt.DType, ...]:
        return self.op.in_dtypes(self.dtype)

    def entries(self):
        return self.op.kind_info.entries(self.op, self.dtype)


@dataclass(frozen=True)
class SpecFile:
    path: str       # spec_path(): relative to the repository root (posix) inside it, else absolute
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


def spec_path(path) -> str:
    """How a spec file is named everywhere (errors, generated sources, manifest): relative to the
    repository root in posix form when it lies inside it, else absolute. However a path is
    spelled (./x, x, /abs/x), the same file gets the same name."""
    p = Path(os.path.abspath(os.fspath(path)))
    try:
        p = p.resolve()
    except (OSError, RuntimeError):
        pass
    try:
        return p.relative_to(REPO).as_posix()
    except ValueError:
        return p.as_posix()


def _fail(path, op, fld, msg):
    where = f"{path}"
    if op is not None:
        where += f": op '{op}'" if nm.IDENT.fullmatch(op) else f": {op}"
    if fld is not None:
        where += f": field '{fld}'" if nm.IDENT.fullmatch(fld) else f": field {nm.show(fld)}"
    raise SpecError(f"{where}: {msg}")


def bad_character(text: str) -> str | None:
    """A description of the first character a one-line field may not hold, or None."""
    for i, ch in enumerate(text):
        cat = unicodedata.category(ch)
        if cat == "Cc" or cat in ("Zl", "Zp") or ch in _BIDI:
            what = "a line break" if ch in "\n\r\x0b\x0c\x85\u2028\u2029" else "a control character"
            return f"{what} ({ch!r}) at offset {i}; the field must be one line of printable text"
    return None


def _text(entry, key, path, op, required):
    """A non-empty one-line string field (stripped), or '' when it is absent and optional."""
    if key not in entry:
        if required:
            _fail(path, op, key, "is missing")
        return ""
    v = entry[key]
    if not isinstance(v, str) or not v.strip():
        _fail(path, op, key, f"must be a non-empty string, not {nm.show(v)}")
    bad = bad_character(v)
    if bad:
        _fail(path, op, key, bad)
    return v.strip()


def _name(value, path, op, fld, what):
    why = nm.problem(value, what)
    if why:
        _fail(path, op, fld, why)
    return value


def _expression(text, path, op, fld):
    for i, ch in enumerate(text):       # invisible ones would join identifiers: relu\u200b(x)
        if ch != " " and unicodedata.category(ch) in ("Zs", "Cf"):
            _fail(path, op, fld, f"holds the invisible character U+{ord(ch):04X} at offset {i}; write spaces as ' '")
    try:
        return ex.check(text)
    except ex.ExprError as e:
        _fail(path, op, fld, f"{nm.show(text)} is not one C++ expression: {e}")


def _dtypes(value, path, op):
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        _fail(path, op, "dtypes", f"must be a non-empty list of dtype names or groups, not {nm.show(value)}")
    out: list[dt.DType] = []
    for v in value:
        if not isinstance(v, str):
            _fail(path, op, "dtypes", f"entry {nm.show(v)} is not a dtype name")
        for n in dt.GROUPS.get(v, (v,)):
            if n not in dt.BY_NAME:
                _fail(path, op, "dtypes", f"unknown dtype {nm.show(n)}; known: "
                      f"{', '.join(dt.BY_NAME)}; groups: {', '.join(dt.GROUPS)}")
            if dt.BY_NAME[n] not in out:
                out.append(dt.BY_NAME[n])
    return tuple(out)


def _default(p, name, path, op):
    """A param's default: ints within int64; floats finite or +-inf (NaN is refused: a NaN default
    is almost always a typo, and a caller who means it can pass it)."""
    default = p.get("default")
    if default is None:
        return None
    if isinstance(default, bool) or not isinstance(default, (int, float)) \
            or (p["type"] == "int" and not isinstance(default, int)):
        _fail(path, op, "params", f"param {name!r}: default {nm.show(default)} is not a {p['type']}")
    if p["type"] == "int":
        if not INT64[0] <= default <= INT64[1]:
            _fail(path, op, "params", f"param {name!r}: default {nm.show(default)} is outside int64")
        return int(default)
    try:
        value = float(default)
    except OverflowError:
        _fail(path, op, "params", f"param {name!r}: default {nm.show(default)} is too large for a double")
    if math.isnan(value):
        _fail(path, op, "params", f"param {name!r}: default is NaN; a float default must be a number or +-inf")
    return value


def _params(value, path, op, taken):
    if not isinstance(value, list):
        _fail(path, op, "params", f"must be a list of tables {{name, type, default}}, not {nm.show(value)}")
    params = []
    for p in value:
        if not isinstance(p, dict):
            _fail(path, op, "params", f"entry {nm.show(p)} is not a table")
        unknown = set(p) - {"name", "type", "default"}
        if unknown:
            _fail(path, op, "params", f"unknown key(s) {nm.show(sorted(unknown))}; allowed: name, type, default")
        if "name" not in p or "type" not in p:
            _fail(path, op, "params", f"entry {nm.show(p)} needs 'name' and 'type'")
        name = _name(p["name"], path, op, "params", "param name")
        if name in taken:
            _fail(path, op, "params", f"param name {name!r} is already used by an input or param")
        if name in nm.CALL_KEYWORDS or name in nm.REF_NAMES:
            _fail(path, op, "params", f"param name {name!r} is reserved (every op call takes out= and stream=; "
                  f"the reference sees {', '.join(sorted(nm.REF_NAMES))})")
        taken.add(name)
        if not isinstance(p["type"], str) or p["type"] not in ("float", "int"):
            _fail(path, op, "params", f"param {name!r}: type must be 'float' or 'int', not {nm.show(p['type'])}")
        params.append(Param(name, p["type"], _default(p, name, path, op)))
    seen_default = False
    for p in params:
        if p.default is not None:
            seen_default = True
        elif seen_default:
            _fail(path, op, "params", f"param {p.name!r} without a default follows one with a default")
    return tuple(params)


def parse_op(entry, path, index: int = 1) -> Op:
    label = f"[[op]] #{index}"
    if not isinstance(entry, dict):
        _fail(path, label, None, f"must be a table, not {nm.show(entry)}")
    if "name" not in entry:
        _fail(path, label, "name", "is missing")
    name = _name(entry["name"], path, label, "name", "op name")
    if name in ALIASES:
        _fail(path, name, "name", f"formulas read {name}() as {ALIASES[name]}(); choose another")
    kind_name = entry.get("kind", "map")
    if not isinstance(kind_name, str) or kind_name not in KINDS:
        _fail(path, name, "kind", f"unknown kind {nm.show(kind_name)}; known: {', '.join(KINDS)}")
    kind = KINDS[kind_name]
    for fn in kind.functions(name):
        if fn in nm.pyew_names():
            _fail(path, name, "name", f"{fn!r} is a name of the pyew module itself (pyew.{fn}); pick another")
    unknown = set(entry) - kind.allowed - {"name", "kind"}
    if unknown:
        _fail(path, name, sorted(unknown)[0],
              f"unknown key for a '{kind_name}' op; allowed: {', '.join(sorted(kind.allowed | {'name', 'kind'}))}")
    for req in sorted(kind.required):
        if req not in entry:
            _fail(path, name, req, "is missing")

    inputs = entry.get("inputs", list(kind.default_inputs))
    if not isinstance(inputs, list) or not inputs:
        _fail(path, name, "inputs", f"must be a non-empty list of names, not {nm.show(inputs)}")
    inputs = tuple(_name(i, path, name, "inputs", "input name") for i in inputs)
    if len(set(inputs)) != len(inputs):
        _fail(path, name, "inputs", f"duplicate input names in {list(inputs)}")
    for i in inputs:
        if i in nm.CALL_KEYWORDS or i in nm.REF_NAMES:
            _fail(path, name, "inputs", f"input name {i!r} is reserved (out and stream are keywords of every op "
                  f"call; the reference sees {', '.join(sorted(nm.REF_NAMES))})")
    if not (kind.min_inputs <= len(inputs) <= kind.max_inputs):
        _fail(path, name, "inputs", f"a '{kind_name}' op takes {kind.min_inputs}..{kind.max_inputs} inputs, "
              f"got {len(inputs)}")
    dtypes = _dtypes(entry["dtypes"], path, name)
    for d in dtypes:
        if d.name not in kind.dtypes:
            _fail(path, name, "dtypes", f"a '{kind_name}' op supports {', '.join(kind.dtypes)}; not {d.name}")
    params = _params(entry.get("params", []), path, name, set(inputs))
    whole = [d.name for d in dtypes if d.kind != "float"]
    for p in params:
        if p.type == "float" and whole:
            # the entry point takes it in the op's compute type: 0.5 would become 0 for an int op
            _fail(path, name, "params", f"param {p.name!r} is a float, and the op's {', '.join(whole)} kernels "
                  "take params in their own type; make it type = \"int\", or the op's dtypes floats only")
    doc = _text(entry, "doc", path, name, True)
    expr = _text(entry, "expr", path, name, "expr" in kind.required)
    calls: tuple[str, ...] = ()
    if expr:
        toks = _expression(expr, path, name, "expr")
        calls = tuple(sorted({c.name for c in ex.calls(toks) if c.plain}))
    ref = _text(entry, "ref", path, name, "ref" in kind.required)
    if ref:
        try:
            tree = ast.parse(ref, f"{path}:{name}.ref", "eval")
            compile(tree, f"{path}:{name}.ref", "eval")
        except SyntaxError as e:
            _fail(path, name, "ref", f"not a Python expression: {e.msg}")
        except (ValueError, RecursionError, MemoryError) as e:
            _fail(path, name, "ref", f"not a Python expression: {nm.show(str(e) or type(e).__name__)}")
        unknown = _ref_unknown(tree, {*inputs, *(p.name for p in params)})
        if unknown:
            _fail(path, name, "ref", f"uses {', '.join(map(repr, unknown))}, which is neither an input, a param, "
                  f"nor a name the reference sees ({', '.join(sorted(nm.REF_NAMES))}, Python's builtins)")
    out = entry.get("out")
    if out is not None and (not isinstance(out, str) or out not in kind.dtypes):
        _fail(path, name, "out", f"a '{kind_name}' op's output is one of {', '.join(kind.dtypes)}; not {nm.show(out)}")
    pair = entry.get("pair", {})
    if not isinstance(pair, dict):
        _fail(path, name, "pair", f"must be a table {{dtype = \"paired expression\"}}, not {nm.show(pair)}")
    pairs = []
    for k, v in pair.items():
        if k not in dt.BY_NAME or dt.BY_NAME[k] not in dtypes:
            _fail(path, name, "pair", f"dtype {nm.show(k)} is not one of this op's dtypes")
        if dt.BY_NAME[k].pair is None:
            _fail(path, name, "pair", f"dtype {k!r} has no paired type")
        if out is not None and dt.BY_NAME[out].pair is None:
            _fail(path, name, "pair", f"output dtype {out!r} has no paired type")
        if not isinstance(v, str) or not v.strip():
            _fail(path, name, "pair", f"the {k} expression must be a non-empty string, not {nm.show(v)}")
        bad = bad_character(v)
        if bad:
            _fail(path, name, "pair", f"the {k} expression has {bad}")
        _expression(v.strip(), path, name, "pair")
        pairs.append((k, v.strip()))
    rtol = entry.get("rtol")
    if rtol is not None and (isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 < rtol < 1):
        _fail(path, name, "rtol", f"must be a number in (0, 1), got {nm.show(rtol)}")
    ulp = entry.get("ulp")
    if ulp is not None and (isinstance(ulp, bool) or not isinstance(ulp, int) or not 0 <= ulp <= MAX_ULP):
        _fail(path, name, "ulp", f"must be a whole number of ulp in 0..{MAX_ULP}, got {nm.show(ulp)}")
    tuning = entry.get("tuning")
    if tuning is not None and (not isinstance(tuning, str) or tuning not in TUNINGS):
        _fail(path, name, "tuning", f"must be one of {', '.join(map(repr, TUNINGS))}, got {nm.show(tuning)}")
    launch = entry.get("launch", "tuned")
    if not isinstance(launch, str) or launch not in LAUNCHES:
        _fail(path, name, "launch", f"must be one of {', '.join(map(repr, LAUNCHES))}, got {nm.show(launch)}")
    ufunc = _ufunc(entry.get("ufunc"), path, name, len(inputs))
    if kind_name == "map" and ufunc is None:
        _numpy_arity(name, name, len(inputs), path, name, "name")
    fixed = _fixed(entry.get("fixed"), inputs, kind, path, name)
    if fixed and pairs:
        _fail(path, name, "pair", "an op with fixed input dtypes has no paired form (its inputs are of "
              "different types); leave 'pair' out")
    op = Op(name=name, kind=kind_name, inputs=inputs, dtypes=dtypes, doc=doc, source=str(path),
            expr=expr, ref=ref, params=params, pair=tuple(sorted(pairs)), out=out, calls=calls,
            rtol=None if rtol is None else float(rtol), tuning=tuning, ufunc=ufunc, fixed=fixed, ulp=ulp,
            launch=launch)
    _check_entry_args(op, path)
    return op


def _ref_unknown(tree: ast.Expression, own: set) -> list[str]:
    """The names a parsed `ref` reads that nothing defines: not the op's inputs or params, not the
    names the reference is evaluated with, not Python's builtins, not bound inside it (a lambda's
    arguments, a comprehension's targets)."""
    bound = set(own) | set(nm.REF_NAMES) | set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound)


def _numpy_arity(ufunc: str, shown: str, inputs: int, path, op, fld) -> None:
    """numpy hands its ufunc `ufunc` on DeviceArrays to the op that has its name (or declares it):
    only an elementwise ufunc of one output and the op's input count may be that op."""
    u = getattr(np, ufunc, None)
    if not isinstance(u, np.ufunc) or u.__name__ != ufunc:
        return
    if u.signature is not None:
        _fail(path, op, fld, f"np.{shown} is numpy's generalized ufunc {ufunc}{u.signature}, not elementwise; "
              "an op implementing it would compute something else on DeviceArrays: pick another name")
    if u.nout != 1 or u.nin != inputs:
        _fail(path, op, fld, f"np.{shown} takes {u.nin} input(s) and gives {u.nout} output(s), and this op takes "
              f"{inputs} input(s) and gives one; numpy would hand np.{shown} on DeviceArrays to it: pick another "
              "name")


def _ufunc(value, path, op, inputs: int):
    """The `ufunc` field: the __name__ of a numpy ufunc (what numpy hands __array_ufunc__)."""
    if value is None:
        return None
    if not isinstance(value, str) or not nm.IDENT.fullmatch(value):
        _fail(path, op, "ufunc", f"must be the name of a numpy ufunc, not {nm.show(value)}")
    u = getattr(np, value, None)
    if not isinstance(u, np.ufunc):
        _fail(path, op, "ufunc", f"numpy has no ufunc {value!r} (np.{value} is "
              f"{'missing' if u is None else 'not a ufunc'}); name the ufunc the op implements, e.g. \"subtract\"")
    if u.__name__ != value:
        _fail(path, op, "ufunc", f"np.{value} is the ufunc {u.__name__!r}: write ufunc = \"{u.__name__}\" "
              "(the name numpy passes to __array_ufunc__)")
    _numpy_arity(value, value, inputs, path, op, "ufunc")
    return value


def _fixed(value, inputs, kind: Kind, path, op):
    """The `fixed` field: {input = "dtype"} for inputs whose dtype does not follow the op's (where's
    condition is bool whatever x and y are); as sorted (input, dtype name) pairs."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        _fail(path, op, "fixed", f"must be a table {{input = \"dtype\"}}, not {nm.show(value)}")
    out = []
    for k, v in value.items():
        if k not in inputs:
            _fail(path, op, "fixed", f"{nm.show(k)} is not one of the op's inputs ({', '.join(inputs)})")
        if not isinstance(v, str) or v not in kind.dtypes:
            _fail(path, op, "fixed", f"input {k!r}: {nm.show(v)} is not a dtype a '{kind.name}' op takes; "
                  f"known: {', '.join(kind.dtypes)}")
        out.append((k, v))
    if len(out) == len(inputs):
        _fail(path, op, "fixed", "fixes the dtype of every input; at least one input must follow the op's "
              "dtype (it decides which kernel runs)")
    return tuple(sorted(out))


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
    except RecursionError:
        raise SpecError(f"{path}: not valid TOML: nested too deeply") from None
    unknown = set(data) - {"op"}
    if unknown:
        _fail(path, None, sorted(unknown)[0], "unknown top-level key; a spec holds only [[op]] tables")
    ops = data.get("op", [])
    if not isinstance(ops, list):
        _fail(path, None, "op", "must be an array of tables ([[op]])")
    return [parse_op(e, path, i + 1) for i, e in enumerate(ops)]


def decode(raw: bytes, path: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise SpecError(f"{path}: not UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start} (line {line}) "
                        "cannot be decoded; save the file as UTF-8") from None


def load(paths) -> Spec:
    """Parse every spec file; ops from all files form one spec."""
    ops: list[Op] = []
    files: list[SpecFile] = []
    where: dict[str, str] = {}
    folded: dict[str, str] = {}
    for p in paths:
        shown = spec_path(p)
        bad = bad_character(shown)
        if bad:
            raise SpecError(f"{nm.show(shown)}: the spec file's path has {bad}")
        if any(f.path == shown for f in files):
            raise SpecError(f"{shown}: the spec file is given twice")
        try:
            raw = Path(p).read_bytes()
        except OSError as e:
            raise SpecError(f"{shown}: cannot read spec file: {e.strerror or e}") from None
        files.append(SpecFile(shown, hashlib.sha256(raw).hexdigest()))
        for op in parse_text(decode(raw, shown), shown):
            if op.name in where:
                _fail(shown, op.name, "name", f"duplicate op name; first defined in {where[op.name]}")
            if op.name.lower() in folded:
                _fail(shown, op.name, "name", f"differs from op '{folded[op.name.lower()]}' only in case; "
                      "generated file names must differ on case-insensitive file systems")
            where[op.name] = shown
            folded[op.name.lower()] = op.name
            ops.append(op)
    if not ops:
        raise SpecError(f"{', '.join(spec_path(p) for p in paths) or '(no files)'}: no ops defined")
    _check_calls(ops)
    _check_names(ops)
    _check_ufuncs(ops)
    return Spec(tuple(ops), tuple(files))


def _check_ufuncs(ops):
    """Each numpy ufunc maps to one op (the op whose `ufunc` names it, else the op of that name), so
    no two ops may name the same ufunc, nor may an op name another op's name."""
    by_name = {o.name: o for o in ops}
    claimed: dict[str, Op] = {}
    for o in ops:
        if o.ufunc is None:
            continue
        first = claimed.get(o.ufunc)
        if first is not None:
            _fail(o.source, o.name, "ufunc", f"np.{o.ufunc} is already implemented by op '{first.name}' "
                  f"({first.source}); each ufunc maps to one op")
        other = by_name.get(o.ufunc)
        if other is not None and other is not o:
            _fail(o.source, o.name, "ufunc", f"{o.ufunc!r} is also the name of op '{other.name}' ({other.source}): "
                  "np." + o.ufunc + " would map to two ops; drop the field or rename one op")
        claimed[o.ufunc] = o


def _check_calls(ops):
    """An expression may call other map ops by name: f(inputs..., params...), every param passed
    (C++ has no defaults there). Refuse calls of other kinds, wrong argument counts, inputs or
    params that hide a called op, op calls in pair expressions, and cycles."""
    by_name = {o.name: o for o in ops}
    for o in ops:
        if o.expr:
            for c in ex.calls(ex.check(o.expr)):
                if not c.plain or c.name not in by_name:
                    continue
                callee = by_name[c.name]
                if callee is o:
                    _fail(o.source, o.name, "expr", "an op's expression cannot call itself")
                if callee.kind != "map":
                    _fail(o.source, o.name, "expr", f"calls {c.name}, a '{callee.kind}' op; expressions can "
                          "call map ops only")
                want = [*callee.inputs, *(p.name for p in callee.params)]
                if len(want) not in c.nargs:
                    got = min(c.nargs, key=lambda n: abs(n - len(want)))
                    _fail(o.source, o.name, "expr", f"calls {c.name} with {got} argument(s); {c.name}"
                          f"({', '.join(want)}) takes {len(want)}"
                          + (" (inside an expression its params have no defaults)" if callee.params else ""))
                lacking = [d.name for d in o.dtypes if d not in callee.dtypes]
                if lacking:
                    _fail(o.source, o.name, "expr", f"calls {c.name}, which has no {', '.join(lacking)} form "
                          f"({c.name}'s dtypes: {', '.join(d.name for d in callee.dtypes)}); give this op only "
                          f"dtypes {c.name} has")
                for fld, names in (("inputs", o.inputs), ("params", [p.name for p in o.params])):
                    if c.name in names:
                        _fail(o.source, o.name, fld, f"{c.name!r} is also the op the expression calls "
                              f"({c.name}(...)); rename the {fld[:-1]}")
        for dtype_name, text in o.pair:
            for c in ex.calls(ex.check(text)):
                if c.plain and c.name in by_name:
                    _fail(o.source, o.name, "pair", f"the {dtype_name} expression calls op {c.name}; ops are "
                          "not callable in a pair expression (it works on paired types)")
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
        state[o.name] = 2

    for o in ops:
        visit(o, [])


def _check_names(ops):
    """Entry-point symbols are unique across all spec files (a map op relu_strided would export
    ew_relu_strided_f32, which op relu's strided entry already is), and so are pyew's function names
    (upsample_nearest2d also binds upsample_nearest2d_backward)."""
    seen: dict[str, tuple] = {f.symbol: (None, None, "the runtime") for f in abi.RUNTIME}
    for o in ops:
        for k in o.kernels():
            for e in k.entries():
                if e.symbol in seen:
                    first, dtype, role = seen[e.symbol]
                    owner = ("a runtime function of the library" if first is None else
                             f"the {dtype} {role} entry point of op '{first.name}' ({first.source})")
                    _fail(o.source, o.name, "name", f"its {k.dtype.name} {e.role} entry point {e.symbol} is "
                          f"also {owner}; pick another name")
                seen[e.symbol] = (o, k.dtype.name, e.role)
    functions: dict[str, Op] = {}
    for o in ops:
        for fn in o.kind_info.functions(o.name):
            if fn in functions and functions[fn] is not o:
                first = functions[fn]
                _fail(o.source, o.name, "name", f"pyew.{fn} is already a function of op '{first.name}' "
                      f"({first.source}); pick another name")
            functions[fn] = o


# Launch shapes of the map kernel (ew::MemoryBoundTuning / ew::ComputeBoundTuning in
# libew/elementwise.cuh), chosen per op; benchmarks/RESULTS.md has the sweep behind them.
TUNINGS = ("memory", "compute")
# The kernels behind a map op's entries: "tuned", launch_map and launch_map_strided
# (libew/elementwise.cuh, broadcast.cuh), with a kernel per view offset for one-input ops and 32-
# and 64-bit indices; "basic", libew/map_basic.cuh's, about half as many (libew/ops.toml's header).
LAUNCHES = ("tuned", "basic")
MAX_ULP = 1 << 20
# Calls that cost a few instructions at most: they leave an op "memory".
CHEAP_CALLS = frozenset({
    "C", "static_cast", "min", "max", "fmin", "fmax", "fminf", "fmaxf", "fabs", "fabsf", "abs",
    "copysign", "copysignf", "floor", "ceil", "trunc", "rint", "ew::wrap_add", "ew::wrap_sub", "ew::wrap_mul",
    # libew/ew_numpy.cuh's selects, bit tests and single instructions
    "ew::np::negative", "ew::np::absolute", "ew::np::sign", "ew::np::floor",
    "ew::np::ceil", "ew::np::trunc", "ew::np::invert", "ew::np::is_nan", "ew::np::is_inf", "ew::np::is_finite",
    "ew::np::sign_bit", "ew::np::maximum", "ew::np::minimum", "ew::np::fmax", "ew::np::fmin", "ew::np::clip"})


@functools.lru_cache(maxsize=4096)
def _all_calls(text: str) -> tuple[tuple[str, bool], ...]:
    return tuple((c.name, c.plain) for c in ex.calls(ex.check(text)))


def op_tuning(op: Op, spec: Spec) -> str:
    """The spec's `tuning`, else "compute" for a one-input op with an output dtype of its own (a
    cast, a bool test) or an expression that calls a function (a math function, an ew:: helper, or
    an op that is itself "compute" by its spec or its expression), else "memory". Casts like C(0),
    min/max/abs, the ew::wrap_* integer helpers and calls of "memory" ops (relu(x + y)) keep an op
    "memory"."""
    if op.tuning is None and len(op.inputs) == 1 and op.out is not None:
        # a cast or a bool test: where the result is narrower than the input, a thread's store from
        # one pack is narrow, and two packs a thread keep more bytes in flight (docs/tuning.md); an
        # op or a formula calling it stores its own result (call_tuning)
        return "compute"
    return call_tuning(op, spec)


def call_tuning(op: Op, spec: Spec) -> str:
    """What calling this op makes of its caller's shape (an op's, a fused formula's): the spec's
    `tuning`, else what its expression calls."""
    if op.tuning is not None:
        return op.tuning
    names = {o.name for o in spec.ops}
    for c, plain in _all_calls(op.expr) if op.expr else ():
        if c in CHEAP_CALLS:
            continue
        if plain and c in names:       # an op (::exp(x) is CUDA's exp, also inside an op named exp)
            if c != op.name and call_tuning(spec.op(c), spec) == "compute":
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
