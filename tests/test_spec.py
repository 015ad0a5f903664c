"""Spec parsing: the model, and an error naming file, op and field for every kind of mistake."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from generator.spec import SpecError, load, parse_text

ROOT = Path(__file__).resolve().parent.parent

GOOD = '''
[[op]]
name = "twice"
inputs = ["x"]
dtypes = ["float", "int32"]
expr = "x + x"
ref = "x + x"
doc = "2x."
'''


def one(text):
    return parse_text(text, "s.toml")


def test_good_spec_parses_into_frozen_model():
    (op,) = one(GOOD)
    assert op.name == "twice" and op.inputs == ("x",)
    assert [d.name for d in op.dtypes] == ["float32", "float64", "float16", "bfloat16", "int32"]
    assert [k.name for k in op.kernels()][:2] == ["ew_twice_f32", "ew_twice_f64"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.name = "other"


def test_tuning_guess_and_override():
    """An expression that calls a function, or a one-input op with an output dtype of its own, is
    "compute", one of plain arithmetic, C(...) casts and calls of "memory" ops is "memory"; the
    spec's `tuning` wins over the guess."""
    from generator.spec import op_tuning
    spec = load(["libew/ops.toml"])
    got = {o.name: op_tuning(o, spec) for o in spec.ops if o.kind == "map"}
    assert got["relu"] == got["add"] == got["add_relu"] == "memory"
    assert got["gelu"] == got["elu"] == "compute"
    assert got["sigmoid"] == got["hardswish"] == "memory"      # the spec's `tuning` over the guess
    # a one-input op with an output dtype of its own (casts, bool tests), and a division, take two
    # packs a thread; two-input comparisons already have two loads in flight
    assert got["to_float16"] == got["to_bool"] == got["isnan"] == got["reciprocal"] == "compute"
    assert got["less"] == got["equal"] == "memory"
    text = GOOD + '\n[[op]]\nname = "g"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "twice(ew::sigmoid<R>(x))"\n' \
        'ref = "x"\ndoc = "g."\n'
    twice, g = one(text)
    from generator.spec import Spec
    s2 = Spec((twice, g), ())
    assert op_tuning(twice, s2) == "memory" and op_tuning(g, s2) == "compute"
    caller = one(GOOD.replace('expr = "x + x"', 'expr = "isnan(x) ? C(0) : x"'))[0]
    with_isnan = Spec((caller, spec.op("isnan")), ())
    assert op_tuning(caller, with_isnan) == "memory"      # an op calling a bool test: its expression decides
    from generator.spec import call_tuning
    assert call_tuning(spec.op("isnan"), spec) == call_tuning(spec.op("to_float16"), spec) == "memory"
    assert call_tuning(spec.op("gelu"), spec) == "compute"
    (forced_cast,) = one(GOOD.replace('expr = "x + x"', 'expr = "x != C(0)"\nout = "bool"') + 'tuning = "compute"\n')
    assert call_tuning(forced_cast, Spec((forced_cast,), ())) == "compute"     # the spec's own `tuning` counts
    (cheap,) = one(GOOD.replace('expr = "x + x"', 'expr = "fmaxf(x, C(0)) + static_cast<C>(1)"'))
    assert op_tuning(cheap, Spec((cheap,), ())) == "memory"
    (forced,) = one(GOOD + 'tuning = "compute"\n')
    assert op_tuning(forced, Spec((forced,), ())) == "compute"


def test_default_spec_loads():
    spec = load(["libew/ops.toml"])
    names = {o.name for o in spec.ops}
    for want in ("relu", "sigmoid", "elu", "gelu", "gelu_tanh", "silu", "hardswish", "hardshrink", "add",
                 "sub", "mul", "div", "scale", "add_relu", "to_float16", "to_float32"):
        assert want in names
    elu = spec.op("elu")
    assert elu.params[0].name == "alpha" and elu.params[0].default == 1.0
    assert spec.op("hardshrink").params[0].default == 0.5
    assert {d.name for d in spec.op("relu").dtypes} >= {"int32", "int64", "float16"}
    assert spec.op("to_float16").pair_expr(spec.op("to_float16").dtypes[0]) == "__float22half2_rn(x)"
    assert spec.op("add_relu").calls == ("relu",)


