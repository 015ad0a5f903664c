"""Spec parsing: the model, and an error naming file, op and field for every kind of mistake."""
from __future__ import annotations

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
    with pytest.raises(Exception):
        op.name = "other"


def test_tuning_guess_and_override():
    """An expression that calls a function is "compute", one of plain arithmetic, C(...) casts and
    calls of "memory" ops is "memory"; the spec's `tuning` wins over the guess."""
    from generator.spec import op_tuning
    spec = load(["libew/ops.toml"])
    got = {o.name: op_tuning(o, spec) for o in spec.ops if o.kind == "map"}
    assert got["relu"] == got["add"] == got["add_relu"] == got["to_float16"] == "memory"
    assert got["gelu"] == got["sigmoid"] == got["elu"] == "compute"
    text = GOOD + '\n[[op]]\nname = "g"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "twice(ew::sigmoid<R>(x))"\n' \
        'ref = "x"\ndoc = "g."\n'
    twice, g = one(text)
    from generator.spec import Spec
    s2 = Spec((twice, g), ())
    assert op_tuning(twice, s2) == "memory" and op_tuning(g, s2) == "compute"
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
    (GOOD.replace('"int32"', '"int8"'), r"op 'twice': field 'dtypes': unknown dtype 'int8'"),
    (GOOD.replace('expr = "x + x"\n', ''), r"op 'twice': field 'expr': is missing"),
    (GOOD.replace('doc = "2x."\n', ''), r"op 'twice': field 'doc': is missing"),
    (GOOD.replace('ref = "x + x"', 'ref = "x +"'), r"field 'ref': not a Python expression"),
    (GOOD.replace('inputs = ["x"]', 'inputs = ["x", "x"]'), r"field 'inputs': duplicate"),
    (GOOD.replace('inputs = ["x"]', 'inputs = []'), r"field 'inputs'"),
    (GOOD + 'params = [{ name = "a", type = "complex" }]\n', r"field 'params': param 'a': type must be"),
    (GOOD + 'params = [{ name = "a", type = "int", default = 1.5 }]\n', r"default 1.5 is not a int"),
    (GOOD + 'out = "float8"\n', r"field 'out': unknown dtype"),
    (GOOD + 'pair = { int32 = "x" }\n', r"field 'pair': dtype 'int32' has no paired type"),
    (GOOD + 'kind = "reduce"\n', r"field 'kind': unknown kind 'reduce'"),
    (GOOD + 'tuning = "fast"\n', r"op 'twice': field 'tuning': must be one of 'memory', 'compute'"),
    (GOOD.replace('name = "twice"', 'name = "asarray"'), r"pyew function name"),
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
    with pytest.raises(SpecError, match=r"b.toml: op 'twice': field 'name': duplicate op name; first defined in .*a.toml"):
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
