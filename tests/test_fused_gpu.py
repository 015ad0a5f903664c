"""Fused formulas on the GPU: pyew.evaluate and pyew.fuse against float64 numpy, node by node
through each op's own reference (the spec's `ref`): a corpus of numexpr-style formulas, a fuzzer of
random trees over dtypes and broadcast patterns, the host and device paths, views, tails, n = 0,
special values, out=, other libraries' arrays, the cache and the errors."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew import formula, fused, jit
from pyew.formula import Call, Const, Var

from . import reference
from .helpers import ROOT, map_kernels, poison, random_array

pytestmark = pytest.mark.gpu

SEED = int(os.environ.get("PYEW_FUZZ_SEED", "1234"))
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-12}


# ---- the reference: the tree in float64, each op by its spec's ref -----------------------------------

def ref_eval(node, values: dict, seen=None):
    """(float64/int64/bool numpy value, dtype row or None for a weak number) of a tree; `seen`
    collects the dtype of every op's kernel."""
    if isinstance(node, Const):
        return node.value, None
    if isinstance(node, Var):
        v = values[node.name]
        if isinstance(v, (bool, int, float)) and not isinstance(v, np.generic):
            return v, None
        a = np.asarray(v.get() if isinstance(v, pyew.DeviceArray) else v)
        return a, dt.lookup(a.dtype)
    op = fused.vocabulary()[node.op]
    kids = [ref_eval(a, values, seen) for a in node.args]
    if node.operator and node.op in formula.PYTHON_OPS and not node.params and all(i is None for _, i in kids):
        return formula.PYTHON_OPS[node.op](*[v for v, _ in kids]), None      # Python's arithmetic: weak
    fixed = fused.fixed_inputs(op)
    from pyew.operands import DEVICE, SCALAR, Operand, kernel_dtype, numpy_name, result_dtype
    ops = [Operand(n, SCALAR, v, None, ()) if info is None else Operand(n, DEVICE, None, info, ())
           for n, (v, info) in zip(op.inputs, kids) if n not in fixed]
    kd = kernel_dtype(result_dtype(ops, op.name), op.dtypes, op.name, numpy_name(op)) if ops else \
        dt.BY_NAME["float64"]
    out = op.kernel(kd).out_dtype
    if seen is not None:
        seen.add(kd.name)
    params = {p.name: p.default for p in op.params}
    params.update(dict(node.params))
    arrays = []
    for n, (v, info) in zip(op.inputs, kids):
        want = fixed.get(n, kd)
        if info is None:       # a weak number takes the op's dtype, as numpy's NEP 50 does (1e39 is inf in float32)
            with np.errstate(over="ignore"):
                v = np.asarray(v).astype(want.np).astype(np.float64 if want.kind == "float" else v.__class__)
        arrays.append(np.asarray(v))
    r = reference.evaluate(op.ref, op.inputs, arrays, params, kd)
    with np.errstate(all="ignore"):
        if out is not kd:          # casts and comparisons round where they stand
            r = np.asarray(r).astype(out.np)
        elif kd.compute == "float":
            # the kernel keeps a float32 value (of float32, float16 or bfloat16) between ops: an op
            # after it that is not continuous (trunc, floor, a comparison) sees that value
            r = np.asarray(r, np.float64).astype(np.float32).astype(np.float64)
    return np.asarray(r), out


def check(got, values: dict, tree, what=""):
    seen: set = set()
    want, info = ref_eval(tree, values, seen)
    got = np.asarray(got.get() if isinstance(got, pyew.DeviceArray) else got)
    assert got.dtype == info.np, f"{what}: dtype {got.dtype}, numpy's rules give {info.name}"
    want = np.broadcast_to(want, got.shape)
    if info.kind != "float":
        assert np.array_equal(got, want.astype(got.dtype)), f"{what}: {np.sum(got != want)} differ"
        return
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    assert np.array_equal(nan_g, nan_w), f"{what}: NaN at {np.flatnonzero(nan_g != nan_w)[:5]}"
    # values between ops keep each op's own precision: the coarsest op of the tree bounds the error
    rtol = max([RTOL[info.name]] + [RTOL[d] for d in seen if d in RTOL])
    with np.errstate(all="ignore"):
        w16 = w.astype(info.np).astype(np.float64)     # the correctly rounded result is always accepted
    ok = np.isclose(g, w, rtol=rtol, atol=rtol * 4, equal_nan=True) | (g == w16)
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, f"{what}: {bad.size} off, first at {bad[0]}: got {g.flat[bad[0]]}, want {w.flat[bad[0]]}"