@pytest.mark.parametrize("text,match", [
    (GOOD.replace('doc = "2x."', 'doc = "2x."\ncolour = "red"'), r"s.toml: op 'twice': field 'colour': unknown key"),
    (GOOD.replace('name = "twice"', 'name = "2x"'), r"field 'name': op name '2x' is not a C identifier"),
    (GOOD.replace('name = "twice"', 'name = "class"'), r"keyword"),
    (GOOD.replace('"int32"', '"uint64"'), r"op 'twice': field 'dtypes': unknown dtype 'uint64'"),
    (GOOD.replace('expr = "x + x"\n', ''), r"op 'twice': field 'expr': is missing"),
    (GOOD.replace('doc = "2x."\n', ''), r"op 'twice': field 'doc': is missing"),
    (GOOD.replace('ref = "x + x"', 'ref = "x +"'), r"field 'ref': not a Python expression"),
    (GOOD.replace('inputs = ["x"]', 'inputs = ["x", "x"]'), r"field 'inputs': duplicate"),
    (GOOD.replace('inputs = ["x"]', 'inputs = []'), r"field 'inputs'"),
    (GOOD + 'params = [{ name = "a", type = "complex" }]\n', r"field 'params': param 'a': type must be"),
    (GOOD + 'params = [{ name = "a", type = "int", default = 1.5 }]\n', r"default 1.5 is not a int"),
    (GOOD + 'out = "float8"\n', r"field 'out': a 'map' op's output is one of .*; not 'float8'"),
    (GOOD + 'out = "uint32"\n', r"field 'out': a 'map' op's output is one of .*; not 'uint32'"),
    (GOOD.replace('expr = "x + x"', 'expr = "x\u00a0+ x"'), r"field 'expr': holds the invisible character U\+00A0"),
    (GOOD + 'pair = { int32 = "x" }\n', r"field 'pair': dtype 'int32' has no paired type"),
    (GOOD + 'kind = "reduce"\n', r"field 'kind': unknown kind 'reduce'"),
    (GOOD + 'tuning = "fast"\n', r"op 'twice': field 'tuning': must be one of 'memory', 'compute'"),
    (GOOD.replace('name = "twice"', 'name = "asarray"'), r"a name of the pyew module itself"),
    ('[[op]]\nname = "a"\n[other]\nx = 1\n', r"field 'other': unknown top-level key"),
    ('[[op]\n', r"not valid TOML"),
])
def test_spec_errors_name_file_op_and_field(text, match):
    with pytest.raises(SpecError, match=match):
        one(text)


