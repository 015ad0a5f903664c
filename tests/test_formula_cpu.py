"""Formulas on the CPU: parsing against the allow-list, the errors users see, tracing with
pyew.fuse's stand-ins. Nothing here compiles or runs a kernel."""
import numpy as np
import pytest

from pyew import formula
from pyew.formula import Call, Const, FormulaError, Var

FUNCS = frozenset({"add", "subtract", "multiply", "divide", "power", "negative", "exp", "log", "where", "greater",
                   "less", "logical_and", "bitwise_and", "invert", "sqrt", "reciprocal", "absolute", "elu",
                   "gelu", "floor_divide", "remainder", "equal", "logical_not", "expm1", "arctan2"})


def parse(expr):
    return formula.parse(expr, FUNCS)


def test_arithmetic_and_precedence():
    assert parse("x * w + b") == Call("add", (Call("multiply", (Var("x"), Var("w"))), Var("b")))
    assert parse("-x // 2 % y") == Call("remainder", (Call("floor_divide", (Call("negative", (Var("x"),)),
                                                                             Const(2))), Var("y")))
    assert parse("-3.5") == Const(-3.5)


def test_constant_powers_expand_as_numexpr_does():
    assert parse("x ** 2") == Call("multiply", (Var("x"), Var("x")))
    assert parse("x ** 3") == Call("multiply", (Call("multiply", (Var("x"), Var("x"))), Var("x")))
    assert parse("x ** -1") == Call("reciprocal", (Var("x"),))
    assert parse("x ** 0.5") == Call("sqrt", (Var("x"),))
    assert parse("x ** 2.5") == Call("power", (Var("x"), Const(2.5)))
    with pytest.raises(FormulaError, match="non-constant exponent"):
        parse("x ** y")


def test_comparisons_chain_and_logic():
    assert parse("0 < x < 1") == Call("logical_and", (Call("less", (Const(0), Var("x"))),
                                                      Call("less", (Var("x"), Const(1)))))
    assert parse("(x > 0) & ~m") == Call("bitwise_and", (Call("greater", (Var("x"), Const(0))),
                                                        Call("invert", (Var("m"),))))


def test_calls_aliases_and_params():
    assert parse("abs(x)") == Call("absolute", (Var("x"),))
    assert parse("where(x > 0, x, a * expm1(x))").op == "where"
    assert parse("elu(x, alpha=0.5)") == Call("elu", (Var("x"),), (("alpha", 0.5),))
    assert parse("x + inf") == Call("add", (Var("x"), Const(float("inf"))))
    assert formula.variables(parse("where(x > 0, x, a * expm1(x))")) == ["x", "a"]


def test_syntax_error_points_at_the_column():
    with pytest.raises(FormulaError) as e:
        parse("x * (w + ")
    assert "column" in str(e.value) and "^" in str(e.value)


def test_unknown_function_lists_close_names():
    with pytest.raises(FormulaError, match="did you mean exp"):
        parse("epx(x)")
    with pytest.raises(FormulaError, match="unknown function 'nothing_like_it'"):
        parse("nothing_like_it(x)")


@pytest.mark.parametrize("expr, what", [
    ("x.real", "attribute"), ("x[0]", "subscript"), ("(lambda: 1)()", "calling anything but an op"),
    ("__import__('os')", "name"), ("x if y else z", "conditional"), ("[x]", "list"), ("exp(*x)", "args"),
    ("'s'", "constant"), ("elu(x, alpha=y)", "non-constant value"), ("(y := x)", "assignment"),
    ("exp.__class__", "attribute"), ("x @ y", "BinOp"),
])
def test_outside_the_allow_list_is_refused(expr, what):
    with pytest.raises(FormulaError, match=what):
        parse(expr)


def test_formula_must_be_text():
    with pytest.raises(TypeError):
        formula.parse(42, FUNCS)


def test_tracing_builds_the_same_tree():
    import pyew.ufuncs  # noqa: F401  (hands DeviceArray's operators to the tracer)
    x, w = formula.Traced(Var("x")), formula.Traced(Var("w"))
    r = 2 * x * w + 1.0
    assert r.node == Call("add", (Call("multiply", (Call("multiply", (Const(2), Var("x"))), Var("w"))), Const(1.0)))
    assert (x ** 2).node == Call("multiply", (Var("x"), Var("x")))
    assert (-x).node == Call("negative", (Var("x"),))
    assert np.exp(x).node == Call("exp", (Var("x"),))
    assert (x > w).node == Call("greater", (Var("x"), Var("w")))
    assert formula.traced_call("elu", (x,), {"alpha": 0.5}).node == Call("elu", (Var("x"),), (("alpha", 0.5),))


def test_tracing_refuses_what_it_cannot_follow():
    x = formula.Traced(Var("x"))
    with pytest.raises(TypeError, match="truth value"):
        bool(x > 0)
    with pytest.raises(TypeError, match="converts its operand to numpy"):
        np.asarray(x)
    with pytest.raises(TypeError, match="reduce"):
        np.add.reduce(x)
    with pytest.raises(TypeError, match="param"):
        formula.traced_call("elu", (x,), {"alpha": x})
    assert formula.trace_if_traced("exp", (1.0,), {}) is None


def test_text_round_trips():
    t = parse("elu(x * 2, alpha=0.5) + y")
    assert parse(formula.text(t)) == t