def inputs(rng, n, dtype="float32", names="xyz", lo=-4.0, hi=4.0):
    return {k: rng.uniform(lo, hi, n).astype(dt.BY_NAME[dtype].np) for k in names}


def parsed(expr):
    return formula.parse(expr, frozenset(fused.vocabulary()))


# ---- a corpus of numexpr-style formulas ---------------------------------------------------------------

CORPUS = [
    "x + y", "x - y * z", "x * y + z", "(x + y) / (abs(z) + 1)", "x ** 2 + y ** 2", "sqrt(x ** 2 + y ** 2)",
    "exp(-x ** 2)", "log(1 + abs(x))", "log1p(abs(x))", "expm1(x / 4)", "sin(x) * cos(y)", "tan(x / 4)",
    "tanh(x) + y", "arctan2(y, x)", "arcsin(x / 5)", "arccos(y / 5)", "arctan(x) * 2", "sinh(x / 2) - cosh(y / 2)",
    "where(x > 0, x, 0.5 * expm1(x))", "where(x > y, x, y)", "where((x > 0) & (y < 0), x - y, x + y)",
    "where((x > 1) | (y > 1), z, -z)", "maximum(x, y) - minimum(x, z)", "fmax(x, y) + fmin(y, z)",
    "clip(x, -1, 1)", "gelu(x * y + z)", "gelu_tanh(x) * sigmoid(y)", "silu(x) + relu(y)", "elu(x, alpha=0.5) * 2",
    "hardswish(x) + hardshrink(y, lambd=1.0)", "x * a + y", "a * x ** 3 + y", "exp(x) / (1 + exp(x))",
    "1 / (1 + exp(-x))", "x / (1 + abs(x))", "x * tanh(log1p(exp(x)))", "floor(x) + ceil(y)", "trunc(x * 3) / 3",
    "rint(x * 10) / 10", "sign(x) * sqrt(abs(x))", "copysign(y, x)", "hypot(x, y)", "logaddexp(x, y)",
    "exp2(x / 2) + log2(abs(y) + 1)", "log10(abs(x) + 1)", "cbrt(x)", "reciprocal(abs(x) + 1)", "square(x) - y",
    "erf(x) + erfc(y)", "arcsinh(x) + arctanh(y / 5)", "arccosh(abs(x) + 1)", "fmod(x, 1.5)", "x % 1.5", "x // 1.5",
    "(x > y) == (y > z)", "isfinite(log(x))", "logical_not(x > 0) | (y > 0)", "x != y", "negative(x) + positive(y)",
    "-x + +y", "x * 2 - y / 4 + z * 0.25", "where(x < -2, -1, where(x > 2, 1, 0))", "power(abs(x) + 0.5, 1.5)",
    "abs(x) ** 2.5", "isnan(x / (y - y))", "(x >= y) & (y <= z) & (x != z)", "sigmoid(x) * (1 - sigmoid(x))",
    "(abs(x) + 0.5) ** a", "2 ** (x / 4)", "round(x * 10) / 10", "x > (y > z) > 0",
]


def test_corpus_is_large_and_its_ops_exist():
    missing = sorted({c.op for e in CORPUS for c in formula.calls(parsed(e))} - set(fused.vocabulary()))
    assert not missing, f"the library lacks {missing}"
    assert len(CORPUS) >= 60