def test_duplicate_names_across_files(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(GOOD)
    b.write_text(GOOD)
    with pytest.raises(SpecError,
                       match=r"b.toml: op 'twice': field 'name': duplicate op name; first defined in .*a.toml"):
        load([a, b])


def test_call_cycle_is_refused(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(GOOD.replace('expr = "x + x"', 'expr = "other(x)"') +
                 GOOD.replace("twice", "other").replace('expr = "x + x"', 'expr = "twice(x)"'))
    with pytest.raises(SpecError, match="cycle"):
        load([p])


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec file"):
        load([tmp_path / "nope.toml"])


# ---- names ------------------------------------------------------------------------------------

def _with(**fields):
    """GOOD with fields replaced (TOML source text per field)."""
    lines = {"name": '"twice"', "inputs": '["x"]', "dtypes": '["float", "int32"]', "expr": '"x + x"',
             "ref": '"x + x"', "doc": '"2x."'}
    lines.update(fields)
    return "[[op]]\n" + "".join(f"{k} = {v}\n" for k, v in lines.items() if v is not None)


@pytest.mark.parametrize("name,match", [
    ("asarray", "a name of the pyew module itself"),      # pyew's API
    ("bench", "a name of the pyew module itself"),        # a subpackage
    ("library", "a name of the pyew module itself"),      # a module
    ("annotations", "a name of the pyew module itself"),  # anything in vars(pyew)
    ("_private", "starts with '_'"),
    ("__init__", "starts with '_'"),
    ("ew_thing", "starts with 'ew_'"),
    ("EW_API", "starts with 'ew_'"),
    ("static_cast", "keyword"), ("co_await", "keyword"), ("char8_t", "keyword"), ("requires", "keyword"),
    ("int64_t", "type name"), ("float2", "type name"), ("cudaStream_t", "type name"),
    ("threadIdx", "CUDA built-in"), ("warpSize", "CUDA built-in"),
    ("R", "expression language"), ("ewf", "expression language"),
    ("evil\n", "not a C identifier"), ("a" * 65, "at most 64"),
    ("libew_jit", "starts with 'libew_', which names the library's own objects"),
    ("NULL", "reads as a C macro"), ("M_PI", "reads as a C macro"), ("INT64_MAX", "reads as a C macro"),
    ("abs", r"formulas read abs\(\) as absolute\(\)"), ("round", r"as rint\(\)"),
    ("matmul", "np.matmul is numpy's generalized ufunc matmul"), ("vecdot", "generalized ufunc"),
    ("heaviside", r"np.heaviside takes 2 input\(s\) and gives 1 output\(s\), and this op takes 1"),
    ("modf", r"gives 2 output\(s\)"),
])
def test_reserved_op_names(name, match):
    with pytest.raises(SpecError, match=match):
        one(_with(name=json.dumps(name)))


def test_longest_name_is_accepted():
    b = "b" * 64
    (op,) = one(_with(name=json.dumps("a" * 64), inputs=json.dumps([b]), expr=json.dumps(f"{b} + {b}"),
                      ref=json.dumps(f"{b} + {b}")))
    assert op.name == "a" * 64


def test_pyew_names_come_from_a_fresh_pyew(monkeypatch):
    """Ops bound on pyew (pyew.gelu after a call) are not pyew's own names; its API, modules and
    subpackages are."""
    import pkgutil

    import pyew
    from generator import names
    monkeypatch.setitem(vars(pyew), "gelu", lambda x: x)     # as binding an op on first use does
    names.pyew_names.cache_clear()
    try:
        got = names.pyew_names()
    finally:
        names.pyew_names.cache_clear()
    assert "gelu" not in got
    assert set(pyew.__all__) <= got and "__getattr__" in got
    assert {m.name for m in pkgutil.iter_modules(pyew.__path__)} <= got
    assert not (ROOT / "pyew/names.py").exists()      # no hand-kept list any more


@pytest.mark.parametrize("inputs,params,match", [
    (["R"], None, "expression language"), (["C"], None, "expression language"),
    (["ew"], None, "expression language"), (["int64_t"], None, "type name"),
    (["threadIdx"], None, "CUDA built-in"), (["blockDim"], None, "CUDA built-in"),
    (["static_cast"], None, "keyword"), (["alignas"], None, "keyword"), (["thread_local"], None, "keyword"),
    (["concept"], None, "keyword"), (["static_assert"], None, "keyword"), (["lambda"], None, "keyword"),
    (["ew_f"], None, "starts with 'ew_'"), (["_x"], None, "starts with '_'"),
    (["np"], None, "reserved"), (["out"], None, "reserved"),
    (["x", "n"], None, "clashes with a parameter of the C entry point"),
    (["x"], '[{ name = "stream", type = "float" }]', "reserved"),
    (["x"], '[{ name = "sigmoid", type = "float" }]', "reserved"),
    (["x"], '[{ name = "x", type = "float" }]', "already used"),
    (["x"], '[{ name = "Fn\\n", type = "float" }]', "not a C identifier"),
])
def test_reserved_input_and_param_names(inputs, params, match):
    with pytest.raises(SpecError, match=match):
        one(_with(inputs=json.dumps(inputs), params=params, expr='"x"'))


def test_former_template_identifiers_are_ordinary_names():
    """f, Fn, apply2, i were identifiers of the generated code; it now names its own ew_...."""
    (op,) = one(_with(inputs='["f", "Fn"]', dtypes='["float"]',
                      params='[{ name = "apply2", type = "float", default = 1.0 }, '
                      '{ name = "i", type = "int", default = 2 }]', expr='"f * Fn + apply2 + C(i)"',
                      ref='"f * Fn + apply2 + i"'))
    assert op.inputs == ("f", "Fn") and [p.name for p in op.params] == ["apply2", "i"]


# ---- calls of other ops -----------------------------------------------------------------------

def _load_with_default(tmp_path, text):
    p = tmp_path / "mine.toml"
    p.write_text(text)
    return load([ROOT / "libew/ops.toml", p])


@pytest.mark.parametrize("expr,match", [
    ("elu(x)", r"mine.toml: op 'twice': field 'expr': calls elu with 1 argument\(s\); elu\(x, alpha\) takes 2 "
               r"\(inside an expression its params have no defaults\)"),
    ("gelu(x, x)", r"field 'expr': calls gelu with 2 argument\(s\); gelu\(x\) takes 1"),
    ("add(x)", r"calls add with 1 argument\(s\); add\(x, y\) takes 2"),
    ("scale(x)", r"calls scale with 1 argument"),
    ("relu_mask(x)", r"field 'expr': calls relu_mask, a 'relu_mask' op; expressions can call map ops only"),
    ("dot(x, x)", r"calls dot, a 'dot' op"),
    ("twice(x)", r"cannot call itself"),
    ("gelu()", r"calls gelu with 0 argument"),
])
def test_bad_calls_of_other_ops(tmp_path, expr, match):
    with pytest.raises(SpecError, match=match):
        _load_with_default(tmp_path, _with(expr=json.dumps(expr), dtypes='["float32"]'))


def test_a_call_of_an_op_without_the_callers_dtypes(tmp_path):
    """An int op calling a float-only op fails here, naming the callee, not in nvcc blaming it."""
    with pytest.raises(SpecError, match=r"op 'twice': field 'expr': calls gelu, which has no int32 form"):
        _load_with_default(tmp_path, _with(expr='"gelu(x)"', dtypes='["float32", "int32"]'))


@pytest.mark.parametrize("fields,match", [
    ({"ufunc": '"matmul"', "inputs": '["x", "y"]', "expr": '"x * y"', "ref": '"x * y"'}, "generalized ufunc"),
    ({"ufunc": '"modf"'}, r"gives 2 output\(s\)"),
    ({"ufunc": '"heaviside"'}, r"takes 2 input\(s\)"),
    ({"ref": '"z + 1"'}, r"field 'ref': uses 'z', which is neither an input, a param"),
    ({"params": '[{name = "a", type = "float", default = 0.5}]', "expr": '"x * a"', "ref": '"x * a"'},
     r"field 'params': param 'a' is a float, and the op's int32 kernels"),
    ({"inputs": '["X2"]', "expr": '"X2"', "ref": '"X2"'}, "reads as a C macro"),
])
def test_fields_numpy_or_the_compiler_would_read_otherwise(fields, match):
    with pytest.raises(SpecError, match=match):
        one(_with(**fields))


def test_refs_may_bind_their_own_names():
    (op,) = one(_with(ref=json.dumps("np.vectorize(lambda v: v + v)(x) + sum(i for i in [0])")))
    assert op.ref.startswith("np.vectorize")


@pytest.mark.parametrize("expr", ["elu(x, C(2))", "gelu(ew::div<R>(x, C(2)))", "add(x, gelu(x))",
                                  "ew::gelu_tanh<R>(x)", "scale(relu(x), C(0.5))", "C(',') + relu((x))"])
def test_good_calls_of_other_ops(tmp_path, expr):
    spec = _load_with_default(tmp_path, _with(expr=json.dumps(expr), dtypes='["float32"]'))
    assert spec.op("twice").expr == expr


def test_input_named_like_the_op_it_calls(tmp_path):
    with pytest.raises(SpecError, match=r"op 'twice': field 'inputs': 'gelu' is also the op the expression calls"):
        _load_with_default(tmp_path, _with(inputs='["gelu"]', expr='"gelu(gelu)"', ref='"gelu"', dtypes='["float32"]'))
    # an input may share an op's name when the expression does not call that op
    spec = _load_with_default(tmp_path, _with(inputs='["gelu"]', expr='"gelu * C(2)"', ref='"gelu * 2"',
                                              dtypes='["float32"]'))
    assert spec.op("twice").inputs == ("gelu",)


def test_ops_are_not_callable_in_pair_expressions(tmp_path):
    with pytest.raises(SpecError, match=r"field 'pair': the float16 expression calls op relu"):
        _load_with_default(tmp_path, _with(dtypes='["float16"]', pair='{ float16 = "relu(x)" }'))


# ---- entry-point symbols and pyew functions are unique across spec files ------------------------

@pytest.mark.parametrize("text,match", [
    (_with(name='"relu_strided"', dtypes='["float32"]'),
     r"mine.toml: op 'relu_strided': field 'name': its float32 forward entry point ew_relu_strided_f32 is also the "
     r"float32 strided entry point of op 'relu' \(libew/ops.toml\)"),
    (_with(name='"upsample_nearest2d_backward"', dtypes='["float16"]'),
     r"entry point ew_upsample_nearest2d_backward_f16 is also the float16 backward entry point of op "
     r"'upsample_nearest2d'"),
    (_with(name='"upsample_nearest2d_backward"', dtypes='["int32"]'),
     r"pyew.upsample_nearest2d_backward is already a function of op 'upsample_nearest2d'"),
    (_with(name='"dot_fast"', dtypes='["float32"]'),
     r"ew_dot_fast_f32 is also the float32 fast entry point of op 'dot'"),
    (_with(name='"Relu"'), r"differs from op 'relu' only in case"),
    (_with(name='"relu"'), r"duplicate op name; first defined in libew/ops.toml"),
])
def test_symbol_and_function_clashes_across_files(tmp_path, text, match):
    with pytest.raises(SpecError, match=match):
        _load_with_default(tmp_path, text)


def test_user_upsample_op_next_to_its_backward_name(tmp_path):
    p = tmp_path / "u.toml"
    p.write_text('[[op]]\nname = "up"\nkind = "upsample_nearest2d"\ndtypes = ["float32"]\ndoc = "u"\n'
                 + _with(name='"up_backward"', dtypes='["float32"]'))
    with pytest.raises(SpecError, match=r"u.toml: op 'up_backward': field 'name': its float32 forward entry point "
                                         r"ew_up_backward_f32 is also the float32 backward entry point of op 'up'"):
        load([p])


def test_spec_file_given_twice(tmp_path):
    with pytest.raises(SpecError, match=r"libew/ops.toml: the spec file is given twice"):
        load(["libew/ops.toml", ROOT / "libew/ops.toml"])


# ---- one line, one expression -----------------------------------------------------------------

@pytest.mark.parametrize("field,value,match", [
    ("doc", '"a\\rb"', r"field 'doc': a line break \('\\r'\) at offset 1"),
    ("doc", '"a\\nb"', r"field 'doc': a line break"),
    ("doc", '"a\\tb"', r"field 'doc': a control character \('\\t'\)"),
    ("doc", '"a\\u0000b"', r"field 'doc': a control character \('\\x00'\)"),
    ("doc", '"a\\u007fb"', r"control character \('\\x7f'\)"),
    ("doc", '"a\\u0085b"', r"line break"),
    ("doc", '"a\\u2028b"', r"line break"),
    ("doc", '"a\\u202eb"', r"control character"),
    ("ref", '"x\\n+ x"', r"field 'ref': a line break"),
    ("expr", '"x\\n"', r"field 'expr': a line break"),
    ("expr", '"x; y"', r"field 'expr': 'x; y' is not one C\+\+ expression: ';'"),
    ("expr", '"x { y"', r"is not one C\+\+ expression: '\{'"),
    ("expr", '"x }"', r"'\}'"),
    ("expr", '"x #define y"', r"'#' \(preprocessor\)"),
    ("expr", '"x // c"', r"a '//' comment"),
    ("expr", '"x /* c */"', r"a '/\*' comment"),
    ("expr", '"x */"', r"'\*/'"),
    ("expr", '"(x"', r"an unclosed '\('"),
    ("expr", '"x)"', r"an unmatched '\)'"),
    ("expr", '"x[0)"', r"'\)' at offset 3 closes '\[' of offset 1"),
    ("expr", '"x + \\"a"', r"an unterminated string literal"),
    ("expr", '"x <% y"', r"digraph"),
    ("expr", '"x ??= y"', r"trigraph"),
    ("expr", '"x \\\\ y"', r"backslash"),
    ("expr", '"_Pragma(\\"once\\") x"', r"preprocessor operator _Pragma"),
    ("expr", '"   "', r"field 'expr': must be a non-empty string"),
    ("expr", "42", r"field 'expr': must be a non-empty string, not 42"),
])
def test_one_line_fields_and_one_expression(field, value, match):
    with pytest.raises(SpecError, match=match):
        one(_with(**{field: value}))


@pytest.mark.parametrize("expr", ["x + C(';') * C(0)", 'x + C(sizeof("{;}//#"))', "x + C(1'000) * C(0)",
                                  'x + C(sizeof(R"d(;)d")) * C(0)', "(x < C(0)) ? x : x"])
def test_literals_may_hold_anything(expr):
    (op,) = one(_with(expr=json.dumps(expr)))
    assert op.expr == expr


def test_pair_is_one_expression_too():
    with pytest.raises(SpecError, match=r"field 'pair': '__hadd2\(x, x\); x' is not one C\+\+ expression"):
        one(_with(dtypes='["float16"]', pair='{ float16 = "__hadd2(x, x); x" }'))
    with pytest.raises(SpecError, match=r"field 'pair': the float16 expression has a line break"):
        one(_with(dtypes='["float16"]', pair='{ float16 = "__hadd2(x,\\n x)" }'))


# ---- files ------------------------------------------------------------------------------------

def test_non_utf8_spec(tmp_path):
    p = tmp_path / "latin1.toml"
    p.write_bytes(GOOD.replace("2x.", "2x \xe9").encode("latin-1"))
    with pytest.raises(SpecError) as e:
        load([p])
    assert str(e.value) == (f"{p.resolve().as_posix()}: not UTF-8: byte 0xe9 at offset "
                            f"{GOOD.index('2x.') + 3} (line 8) cannot be decoded; save the file as UTF-8")


def test_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load([p]).ops[0].name == "twice"


def test_spec_path_is_normalised():
    from generator.spec import spec_path
    assert spec_path("libew/ops.toml") == spec_path("./libew/ops.toml") == spec_path(ROOT / "libew/ops.toml") \
        == "libew/ops.toml"
    assert spec_path("/tmp/../tmp/x.toml") == "/tmp/x.toml"


# ---- param defaults ---------------------------------------------------------------------------

@pytest.mark.parametrize("param,match", [
    ('{ name = "k", type = "int", default = 9223372036854775808 }',
     r"param 'k': default 9223372036854775808 is outside int64"),
    ('{ name = "k", type = "int", default = -9223372036854775809 }', r"outside int64"),
    ('{ name = "a", type = "float", default = nan }', r"param 'a': default is NaN"),
    ('{ name = "a", type = "float", default = 1' + "0" * 400 + ' }', r"too large for a double"),
    ('{ name = "a", type = "float", default = true }', r"default True is not a float"),
    ('{ name = "a", type = "float", default = "1" }', r"default '1' is not a float"),
    ('{ name = "a", type = ["float"] }', r"type must be 'float' or 'int', not \['float'\]"),
])
def test_param_defaults_are_range_checked(param, match):
    with pytest.raises(SpecError, match=match):
        one(_with(params=f"[{param}]"))


@pytest.mark.parametrize("param,value", [
    ('{ name = "k", type = "int", default = 9223372036854775807 }', 2**63 - 1),
    ('{ name = "k", type = "int", default = -9223372036854775808 }', -2**63),
    ('{ name = "a", type = "float", default = inf }', float("inf")),
    ('{ name = "a", type = "float", default = -inf }', float("-inf")),
    ('{ name = "a", type = "float", default = 3 }', 3.0),
])
def test_param_defaults_at_the_limits(param, value):
    (op,) = one(_with(params=f"[{param}]", dtypes='["float"]'))
    assert op.params[0].default == value and type(op.params[0].default) is type(value)


# ---- odd values where a name or a table belongs -------------------------------------------------

@pytest.mark.parametrize("fields,match", [
    (dict(kind="[]"), r"field 'kind': unknown kind \[\]"),
    (dict(out="{}"), r"field 'out': a 'map' op's output is one of .*; not \{\}"),
    (dict(dtypes="[[1]]"), r"field 'dtypes': entry \[1\] is not a dtype name"),
    (dict(tuning="[]"), r"field 'tuning': must be one of"),
    (dict(name="1979-05-27"),
     r"\[\[op\]\] #1: field 'name': op name datetime.date\(1979, 5, 27\) is not a C identifier"),
    (dict(params='"alpha"'), r"field 'params': must be a list of tables"),
    (dict(pair="1"), r"field 'pair': must be a table"),
    (dict(ref='"x" \n"bad key\\n" = 1'), r"field 'bad key\\n': unknown key"),
    (dict(name=None), r"\[\[op\]\] #1: field 'name': is missing"),
])
def test_odd_values(fields, match):
    with pytest.raises(SpecError, match=match):
        one(_with(**fields))


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(SpecError, match="not valid TOML"):
        one("x = " + "[" * 5000 + "]" * 5000 + "\n")


def test_int_arithmetic_of_the_default_spec_wraps():
    """add, sub and mul compute int32/int64 in the unsigned type (numpy's wrap-around, no signed
    overflow), through helpers that keep them "memory" ops."""
    from generator.spec import op_tuning
    spec = load(["libew/ops.toml"])
    for name in ("add", "sub", "mul"):
        assert spec.op(name).expr == f"ew::wrap_{name}(x, y)"
        assert op_tuning(spec.op(name), spec) == "memory"
    cuh = (ROOT / "libew/ew_math.cuh").read_text()
    for name in ("wrap_add", "wrap_sub", "wrap_mul"):
        assert f"__device__ __forceinline__ T {name}(T a, T b)" in cuh


# ---- the numpy vocabulary's fields: ufunc, fixed, ulp, launch ---------------------------------------

def test_vocabulary_fields_parse():
    (op,) = one(_with(name='"pick"', inputs='["cond", "x", "y"]', dtypes='["float", "int", "bool"]',
                      expr='"cond ? x : y"', ref='"np.where(cond, x, y)"') + 'fixed = { cond = "bool" }\n'
                + 'ulp = 0\nlaunch = "basic"\n')
    assert op.fixed == (("cond", "bool"),) and op.ulp == 0 and op.launch == "basic"
    (cps,) = one(_with(name='"cps"', inputs='["x", "y"]', dtypes='["float"]', expr='"x"', ref='"np.copysign(x, y)"',
                       ufunc='"copysign"'))
    assert cps.ufunc == "copysign"
    f32 = next(k for k in op.kernels() if k.dtype.name == "float32")
    assert [d.name for d in f32.in_dtypes] == ["bool", "float32", "float32"]
    (plain,) = one(GOOD)
    assert plain.fixed == () and plain.ufunc is None and plain.ulp is None and plain.launch == "tuned"
    assert [d.name for d in plain.kernels()[0].in_dtypes] == ["float32"]


@pytest.mark.parametrize("fields,match", [
    (dict(ufunc='"subtrct"'), r"op 'twice': field 'ufunc': numpy has no ufunc 'subtrct' \(np.subtrct is missing\)"),
    (dict(ufunc='"where"'), r"field 'ufunc': numpy has no ufunc 'where' \(np.where is not a ufunc\)"),
    (dict(ufunc='"true_divide"'), r"field 'ufunc': np.true_divide is the ufunc 'divide': write ufunc = \"divide\""),
    (dict(ufunc="3"), r"field 'ufunc': must be the name of a numpy ufunc, not 3"),
    (dict(ufunc='"np.add"'), r"field 'ufunc': must be the name of a numpy ufunc, not 'np.add'"),
    (dict(fixed='"bool"'), r"field 'fixed': must be a table \{input = \"dtype\"\}, not 'bool'"),
    (dict(fixed="{}"), r"field 'fixed': must be a table"),
    (dict(fixed='{ y = "bool" }'), r"field 'fixed': 'y' is not one of the op's inputs \(x\)"),
    (dict(fixed='{ x = "uint32" }'), r"field 'fixed': input 'x': 'uint32' is not a dtype a 'map' op takes"),
    (dict(fixed='{ x = "bool" }'), r"field 'fixed': fixes the dtype of every input; at least one input must"),
    (dict(inputs='["c", "x"]', fixed='{ c = "bool" }', dtypes='["float16"]', pair='{ float16 = "x" }'),
     r"field 'pair': an op with fixed input dtypes has no paired form"),
    (dict(ulp="-1"), r"field 'ulp': must be a whole number of ulp in 0\.\.1048576, got -1"),
    (dict(ulp="1.5"), r"field 'ulp': must be a whole number of ulp"),
    (dict(ulp="true"), r"field 'ulp': must be a whole number of ulp"),
    (dict(launch='"fast"'), r"field 'launch': must be one of 'tuned', 'basic', got 'fast'"),
    (dict(out='"bool"', dtypes='["uint32"]'), r"field 'dtypes': a 'map' op supports .*; not uint32"),
])
def test_vocabulary_field_errors(fields, match):
    with pytest.raises(SpecError, match=match):
        one(_with(**fields))


@pytest.mark.parametrize("text,match", [
    (_with(name='"minus"', ufunc='"subtract"', inputs='["x", "y"]', expr='"x - y"', ref='"x - y"'),
     r"mine.toml: op 'minus': field 'ufunc': np.subtract is already implemented by op 'sub' \(libew/ops.toml\)"),
    (_with(name='"plus"', ufunc='"maximum"', inputs='["x", "y"]', expr='"x + y"', ref='"x + y"'),
     r"mine.toml: op 'plus': field 'ufunc': 'maximum' is also the name of op 'maximum' \(libew/ops.toml\)"),
])
def test_each_ufunc_maps_to_one_op(tmp_path, text, match):
    with pytest.raises(SpecError, match=match):
        _load_with_default(tmp_path, text)


def test_default_vocabulary_is_numpys():
    """Every op named after a numpy ufunc has numpy's name; the ops named otherwise say which ufunc
    they are; comparisons and the is* tests return bool; where's condition is bool."""
    import numpy as np
    spec = load(["libew/ops.toml"])
    ufuncs = {o.ufunc or o.name: o for o in spec.ops if o.kind == "map"
              if isinstance(getattr(np, o.ufunc or o.name, None), np.ufunc)}
    for name in ("add", "subtract", "multiply", "divide", "negative", "sqrt", "arctan2", "floor_divide",
                 "greater", "logical_xor", "bitwise_and", "invert", "logaddexp", "isfinite", "signbit"):
        assert name in ufuncs, name
    assert spec.op("sub").ufunc == "subtract" and spec.op("div").ufunc == "divide"
    for name in ("greater", "equal", "isnan", "isinf", "isfinite", "signbit", "logical_not", "logical_and",
                 "to_bool"):
        assert spec.op(name).out == "bool", name
    where = spec.op("where")
    assert where.fixed == (("condition", "bool"),) and where.inputs == ("condition", "x", "y")
    assert {d.name for d in spec.op("where").dtypes} == {"float32", "float64", "float16", "bfloat16", "int32",
                                                          "int64", "bool"}
    # numpy has integer and bool loops for these and none for the math functions
    assert "bool" in {d.name for d in spec.op("bitwise_xor").dtypes}
    assert not {d.name for d in spec.op("sqrt").dtypes} & {"int32", "int64", "bool"}
    # every op of the vocabulary states its float32 accuracy, or uses the default rtol on purpose
    for o in spec.ops:
        if o.launch == "basic" and o.out is None and any(d.kind == "float" for d in o.dtypes):
            assert o.ulp is not None or o.name == "floor_divide", o.name


def test_an_unqualified_call_of_an_op_name_is_the_op(tmp_path):
    """With the vocabulary in the spec, exp(x) in an expression is the op exp (numpy's), ::exp(x) is
    CUDA's; either way the op's tuning guess sees a function call."""
    from generator.spec import direct_calls, op_tuning
    spec = _load_with_default(tmp_path, _with(dtypes='["float32"]', expr='"exp(x) + ::exp(x)"'))
    mine = spec.op("twice")
    assert [o.name for o in direct_calls(mine, spec)] == ["exp"]
    assert op_tuning(mine, spec) == op_tuning(spec.op("exp"), spec) == "compute"
    assert "fmax" not in spec.op("silu").calls      # silu calls CUDA's fmax (::fmax), not the op fmax
