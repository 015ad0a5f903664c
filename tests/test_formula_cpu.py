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


def Op(name, *args):
    """A node written as Python's operator."""
    return Call(name, args, operator=True)


def test_arithmetic_and_precedence():
    assert parse("x * w + b") == Op("add", Op("multiply", Var("x"), Var("w")), Var("b"))
    assert parse("-x // 2 % y") == Op("remainder", Op("floor_divide", Op("negative", Var("x")), Const(2)), Var("y"))
    assert parse("-3.5") == Const(-3.5)


def test_operators_on_numbers_fold_as_python_computes_them():
    assert parse("+2") == Const(2) and parse("~5") == Const(-6) and parse("-True") == Const(-1)
    assert parse("x * (1 - 0.25)") == Op("multiply", Var("x"), Const(0.75))
    with pytest.raises(FormulaError, match="arithmetic on its numbers fails: ZeroDivisionError"):
        parse("x + 1 / 0")


def test_constant_powers_stay_powers_until_the_base_dtype_is_known():
    assert parse("x ** 2") == Op("power", Var("x"), Const(2))
    assert parse("x ** -1.0") == Op("power", Var("x"), Const(-1.0))
    assert parse("x ** y") == Op("power", Var("x"), Var("y"))     # numexpr's x ** y: the power op


def test_comparisons_chain_and_logic():
    assert parse("0 < x < 1") == Op("logical_and", Op("less", Const(0), Var("x")), Op("less", Var("x"), Const(1)))
    assert parse("(x > 0) & ~m") == Op("bitwise_and", Op("greater", Var("x"), Const(0)), Op("invert", Var("m")))


def test_operators_on_numbers_compute_in_python():
    assert formula.python_value(parse("1 - a * 2"), {"a": 0.25}) == 0.5
    assert formula.python_value(parse("n // 2 + (n > 3)"), {"n": 7}) == 4
    with pytest.raises(ZeroDivisionError):
        formula.python_value(parse("1 / a"), {"a": 0})


def test_calls_aliases_and_params():
    assert parse("abs(x)") == Call("absolute", (Var("x"),))
    assert parse("where(x > 0, x, a * expm1(x))").op == "where"
    assert parse("elu(x, alpha=0.5)") == Call("elu", (Var("x"),), (("alpha", 0.5),))
    assert parse("x + inf") == Op("add", Var("x"), Const(float("inf")))
    assert formula.variables(parse("where(x > 0, x, a * expm1(x))")) == ["x", "a"]


def test_syntax_error_points_at_the_column():
    with pytest.raises(FormulaError) as e:
        parse("x * (w + ")
    assert "column" in str(e.value) and "^" in str(e.value)
    assert str(e.value).splitlines()[1:] == ["    x * (w +", "        ^"]
    with pytest.raises(FormulaError) as e:       # the caret counts characters, not UTF-8 bytes
        parse("é + x.real")
    assert str(e.value).splitlines()[2] == "    " + " " * 4 + "^"
    with pytest.raises(FormulaError) as e:       # over lines: the caret under the error's own line
        parse("(a +\n  bé * +* c)")
    assert str(e.value).splitlines() == ["syntax error in formula at line 2, column 9: invalid syntax",
                                         "      bé * +* c)", "            ^"]


def test_deep_nesting_is_a_formula_error():
    with pytest.raises(FormulaError, match="nests too deeply"):
        parse("-" * 100000 + "x")


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
    assert r.node == Op("add", Op("multiply", Op("multiply", Const(2), Var("x")), Var("w")), Const(1.0))
    assert (x ** 2).node == Op("power", Var("x"), Const(2))
    assert (-x).node == Op("negative", Var("x"))
    assert np.exp(x).node == Call("exp", (Var("x"),))          # a ufunc: numpy's typed result, not Python's
    assert (x > w).node == Op("greater", Var("x"), Var("w"))
    assert (x * np.float32(0.5)).node == Op("multiply", Var("x"), Const(0.5, "float32"))
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


def test_numbers_too_wide_for_any_dtype_are_refused_before_computing_them():
    """9 ** 9 ** 9 would take Python minutes and gigabytes: an int past any dtype is refused first."""
    import time
    t = time.perf_counter()
    for text in ("x + 9 ** 9 ** 9", "x + (1 << 2 ** 33)", "x * 10 ** 5000"):
        with pytest.raises(FormulaError, match="an int of about \\d+ bits, more than any dtype holds"):
            parse(text)
    assert time.perf_counter() - t < 5
    assert parse("x + 2 ** 100") == Op("add", Var("x"), Const(2 ** 100))       # wide, but a float64 holds it
    assert formula.text(Const(1 << 5000)) == "<an int of 5001 bits>"
    assert formula.python_value(Op("power", Var("a"), Const(2)), {"a": 3}) == 9
    with pytest.raises(OverflowError, match="more than any dtype holds"):     # a call's numbers likewise
        formula.python_value(Op("power", Var("a"), Var("b")), {"a": 10, "b": 10 ** 6})