@pytest.mark.parametrize("expr", CORPUS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_corpus_on_device_arrays(expr, dtype, rng):
    n = 4099                                   # tails past every pack width
    host = inputs(rng, n, dtype)
    values = {k: pyew.asarray(v) for k, v in host.items()}
    values["a"] = 0.75
    tree = parsed(expr)
    used = {k: values[k] for k in formula.variables(tree)}
    got = pyew.evaluate(expr, local_dict=used)
    check(got, {k: (host[k] if k in host else v) for k, v in used.items()}, tree, f"{expr} [{dtype}]")


@pytest.mark.parametrize("expr", CORPUS[::3])
def test_corpus_numpy_in_numpy_out(expr, rng):
    x, y, z = (rng.uniform(-4, 4, 3001).astype(np.float32) for _ in range(3))
    a = 0.75
    got = pyew.evaluate(expr)                  # names from this frame, as numexpr takes them
    assert isinstance(got, np.ndarray)
    check(got, {"x": x, "y": y, "z": z, "a": a}, parsed(expr), expr)


INT_CORPUS = [
    "x * 3 + y", "x - y * z", "(x & y) | z", "x ^ (y >> 2)", "(x << 3) - y", "~x + y", "x // 7 + x % 7",
    "abs(x - y)", "maximum(x, y) - minimum(x, z)", "where(x > y, x, y)", "where((x > 0) & (y < 0), x, -y)",
    "x ** 2 + y", "sign(x) * z", "x * x - y * y", "clip(x, -100, 100) + z", "square(x) // (abs(y) + 1)",
    "remainder(x, abs(y) + 1)", "fmod(x, abs(z) + 1)", "(x > y) == (y > z)", "(x != y) | (z == 0)",
    "negative(x) + positive(y)", "invert(x) & 1023", "x + 1.5 * y", "sqrt(abs(x)) + y", "x / (abs(y) + 1)",
]


@pytest.mark.parametrize("expr", INT_CORPUS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_corpus(expr, dtype, rng):
    """numexpr-style formulas over integer arrays: wrapping arithmetic, floor division and modulo,
    shifts, bitwise ops and comparisons as numpy has them (and a float where one enters), on the
    GPU and from numpy."""
    n = 4099
    host = {k: rng.integers(-1000, 1000, n).astype(dtype) for k in "xyz"}
    tree = parsed(expr)
    used = formula.variables(tree)
    on_gpu = pyew.evaluate(expr, local_dict={k: pyew.asarray(host[k]) for k in used})
    check(on_gpu, host, tree, f"{expr} [{dtype}]")
    check(pyew.evaluate(expr, local_dict={k: host[k] for k in used}), host, tree, f"{expr} [{dtype}, numpy]")


# ---- a fuzzer: random trees over ops, dtypes and broadcast patterns ------------------------------------

SAFE_UNARY = ["negative", "absolute", "tanh", "sin", "cos", "sigmoid", "gelu", "silu", "square", "arctan"]
SAFE_BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "fmax", "hypot", "logaddexp"]
SHAPES = [(64, 33), (33,), (64, 1), (1, 33), ()]


def random_tree(r, names, depth):
    if depth == 0 or r.random() < 0.2:
        if r.random() < 0.15:
            return Const(round(float(r.uniform(-2, 2)), 3))
        return Var(str(r.choice(names)))
    k = r.integers(0, 10)
    vocab = fused.vocabulary()
    if k < 4:
        return Call(str(r.choice([u for u in SAFE_UNARY if u in vocab])), (random_tree(r, names, depth - 1),))
    if k < 9:
        return Call(str(r.choice([b for b in SAFE_BINARY if b in vocab])),
                    (random_tree(r, names, depth - 1), random_tree(r, names, depth - 1)))
    cond = Call("greater", (random_tree(r, names, depth - 1), random_tree(r, names, depth - 1)))
    return Call("where", (cond, random_tree(r, names, depth - 1), random_tree(r, names, depth - 1)))


@pytest.mark.parametrize("seed", range(120))
def test_fuzzed_trees(seed):
    r = np.random.default_rng(1000 + seed)
    names = ["p", "q", "s"]
    tree = random_tree(r, names, int(r.integers(1, 5)))
    used = formula.variables(tree)
    if not used:
        tree, used = Call("add", (tree, Var("p"))), ["p"]
    host = {}
    for k in used:
        dtype = str(r.choice(["float32", "float16", "bfloat16", "float64"]))
        shape = SHAPES[int(r.integers(0, len(SHAPES)))] if k != used[0] else (64, 33)
        host[k] = r.uniform(-3, 3, shape).astype(dt.BY_NAME[dtype].np)
    on_gpu = bool(r.integers(0, 2))
    values = {k: (pyew.asarray(v) if on_gpu and v.ndim else v) for k, v in host.items()}
    got = fused.run(tree, values, formula.text(tree))
    check(got, host, tree, f"seed {seed}: {formula.text(tree)} {[(k, v.dtype.name, v.shape) for k, v in host.items()]}")


def _leaf(r, name: str, info, shapes: dict, first: bool):
    """An operand of the op under test: an array of the kernel's input dtype, of a random broadcast
    shape (the first of the result's), or now and then a Python number of its kind."""
    if not first and info.kind != "bool" and r.random() < 0.2:
        # integers from 1: no division by zero, no negative power (numpy's error for a Python int)
        return Const(int(r.integers(1, 4)) if info.kind == "int" else round(float(r.uniform(-2, 2)), 3))
    shapes[name] = (SHAPES[0] if first else SHAPES[int(r.integers(0, len(SHAPES)))], info)
    return Var(name)


def _continued(r, node, info, shapes: dict):
    """The op's result carried on by a few ops that keep its own error, which the check's tolerance
    is for: exact ones on floats (negation, halving, absolute value, a selection), and on integers
    ones that wrap modulo their width as the int64 reference does (so a result the kernel wrapped
    stays comparable); a bool result selects between two float arrays or is combined with another."""
    name = f"c{len(shapes)}"
    for _ in range(int(r.integers(0, 3))):
        k = int(r.integers(0, 4))
        if info.kind == "float":
            leaf = _leaf(r, name + str(_), info, shapes, False)
            node = [Call("negative", (node,)), Call("multiply", (node, Const(0.5))), Call("absolute", (node,)),
                    Call("maximum", (node, leaf))][k]
        elif info.kind == "int":
            leaf = _leaf(r, name + str(_), info, shapes, False)
            node = [Call("negative", (node,)), Call("add", (node, leaf)), Call("multiply", (node, leaf)),
                    Call("bitwise_xor", (node, leaf))][k]
        elif k < 2:
            a, b = (_leaf(r, f"{name}{_}{j}", dt.BY_NAME["float32"], shapes, False) for j in "ab")
            return Call("where", (node, a, b))
        else:
            node = Call(["logical_and", "logical_xor"][k - 2], (node, _leaf(r, name + str(_), info, shapes, False)))
    return node


@pytest.mark.parametrize("op,k", map_kernels(lambda op, k: op.name in fused.vocabulary()))
def test_every_op_and_dtype_in_a_fuzzed_formula(op, k):
    """Each map op of the library at each of its dtypes, in a random formula: its operands arrays of
    random broadcast shapes (numpy or pyew's) or numbers, its params random, its result carried on
    by a few other ops, against the ops' float64 references. Tree and data follow PYEW_FUZZ_SEED
    and the case's name."""
    r = np.random.default_rng([SEED, *map(ord, f"{op.name}-{k.dtype.name}")])
    shapes: dict = {}
    args = tuple(_leaf(r, f"v{i}", d, shapes, i == 0) for i, d in enumerate(k.in_dtypes))
    params = tuple(sorted((p.name, p.default if p.default is not None and r.random() < 0.5 else
                           (round(float(r.uniform(0.1, 2)), 2) if p.type == "float" else int(r.integers(1, 4))))
                          for p in op.params))
    tree = _continued(r, Call(op.name, args, params), k.out_dtype, shapes)
    host = {}
    for name, (shape, info) in shapes.items():
        a = random_array(r, max(1, int(np.prod(shape))), info.name).reshape(shape)
        host[name] = a if shape else a.reshape(())[()]          # a 0-d operand: a numpy scalar
    if op.name in ("div", "divide", "floor_divide", "remainder", "fmod") and "v1" in host and k.dtype.kind != "float":
        host["v1"] = np.where(host["v1"] == 0, 7, host["v1"]).astype(host["v1"].dtype)
    if op.name == "power" and k.dtype.kind == "int" and "v1" in host and not np.ndim(host["v1"]):
        host["v1"] = abs(host["v1"]) % 64         # a negative integer scalar exponent is numpy's error
    on_gpu = bool(r.integers(0, 2))
    values = {n: (pyew.asarray(v) if on_gpu and np.ndim(v) else v) for n, v in host.items()}
    got = fused.run(tree, values, formula.text(tree))
    shown = [(n, np.asarray(v).dtype.name, np.shape(v)) for n, v in host.items()]
    check(got, host, tree, f"PYEW_FUZZ_SEED={SEED}: {formula.text(tree)} {shown}")


# ---- layouts, sizes and special values -------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 7, 8, 31, 1000003])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sizes_and_poisoned_out(n, dtype, rng):
    host = inputs(rng, n, dtype, "xy")
    x, y = (pyew.asarray(v) for v in host.values())
    out = poison(pyew.empty((n,), dtype))
    r = pyew.evaluate("gelu(x * y + 1)", local_dict={"x": x, "y": y}, out=out)
    assert r is out
    check(out, host, parsed("gelu(x * y + 1)"))


@pytest.mark.parametrize("offsets", [(1, 0), (0, 3), (2, 5), (1, 1), (3, 7)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_misaligned_views(offsets, dtype, rng):
    n = 10007
    hx, hy = (rng.uniform(-4, 4, n + 8).astype(dt.BY_NAME[dtype].np) for _ in range(2))
    dx, dy = pyew.asarray(hx), pyew.asarray(hy)
    a, b = offsets
    m = n - 8
    x, y = dx[a:a + m], dy[b:b + m]
    for expr in ("sigmoid(x) * y", "x + y * 2", "tanh(x)"):
        got = pyew.evaluate(expr, local_dict={"x": x, "y": y})
        check(got, {"x": hx[a:a + m], "y": hy[b:b + m]}, parsed(expr), f"{expr} at {offsets}")


def test_broadcast_bias_and_row_scale(rng):
    x = rng.uniform(-3, 3, (257, 129)).astype(np.float32)
    w = rng.uniform(-1, 1, (129,)).astype(np.float32)
    b = rng.uniform(-1, 1, (257, 1)).astype(np.float32)
    for on_gpu in (False, True):
        v = {"x": x, "w": w, "b": b}
        if on_gpu:
            v = {k: pyew.asarray(a) for k, a in v.items()}
        got = pyew.evaluate("gelu(x * w + b)", local_dict=v)
        check(got, {"x": x, "w": w, "b": b}, parsed("gelu(x * w + b)"))


def test_special_values_propagate(rng):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -1e38, 1e-45, 3.0], np.float32)
    for expr in ("exp(x) - 1", "where(x > 0, x, 0.5 * expm1(x))", "maximum(x, 0) + sqrt(abs(x))", "sigmoid(x) * x",
                 "log1p(abs(x))", "tanh(x) * 2"):
        check(pyew.evaluate(expr, local_dict={"x": pyew.asarray(x)}), {"x": x}, parsed(expr), expr)


def test_first_calls_from_many_threads_get_their_own_kernels(rng):
    """Threads calling a new formula at once on shapes that need different kernels (tails, a
    broadcast, misaligned views) each get the kernel their call asked for."""
    import threading
    x = rng.uniform(-3, 3, (301, 257)).astype(np.float32)
    w = rng.uniform(-1, 1, (257,)).astype(np.float32)
    dx, dw = pyew.asarray(x), pyew.asarray(w)
    flat, hflat = dx.reshape(-1), x.reshape(-1)
    cases = [(dx, dw, x, w), (dx[1:], dw, x[1:], w), (flat[3:], flat[:-3], hflat[3:], hflat[:-3]),
             (dx[7], dw, x[7], w), (flat[1:71719], flat[2:71720], hflat[1:71719], hflat[2:71720]),
             (dx[5:9], dx[100:101], x[5:9], x[100:101])]
    for round_ in range(3):
        expr = f"gelu(x * w - 0.{round_}173)"       # a formula new to this process: its kernels are found now
        start, got, errors = threading.Barrier(len(cases)), [None] * len(cases), []

        def work(i, expr=expr, start=start, got=got, errors=errors):
            try:
                start.wait()
                got[i] = pyew.evaluate(expr, local_dict={"x": cases[i][0], "w": cases[i][1]}).get()
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for i, (*_, hx, hw) in enumerate(cases):
            check(got[i], {"x": hx, "w": hw}, parsed(expr), f"case {i}, round {round_}")


def test_mixed_dtypes_promote_over_the_formula(rng):
    x = rng.uniform(-2, 2, 1001).astype(np.float16)
    y = rng.uniform(-2, 2, 1001).astype(np.float32)
    i = rng.integers(-5, 5, 1001).astype(np.int32)
    r = pyew.evaluate("x * 0.5 + y", local_dict={"x": pyew.asarray(x), "y": pyew.asarray(y)})
    assert r.dtype == np.float32
    check(r, {"x": x, "y": y}, parsed("x * 0.5 + y"))
    r = pyew.evaluate("x * 0.5", local_dict={"x": pyew.asarray(x)})      # a weak number keeps float16
    assert r.dtype == np.float16
    r = pyew.evaluate("i * 3 + 1", local_dict={"i": pyew.asarray(i)})
    assert r.dtype == np.int32
    check(r, {"i": i}, parsed("i * 3 + 1"))
    r = pyew.evaluate("exp(i / 4)", local_dict={"i": pyew.asarray(i)})
    assert r.dtype == np.float64
    check(r, {"i": i}, parsed("exp(i / 4)"))


def test_numpy_calls_replay_a_plan(rng, monkeypatch):
    """A formula on numpy arrays, each of the result's shape, a row or a column of it, and Python
    numbers: classified once, then replayed with new numbers and new data, mixed dtypes and a bool
    result among them, a channel bias (ones, then the result's dims or ones) too; an operand with
    the result's first dim broadcast in a middle dim is classified each call. Each against numpy's
    float64."""
    seen = []
    classify = fused.classify
    monkeypatch.setattr(fused, "classify", lambda *a, **k: seen.append(a[1]) or classify(*a, **k))
    x = rng.uniform(-3, 3, (300, 129)).astype(np.float32)
    h = rng.uniform(-3, 3, (300, 129)).astype(np.float16)
    w = rng.uniform(-1, 1, (129,)).astype(np.float32)
    b = rng.uniform(-1, 1, (1, 129)).astype(np.float16)
    col = rng.uniform(-1, 1, (300, 1)).astype(np.float32)
    x3 = rng.uniform(-3, 3, (4, 300, 129)).astype(np.float32)
    mid = rng.uniform(-1, 1, (1, 300, 1)).astype(np.float32)
    side = rng.uniform(-1, 1, (4, 1, 129)).astype(np.float32)
    cases = [("gelu(x * w + b)", {}), ("where(x > a, x, a * expm1(h))", {"a": 0.5}), ("x > w", {}),
             ("h * a + b", {"a": 2}), ("x * col + w", {}), ("x3 * mid", {}), ("x3 * side", {})]
    for expr, numbers in cases:
        seen.clear()
        for k in range(3):
            x[...] = rng.uniform(-3, 3, x.shape)
            nums = {n: v * (k + 1) for n, v in numbers.items()}
            v = {"x": x, "h": h, "w": w, "b": b, "col": col, "x3": x3, "mid": mid, "side": side, **nums}
            got = pyew.evaluate(expr, local_dict=v)
            assert isinstance(got, np.ndarray)
            check(got, v, parsed(expr), f"{expr} {nums}")
        names = formula.variables(parsed(expr))
        assert len(seen) == len(names) * (3 if "side" in expr else 1), expr


def test_scalars_are_parameters_not_recompiles(rng):
    x = pyew.asarray(rng.uniform(-2, 2, 999).astype(np.float32))
    before = dict(jit.STATS)
    for a in (0.5, 1.5, -3.0, 7):
        r = pyew.evaluate("where(x > 0, x, a * expm1(x))", local_dict={"x": x, "a": a})
        check(r, {"x": x.get(), "a": a}, parsed("where(x > 0, x, a * expm1(x))"), f"a={a}")
    # the int a is another signature (an int parameter): at most one more kernel than the floats
    assert jit.STATS["compiled"] - before["compiled"] <= 2


def test_other_libraries_arrays(torch_cuda, rng):
    torch = torch_cuda
    t = torch.randn(4096, device="cuda", dtype=torch.float32)
    u = torch.randn(4096, device="cuda", dtype=torch.float16)
    r = pyew.evaluate("gelu(t * u + 1)", local_dict={"t": t, "u": u})
    check(r, {"t": t.cpu().numpy(), "u": u.cpu().numpy()}, parsed("gelu(t * u + 1)"))
    out = torch.empty(4096, device="cuda", dtype=torch.float32)
    pyew.evaluate("t * 2", local_dict={"t": t}, out=out)
    torch.cuda.synchronize()
    assert torch.equal(out, t * 2)


def test_cupy_arrays(cupy, rng):
    x = cupy.asarray(rng.uniform(-2, 2, 5000).astype(np.float32))
    r = pyew.evaluate("sigmoid(x) + x ** 2", local_dict={"x": x})
    check(r, {"x": cupy.asnumpy(x)}, parsed("sigmoid(x) + x ** 2"))


# ---- pyew.fuse ------------------------------------------------------------------------------------

def test_fuse_traces_once_per_signature(rng):
    calls = []

    @pyew.fuse
    def bias_act(x, w, b, scale=1.0):
        calls.append(1)
        return pyew.gelu(x * w + b) * scale + np.tanh(x)

    x = rng.uniform(-2, 2, (33, 65)).astype(np.float32)
    w = rng.uniform(-1, 1, 65).astype(np.float32)
    b = rng.uniform(-1, 1, (33, 1)).astype(np.float32)
    tree = parsed("gelu(x * w + b) * scale + tanh(x)")
    check(bias_act(x, w, b), {"x": x, "w": w, "b": b, "scale": 1.0}, tree, "numpy")
    check(bias_act(pyew.asarray(x), w, b, scale=2.0), {"x": x, "w": w, "b": b, "scale": 2.0}, tree, "mixed")
    check(bias_act(pyew.asarray(x), pyew.asarray(w), pyew.asarray(b), 3.0),
          {"x": x, "w": w, "b": b, "scale": 3.0}, tree, "device")
    assert len(calls) == 1, "one trace for one signature (dtypes and kinds), whatever the values"
    bias_act(x.astype(np.float16), w, b)
    assert len(calls) == 2


def test_fuse_refuses_python_control_flow(rng):
    @pyew.fuse
    def f(x):
        return x if x > 0 else -x
    with pytest.raises(TypeError, match="truth value"):
        f(np.ones(4, np.float32))


# ---- out= and errors: nothing written ----------------------------------------------------------------

def test_errors_write_nothing(rng):
    x = pyew.asarray(rng.uniform(-2, 2, 100).astype(np.float32))
    out = poison(pyew.empty((100,), "float32"))
    before = out.get()
    with pytest.raises(TypeError, match="Cannot cast formula 'x \\* 2' output from dtype\\('float32'\\)"):
        pyew.evaluate("x * 2", local_dict={"x": x}, out=pyew.empty((100,), "int32"))
    with pytest.raises(ValueError, match="shape|broadcast"):
        pyew.evaluate("x + y", local_dict={"x": x, "y": pyew.asarray(np.ones(7, np.float32))}, out=out)
    with pytest.raises(pyew.FormulaError, match="did you mean x"):
        pyew.evaluate("xx * 2", local_dict={"x": x}, out=out)
    with pytest.raises(pyew.FormulaError, match="column"):
        pyew.evaluate("x * (", local_dict={"x": x}, out=out)
    with pytest.raises(pyew.FormulaError, match="attribute"):
        pyew.evaluate("x.ptr", local_dict={"x": x}, out=out)
    with pytest.raises(pyew.FormulaError, match="no array"):
        pyew.evaluate("a * 2", local_dict={"a": 1.0})
    with pytest.raises(OverflowError):
        pyew.evaluate("i + 2 ** 40", local_dict={"i": pyew.asarray(np.ones(4, np.int32))})
    np.testing.assert_array_equal(out.get(), before)


def test_integers_compared_with_python_ints_past_int64():
    """numpy 2's answers, the int64 range's ends included: a constant compiles as the infinity of
    its sign; a call's number past int64 (or one computed from it) runs op by op."""
    top, bottom = (1 << 63) - 1, -(1 << 63)
    i = np.array([bottom, bottom + 1, -3, 0, 4, top - 1, top], np.int64)
    d = pyew.asarray(i)
    for k in (2 ** 63, -2 ** 63 - 1, 2 ** 70):
        np.testing.assert_array_equal(pyew.evaluate(f"i == {k}", local_dict={"i": d}).get(), i == k)
        np.testing.assert_array_equal(pyew.evaluate(f"i < {k}", local_dict={"i": i}), i < k)
        np.testing.assert_array_equal(pyew.evaluate("i >= n", local_dict={"i": d, "n": k}).get(), i >= k)
    np.testing.assert_array_equal(pyew.evaluate("i < n + 1", local_dict={"i": d, "n": top}).get(), i < top + 1)


def test_compile_errors_name_the_formula(monkeypatch, tmp_path):
    """NVRTC's error names the formula; a formula whose compile fails writes nothing to out= and
    leaves no kernel behind (the same call compiles once NVRTC works again)."""
    with pytest.raises(jit.CompileError, match="'broken'") as e:
        jit.compile_cubin("this is not C++", "ew::nothing<int>", "sm_90", [jit.cuda_include()], "broken")
    assert len(str(e.value)) < 600
    monkeypatch.setenv("PYEW_CACHE_DIR", str(tmp_path))          # nothing compiled before: it compiles now
    x = pyew.asarray(np.linspace(-2, 2, 1001, dtype=np.float32))
    out = poison(pyew.empty(x.shape))
    real = jit.compile_cubin

    def broken(source, name_expression, arch, include, text):
        return real("this is not C++", name_expression, arch, include, text)
    monkeypatch.setattr(jit, "compile_cubin", broken)
    expr = "tanh(x) * 7.03125 + 0.0078125"
    with pytest.raises(jit.CompileError, match="7.03125"):
        pyew.evaluate(expr, local_dict={"x": x}, out=out)
    assert np.isnan(out.get()).all()
    monkeypatch.setattr(jit, "compile_cubin", real)
    pyew.evaluate(expr, local_dict={"x": x}, out=out)
    check(out, {"x": x.get()}, parsed(expr), expr)


# ---- the cache ------------------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import time, numpy as np, pyew
    from pyew import jit
    x = pyew.asarray(np.arange(1000, dtype=np.float32))
    pyew.synchronize()
    t = time.perf_counter()
    r = pyew.evaluate("tanh(x / 500) * 3 + {k}", local_dict={{"x": x}})
    pyew.synchronize()
    dt = time.perf_counter() - t
    ok = np.allclose(r.get(), np.tanh(np.arange(1000) / 500) * 3 + {k}, rtol=1e-5, atol=1e-5)
    print(jit.STATS["compiled"], jit.STATS["disk"], int(ok), f"{{dt * 1e3:.2f}}")
""")


def run_script(cache, k=0.25):
    env = dict(os.environ, PYEW_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(k=k)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    compiled, disk, ok, ms = r.stdout.split()
    return int(compiled), int(disk), ok == "1", float(ms), r.stderr


# corrupt entries, concurrent writers and unusable folders: tests/test_fused_cpu.py (the cache needs no GPU)
def test_disk_cache_across_processes(tmp_path):
    c1 = run_script(tmp_path)
    assert c1[0] == 1 and c1[2]
    c2 = run_script(tmp_path)
    assert c2[0] == 0 and c2[1] >= 1 and c2[2], "a new process reads the kernel from the disk cache"
    print(f"first call: compiling {c1[3]:.1f} ms, from the disk cache {c2[3]:.2f} ms")


# ---- Python numbers, numpy scalars, literals and powers as numpy has them -----------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_operators_on_python_numbers_keep_the_arrays_dtype(dtype, rng):
    """a * x + (1 - a) * y with a a Python float: 1 - a is a Python float (weak), computed on the
    host for each call, so the result has numpy's dtype (x's, not float64); another a needs no new
    kernel."""
    host = inputs(rng, 4099, dtype, "xy")
    x, y = (pyew.asarray(v) for v in host.values())
    for a in (0.3, 0.8):
        for expr in ("a * x + (1 - a) * y", "x * (a * 2) - y / (a + 1)", "x + (a > 0.5)"):
            got = pyew.evaluate(expr, local_dict={"x": x, "y": y, "a": a})
            # numpy's dtype (ml_dtypes' bfloat16 with a Python float is float32; the others keep theirs)
            assert got.dtype == eval(expr, {}, {**host, "a": a}).dtype, expr
            check(got, {**host, "a": a}, parsed(expr), f"{expr}, a = {a}")


def test_numpy_scalars_are_typed(rng):
    x = rng.uniform(-4, 4, 4099).astype(np.float32)
    m = np.float64(x.astype(np.float64).mean())
    got = pyew.evaluate("x - m", local_dict={"x": pyew.asarray(x), "m": m})
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.get(), x - m)

    @pyew.fuse
    def scaled(v, kind="double"):
        return v * np.float64(0.1) if kind == "double" else -v
    assert scaled(pyew.asarray(x)).dtype == np.float64
    np.testing.assert_array_equal(scaled(pyew.asarray(x), kind="neg").get(), -x)


def test_literals_without_a_cpp_spelling(rng):
    x = rng.uniform(-4, 4, 4099).astype(np.float32)
    x[:3] = [0.0, -0.0, np.nan]
    d = pyew.asarray(x)
    for expr in ("where(x > 0, x, -inf)", "where(x > 0, nan, x)", "x * 1e39", "x + inf"):
        got = pyew.evaluate(expr, local_dict={"x": d})
        check(got, {"x": x}, parsed(expr), expr)
    h = pyew.evaluate("x + 100000", local_dict={"x": pyew.asarray(x.astype(np.float16))})
    assert np.all(np.isinf(h.get()[3:]) | np.isnan(h.get()[3:]))


def test_powers_as_numpy_computes_them(rng):
    x = rng.uniform(-4, 4, 4099).astype(np.float32)
    x[:2] = [1e20, -3e19]                        # (1/x)^2, not 1/(x*x), which is 1/inf = 0
    got = pyew.evaluate("x ** -2", local_dict={"x": pyew.asarray(x)}).get()
    with np.errstate(all="ignore"):
        want = x.astype(np.float64) ** -2
    assert got[0] > 0 and got[1] > 0
    np.testing.assert_allclose(got[2:], want[2:], rtol=1e-6)
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-3)       # float32 subnormals
    i = rng.integers(-1000, 1000, 4099).astype(np.int32)
    di = pyew.asarray(i)
    r2 = pyew.evaluate("i ** 2", local_dict={"i": di})
    assert r2.dtype == np.int32
    np.testing.assert_array_equal(r2.get(), i ** 2)
    rf = pyew.evaluate("i ** 2.0", local_dict={"i": di})
    assert rf.dtype == np.float64
    np.testing.assert_array_equal(rf.get(), i.astype(np.float64) ** 2.0)
    with pytest.raises(pyew.FormulaError, match="negative integer powers"):
        pyew.evaluate("i ** -1", local_dict={"i": di})
