"""DeviceArray as numpy users expect it, without a GPU: the ufunc mapping read from the manifest,
the table of Python's operators, the errors (no implicit host copy, unsupported ufunc methods and
keywords, missing ops), and the operators, ufunc calls, in-place forms, reshape and printing run
through the real call layer over the CPU stand-ins (tests/fake_cuda.py, fake_kernels.py)."""
from __future__ import annotations

import re
import types

import ml_dtypes
import numpy as np
import pytest

import pyew
from pyew import array, library, ufuncs
from pyew import dtypes as dt
from pyew import runtime as rt
from pyew.array import DeviceArray
from pyew.errors import LibraryError
from pyew.ufuncs import OPERATORS, derive, ufunc_op

from .helpers import manifest_ops

needs_lib = pytest.mark.skipif(not manifest_ops(), reason="libew.so not built (make all)")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _bare(shape=(3,), dtype="float32") -> DeviceArray:
    """A DeviceArray over no memory: for what must fail before anything is read."""
    return DeviceArray(None, 0, shape, dt.BY_NAME[dtype])


def _op(name, kind="map", **ufunc):
    return types.SimpleNamespace(name=name, kind=kind, **ufunc)


# ---- the tables, without a library ----------------------------------------------------------------

@pytest.mark.parametrize("o", OPERATORS, ids=lambda o: o.method)
def test_each_operator_is_the_ufunc_numpy_runs_for_it(o):
    """On numpy arrays the operator and its ufunc agree (so the table is numpy's, not a guess)."""
    uf = getattr(np, o.ufunc)
    assert isinstance(uf, np.ufunc) and uf.__name__ == o.ufunc and uf.nin == o.arity and uf.nout == 1
    a = np.array([5, 3, 7, 12], np.int64)
    b = np.array([2, 3, 4, 1], np.int64)
    if o.arity == 1:
        assert np.array_equal(getattr(a, o.methods[0])(), uf(a))
        return
    assert np.array_equal(getattr(a, o.methods[0])(b), uf(a, b))
    if o.reflected:
        assert np.array_equal(getattr(a, o.methods[1])(b), uf(b, a))
        c = a.astype(uf(a, b).dtype)
        assert getattr(c, o.methods[2])(b) is c and np.array_equal(c, uf(a, b))


def test_device_array_has_every_operator_and_routes_it(monkeypatch):
    """Each special method of the table is DeviceArray's and asks pyew.ufuncs for its ufunc, in
    its direction; DeviceArray has no operator the table lacks."""
    calls = []
    stub = types.SimpleNamespace(
        binary=lambda u, a, b: calls.append(("binary", u, b)) or "r",
        reflected=lambda u, a, b: calls.append(("reflected", u, b)) or "r",
        inplace=lambda u, a, b: calls.append(("inplace", u, b)) or "r",
        unary=lambda u, a: calls.append(("unary", u, None)) or "r",
        power=lambda a, b, in_place=False: calls.append(("inplace" if in_place else "binary", "power", b)) or "r")
    monkeypatch.setattr(array, "_ufuncs", stub)
    d = _bare()
    for o in OPERATORS:
        for m, kind in zip(o.methods, ("binary", "reflected", "inplace")):
            calls.clear()
            got = getattr(d, m)() if o.arity == 1 else getattr(d, m)(7)
            want = ("unary", o.ufunc, None) if o.arity == 1 else (kind, o.ufunc, 7)
            assert got == "r" and calls == [want], m
    for m in ufuncs.BY_METHOD:
        assert m in vars(DeviceArray), m
    for m in ("__matmul__", "__rmatmul__", "__imatmul__", "__divmod__", "__rdivmod__"):   # not elementwise ops
        assert not hasattr(DeviceArray, m), m
    assert DeviceArray.__hash__ is None


def test_the_mapping_takes_the_ufunc_field_then_the_name():
    ops = [_op("sub", ufunc="subtract"), _op("exp"), _op("subtract"), _op("relu_mask", kind="relu_mask"),
           _op("mul", ufunc="multiply"), _op("old"), _op("neg", ufunc=None), _op("where2", ufunc=""),
           _op("fabs2", ufunc="abs")]
    got = derive(ops)
    assert got["absolute"] == "fabs2" and "abs" not in got      # numpy's alias, as numpy names the ufunc
    assert got["subtract"] == "sub"            # the declared ufunc wins over the op of that name
    assert got["multiply"] == "mul" and got["exp"] == "exp" and got["old"] == "old"
    assert "sub" not in got and "mul" not in got   # an op with a ufunc field answers to that name only
    assert got["neg"] == "neg" and got["where2"] == "where2"
    assert "relu_mask" not in got              # only map ops are ufuncs


def test_the_mapping_works_before_ops_have_a_ufunc_field():
    ops = [types.SimpleNamespace(name="add", kind="map"), types.SimpleNamespace(name="sub", kind="map")]
    assert derive(ops) == {"add": "add", "sub": "sub"}


def test_two_ops_claiming_one_ufunc_is_an_error_naming_both():
    with pytest.raises(LibraryError, match="'sub' and 'minus' .* both declare ufunc = 'subtract'"):
        derive([_op("sub", ufunc="subtract"), _op("minus", ufunc="subtract")])


def test_operands_pyew_takes_and_those_it_leaves_to_python():
    for x in (1, 2.5, True, np.float16(1), np.zeros(3), np.zeros(3).view(np.recarray), [1, 2], (1.0,), _bare(), 1j):
        assert ufuncs.takes(x), type(x)

    class OptsOut:
        __array_ufunc__ = None

    for x in (OptsOut(), object(), None, "text", {1: 2}):
        assert not ufuncs.takes(x), type(x)


def test_other_operands_get_their_own_operators():
    """An operand pyew does not take gets Python's next try: its reflected method, else Python's
    TypeError; one that opts out of numpy's protocol (__array_ufunc__ = None) handles it."""
    class Other:
        __array_ufunc__ = None

        def __radd__(self, other):
            return "other's +"

        def __rlt__(self, other):       # not a Python method: < reflects to >
            raise AssertionError

        def __gt__(self, other):
            return "other's >"

    d = _bare()
    assert d + Other() == "other's +"
    assert (d < Other()) == "other's >"
    with pytest.raises(TypeError, match="unsupported operand"):
        d - object()
    with pytest.raises(TypeError, match="unsupported operand"):
        d ** "x"
    with pytest.raises(TypeError, match="unsupported operand"):
        pow(d, 2, 3)
    with pytest.raises(TypeError):
        d += object()
    class Equality:
        def __eq__(self, other):
            return "its own =="
    assert (d == Equality()) == "its own =="         # an object with its own equality answers


def test_ufuncs_defer_to_other_libraries_operands():
    """NEP 13: a DeviceArray answers NotImplemented for an operand it does not take, so numpy asks
    that operand's __array_ufunc__ next (also for the ufunc methods pyew refuses)."""
    class Other:
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return f"{ufunc.__name__}.{method}"

    assert np.add(_bare(), Other()) == "add.__call__"
    assert np.multiply(Other(), _bare(), where=True) == "multiply.__call__"
    assert np.add.outer(_bare(), Other()) == "add.outer"
    assert np.add(_bare(), 1.0, out=(Other(),)) == "add.__call__"


def test_no_implicit_copy_to_numpy():
    d = _bare()
    for convert in (np.asarray, np.array, lambda x: np.array([x, x]), lambda x: np.asarray(x, np.float64),
                    lambda x: np.concatenate([x]), lambda x: np.clip(x, 0, 1),
                    lambda x: np.testing.assert_array_equal(x, 0)):
        with pytest.raises(TypeError, match=r"not converted to a numpy array implicitly.*call \.get\(\)"):
            convert(d)
    with pytest.raises(TypeError, match="unhashable"):
        hash(d)
    with pytest.raises(TypeError, match="unhashable"):
        _ = {d: 1}


@pytest.mark.parametrize("call,method", [
    (lambda d: np.add.reduce(d), "add.reduce"),
    (lambda d: np.sum(d), "add.reduce"),
    (lambda d: np.add.accumulate(d), "add.accumulate"),
    (lambda d: np.multiply.outer(d, d), "multiply.outer"),
    (lambda d: np.add.at(d, [0], 1), "add.at"),
    (lambda d: np.maximum.reduceat(d, [0]), "maximum.reduceat"),
])
def test_ufunc_methods_are_refused_by_name(call, method):
    with pytest.raises(TypeError, match=rf"numpy's {method} is not supported on DeviceArrays.*\.get\(\)"):
        call(_bare())


@pytest.mark.parametrize("kw,shown", [({"where": np.ones(3, bool)}, "where="), ({"dtype": np.float64}, "dtype="),
                                      ({"casting": "unsafe"}, "casting='unsafe'"), ({"order": "F"}, "order='F'"),
                                      ({"order": "A"}, "order='A'"), ({"signature": "ff->f"}, "signature="),
                                      ({"dtype": "int32"}, "dtype=")])
def test_ufunc_keywords_other_than_out_are_refused_by_name(kw, shown):
    with pytest.raises(TypeError, match=rf"np\.add\(\.\.\., {shown}.*not supported on DeviceArrays"):
        np.add(_bare(), 1.0, **kw)


def test_ufuncs_of_two_outputs_are_refused():
    with pytest.raises(TypeError, match="numpy's divmod has 2 outputs"):
        np.divmod(_bare(), 2)
    with pytest.raises(TypeError, match="numpy's modf has 2 outputs"):
        np.modf(_bare())


def test_scalars_and_truth_of_many_elements_need_no_copy_to_fail():
    d = _bare((2, 3))
    with pytest.raises(ValueError, match="truth value of an array with more than one element is ambiguous"):
        bool(d)
    with pytest.raises(TypeError, match="only 0-dimensional arrays"):
        float(d)
    with pytest.raises(TypeError, match="only 0-dimensional arrays"):
        int(d)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d"):
        len(_bare(()))
    with pytest.raises(TypeError, match="iteration over a 0-d"):
        iter(_bare(()))


def test_reshape_ravel_are_views_and_check_the_shape():
    d = _bare((4, 6))
    for shape in ((24,), (2, 12), (2, 3, 4), (-1,), (3, -1), (2, -1, 3), ((2, 12),), ([4, 6],),
                  (np.int64(24),), ((np.int32(6), -1),)):
        r = d.reshape(*shape)
        assert r.ptr == d.ptr and r.buffer is d.buffer and r.size == 24, shape
    assert d.reshape(2, 3, 4).shape == (2, 3, 4) and d.reshape((3, -1)).shape == (3, 8)
    assert d.ravel().shape == (24,) and d.ravel().ptr == d.ptr
    assert _bare((0, 3)).reshape(-1, 3).shape == (0, 3) and _bare((1,)).reshape(()).shape == ()
    for bad, err, msg in [((5, 5), ValueError, "cannot reshape array of size 24 into shape \\(5, 5\\)"),
                          ((-1, -1), ValueError, "only specify one unknown dimension"),
                          ((-1, 5), ValueError, "cannot reshape array of size 24"),
                          ((-2, -12), ValueError, "negative dimension"),
                          ((2.5,), TypeError, "ints or one tuple"), (("a",), TypeError, "ints or one tuple"),
                          ((), TypeError, "reshape\\(\\) takes a shape")]:
        with pytest.raises(err, match=msg):
            d.reshape(*bad)
    with pytest.raises(ValueError, match="C-ordered; order='F'"):
        d.reshape(24, order="F")
    with pytest.raises(ValueError, match="C-ordered"):
        d.ravel("F")
    with pytest.raises(ValueError, match="cannot reshape array of size 0"):
        _bare((0, 3)).reshape(0, -1)


# ---- with the library's manifest, over the CPU stand-ins -----------------------------------------------

@pytest.fixture
def numpy_names(monkeypatch):
    """The ops of libew/ops.toml under numpy's names as the spec's `ufunc` field gives them, also
    with a library built before that field existed (sub is numpy's subtract, ...)."""
    if not any(getattr(op, "ufunc", None) for op in library.get().manifest.ops):
        names = {"sub": "subtract", "mul": "multiply", "div": "divide"}
        monkeypatch.setattr(library.Op, "ufunc", property(lambda op: names.get(op.name)), raising=False)
    ufuncs._forget()
    yield
    ufuncs._forget()


@pytest.fixture
def lib(fakes, numpy_names):
    return fakes


def _ops_of(ufunc):
    e = ufunc_op(ufunc)
    return None if e is None else library.get().manifest.op(e.__name__)


def _sample(ufunc, info, shape, rng, second=False):
    """Values that make numpy's answer exact enough to compare on the stand-ins: small integers
    where the ufunc is integral or discontinuous, nonzero divisors and non-negative exponents and
    shift counts for integers."""
    npd = info.np
    if npd == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if info.kind == "int" or ufunc in ("floor_divide", "remainder"):
        if second and ufunc in ("floor_divide", "remainder", "divide"):
            return (rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)).astype(npd)
        if second and ufunc in ("power", "left_shift", "right_shift"):
            return rng.integers(0, 5, shape).astype(npd)
        return rng.integers(-50, 50, shape).astype(npd)
    if ufunc == "power":
        return (rng.uniform(0.5, 2, shape) if not second else rng.uniform(-3, 3, shape)).astype(npd)
    return rng.uniform(-4, 4, shape).astype(npd) if not second else rng.uniform(0.5, 4, shape).astype(npd)


def _same(got, want, what=""):
    assert isinstance(got, DeviceArray), what
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    h = got.get()
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(h, want, err_msg=what)
    else:
        tol = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}[dt.lookup(want.dtype).name]
        np.testing.assert_allclose(h.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, err_msg=what)


def _dtypes_of(op):
    return [k.dtype for k in op.kernels if k.dtype.name in ("float32", "float16", "int32", "float64", "bool",
                                                            "bfloat16", "int64")]


@needs_lib
@pytest.mark.parametrize("o", OPERATORS, ids=lambda o: o.method)
def test_operators_agree_with_numpy(lib, o, rng):
    """Every operator whose ufunc the library has, on each dtype of its op: DeviceArray with
    DeviceArray, with a broadcast numpy array, with Python numbers both ways (NEP 50: the
    array's dtype stays), in place; one the library lacks is a TypeError naming the op to add."""
    op = _ops_of(o.ufunc)
    d = _bare()
    if op is None:
        with pytest.raises(TypeError, match=rf"operator {re.escape(o.symbol)} needs an op for numpy's '{o.ufunc}'"
                                            rf".*name = \"{o.ufunc}\""):
            getattr(d, o.methods[0])() if o.arity == 1 else getattr(d, o.methods[0])(d)
        return
    for info in _dtypes_of(op):
        a = _sample(o.ufunc, info, (5, 7), rng)
        b = _sample(o.ufunc, info, (5, 7), rng, second=True)
        x = pyew.asarray(a)
        f = getattr(np.ndarray, o.methods[0])
        if o.arity == 1:
            _same(getattr(x, o.methods[0])(), f(a), f"{o.symbol} {info.name}")
            continue
        what = f"{o.symbol} {info.name}"
        _same(getattr(x, o.methods[0])(pyew.asarray(b)), f(a, b), what)
        _same(getattr(x, o.methods[0])(b[0]), f(a, b[0]), what + " broadcast numpy")
        k = 2 if info.kind != "float" or o.ufunc in ("floor_divide", "remainder") else 0.5
        if info.np != np.bool_:
            _same(getattr(x, o.methods[0])(k), f(a, k), what + " number")
        if o.reflected and info.np != np.bool_:
            # k <op> b: b is the sample that may be a divisor or an exponent
            _same(getattr(pyew.asarray(b), o.methods[1])(k), getattr(np.ndarray, o.methods[1])(b, k),
                  what + " reflected")
        if o.reflected:
            y = pyew.asarray(a)
            want = a.copy()
            try:
                getattr(want, o.methods[2])(b)
            except TypeError:                           # numpy refuses the cast back (int /= int)
                with pytest.raises(TypeError, match="same_kind"):
                    getattr(y, o.methods[2])(pyew.asarray(b))
                _same(y, a, what + " refused in place")
                continue
            ptr = y.ptr
            assert getattr(y, o.methods[2])(pyew.asarray(b)) is y and y.ptr == ptr
            _same(y, want, what + " in place")


@needs_lib
def test_missing_op_names_the_op_and_how_to_add_it(lib, monkeypatch):
    monkeypatch.setattr(ufuncs, "_table", types.MappingProxyType({}))
    ufuncs._entries.clear()
    d = pyew.asarray(np.ones(3, np.float32))
    for call, what in [(lambda: d + d, "operator \\+"), (lambda: 2 - d, "operator -"), (lambda: -d, "operator -x"),
                       (lambda: d == d, "operator =="), (lambda: np.exp(d), "np.exp on a DeviceArray"),
                       (lambda: np.add(d, d, out=d), "np.add on a DeviceArray")]:
        with pytest.raises(TypeError, match=rf"{what} needs an op for numpy's '\w+', and the loaded library "
                                            rf"\(.*libew.so\) has none: add an \[\[op\]\] with name = .* make all"):
            call()
    with pytest.raises(TypeError, match="operator \\+ needs an op for numpy's 'add'"):
        d += d
    assert ufunc_op("add") is None


@needs_lib
def test_ufunc_op_and_the_table(lib):
    table = ufuncs.ufunc_table()
    assert table["add"] == "add" and ufunc_op("add") is pyew.add and ufunc_op(np.add) is pyew.add
    assert ufunc_op("subtract") is pyew.sub and ufunc_op(np.subtract) is pyew.sub
    assert ufunc_op("divide") is pyew.div and ufunc_op("true_divide") is pyew.div   # numpy's alias
    assert ufunc_op("no_such_ufunc") is None
    with pytest.raises(TypeError):
        table["x"] = "y"                      # read-only


@needs_lib
def test_array_ufunc_calls(lib, rng):
    """np.<ufunc> with DeviceArrays runs the op on the device: numpy operands uploaded, Python and
    numpy scalars as in numpy, out= as numpy's protocol gives it (a tuple), returning out itself."""
    a = rng.standard_normal((4, 6)).astype(np.float32)
    t = rng.standard_normal(6).astype(np.float32)
    d = pyew.asarray(a)
    _same(np.add(d, t), a + t)
    _same(np.add(t, d), t + a)
    _same(np.add(d, 1.0), a + np.float32(1))
    _same(np.multiply(np.float16(2), pyew.asarray(a.astype(np.float16))), np.float16(2) * a.astype(np.float16))
    _same(np.true_divide(d, 4.0), a / np.float32(4))
    _same(np.ones(6, np.float32) + d, 1 + a)            # ndarray's operator defers to DeviceArray
    _same(t - d, t - a)
    _same(np.float32(3) * d, np.float32(3) * a)
    assert np.add(d, t, out=d) is d
    _same(d, a + t)
    o = pyew.empty((4, 6), "float32")
    assert np.subtract(d, 1, o) is o and np.multiply(d, 2.0, out=(o,)) is o
    _same(o, (a + t) * 2)
    with pytest.raises(TypeError, match="out must be a GPU array"):
        np.add(d, 1.0, out=np.empty((4, 6), np.float32))       # no silent copy back to the host
    _same(np.add(d, 1.0, where=True, casting="same_kind", order="K", dtype=None, subok=True), a + t + 1)
    # keywords at values that change nothing: dtype= the result's own, order 'C', subok=False
    _same(np.add(d, 1, dtype=np.float32, order="C", subok=False), a + t + 1)
    _same(np.exp(d, dtype="float32"), np.exp(a + t))
    u = pyew.asarray(np.arange(4, dtype=np.uint8))      # numpy's uint8 result; pyew's is int32
    with pytest.raises(TypeError, match=r"dtype=uint8\) is not supported.*computes these inputs in int32"):
        np.add(u, u, dtype=np.uint8)
    assert np.add(u, u).dtype == np.int32


@needs_lib
def test_nep50_weak_scalars(lib, rng):
    a = rng.standard_normal(10).astype(np.float16)
    h = pyew.asarray(a)
    for got, want in [(h * 0.5, a * 0.5), (0.5 * h, 0.5 * a), (h + 3, a + 3), (h - 2.0, a - 2.0), (1 - h, 1 - a),
                      (h / 3, a / 3)]:
        assert got.dtype == np.float16
        _same(got, want)
    i = np.arange(-5, 5, dtype=np.int32)
    _same(pyew.asarray(i) * 0.5, i * 0.5)             # float64, as numpy
    _same(pyew.asarray(i) * 3, i * 3)
    _same(pyew.asarray(i) / 2, i / 2)
    b = a.astype(BF16)
    _same(pyew.asarray(b) * 2, b * 2)


@needs_lib
def test_in_place_follows_numpys_casting(lib, rng):
    """In-place and out= take the result where numpy would ('same_kind': a float64 result into a
    float32 array, converted on the GPU) and refuse what numpy refuses, leaving the array as it was."""
    a = rng.standard_normal(50).astype(np.float32)
    w = rng.standard_normal(50)
    x = pyew.asarray(a)
    x += pyew.asarray(w)                               # float64 result into float32
    want = a.copy()
    want += w
    _same(x, want)
    x -= w                                              # a numpy float64 operand
    want -= w
    _same(x, want)
    i = np.arange(50, dtype=np.int32)
    xi = pyew.asarray(i)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'multiply' output from dtype\\('float64'\\) to "
                                        "dtype\\('int32'\\) with casting rule 'same_kind'"):
        xi *= 1.5
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float64'\\) to "
                                        "dtype\\('int32'\\)"):
        np.add(xi, w, out=xi)
    _same(xi, i)
    xi += 2**20
    _same(xi, i + 2**20)
    with pytest.raises(ValueError, match="non-broadcastable output operand with shape \\(50,\\)"):
        x += np.ones((3, 50), np.float32)               # the op's own check of out=
    with pytest.raises(ValueError, match="non-broadcastable output operand with shape \\(50,\\) doesn't match the "
                                         "broadcast shape \\(3, 50\\)"):
        x += pyew.asarray(np.ones((3, 50)))             # float64 into float32: checked before it runs
    _same(x, want)


@needs_lib
def test_in_place_over_a_shifted_view_reads_before_it_writes(lib, rng):
    """x[1:] += x[:-1]: numpy computes as if the inputs were copied first; so does pyew (the
    result goes to a new array, then into the view)."""
    a = rng.standard_normal(1000).astype(np.float32)
    x = pyew.asarray(a)
    v = x[1:]
    v += x[:-1]
    want = a.copy()
    want[1:] += want[:-1]
    _same(x, want)
    y = pyew.asarray(a)
    assert np.add(y[:-1], y[1:], out=y[1:]) is not None
    want = a.copy()
    np.add(want[:-1], want[1:], out=want[1:])
    _same(y, want)
    z = pyew.asarray(a)
    assert np.add(z, z, out=z) is z                    # exactly the input: the op's own in-place
    _same(z, a + a)


@needs_lib
def test_comparisons_give_arrays(lib, rng):
    a = rng.integers(0, 3, 20).astype(np.float32)
    d = pyew.asarray(a)
    for o in OPERATORS[12:18]:
        if _ops_of(o.ufunc) is None:
            with pytest.raises(TypeError, match=f"numpy's '{o.ufunc}'"):
                getattr(d, o.methods[0])(1.0)
            continue
        got = getattr(d, o.methods[0])(1.0)
        _same(got, getattr(np.ndarray, o.methods[0])(a, 1.0), o.symbol)
        _same(getattr(np, o.ufunc)(1.0, d), getattr(np, o.ufunc)(1.0, a), o.symbol + " reflected")


@needs_lib
def test_reshape_views_share_memory_and_flatten_copies(lib, rng):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    d = pyew.asarray(a)
    r = d.reshape(3, 8)
    f = d.flatten()
    c = d.reshape(24, copy=True)
    assert f.ptr != d.ptr and c.ptr != d.ptr and f.shape == (24,)
    d += 1.0
    _same(r, (a + 1).reshape(3, 8))                    # a view sees the write
    _same(d.ravel(), (a + 1).ravel())
    _same(f, a.ravel())                                 # the copies do not
    _same(c, a.ravel())
    _same(d[2:4].reshape(-1), (a + 1)[2:4].reshape(-1))
    e = pyew.empty((0, 5), "float16").flatten()
    assert e.shape == (0,) and e.dtype == np.float16


@needs_lib
def test_scalars_truth_and_iteration(lib):
    one = pyew.asarray(np.array([2.5], np.float32))
    assert float(one[0]) == 2.5 and int(pyew.asarray(np.array(7, np.int32))) == 7
    assert bool(pyew.asarray(np.array(1.0))) is True and bool(pyew.asarray(np.zeros((1, 1), np.int32))) is False
    with pytest.raises(TypeError, match="only 0-dimensional"):
        float(one)                                      # numpy 2: one element, but not 0-d
    with pytest.raises(ValueError, match="empty array is ambiguous"):
        bool(pyew.empty(0))
    d = pyew.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    rows = list(d)
    assert len(rows) == len(d) == 3 and all(isinstance(r, DeviceArray) and r.shape == (4,) for r in rows)
    np.testing.assert_array_equal(rows[2].get(), [8, 9, 10, 11])


@needs_lib
@pytest.mark.parametrize("shape", [(5,), (2, 3), (), (0,), (0, 3), (2000,), (50, 40), (3, 1000), (1000, 3),
                                   (7, 8, 9, 10), (2, 1, 700), (6, 6, 6, 6)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "bfloat16", "float64"])
def test_printing_is_numpys(lib, shape, dtype, rng):
    """str and repr print the values as numpy prints the whole array (summarised by its
    printoptions), with the shape where numpy gives it, the dtype and the GPU; a summarised array
    copies only what is shown."""
    a = np.asarray(rng.standard_normal(shape) * 100).astype(dt.BY_NAME[dtype].np)
    d = pyew.asarray(a)
    cuda = lib[0]
    cuda.copy_log.clear()
    assert str(d) == str(a)
    if a.size > 1000:
        shown = int(np.prod([min(n, 7) for n in shape]))
        assert sum(n for _, _, n in cuda.copy_log) <= shown * a.itemsize
    prefix = "DeviceArray("
    body = np.array2string(a, separator=", ", prefix=prefix, suffix=")")
    sub = type("DeviceArray", (np.ndarray,), {})
    assert repr(a.view(sub)).startswith(prefix + body)          # numpy's repr under that name, up to the extras
    extras = ([f"shape={shape}"] if a.size > 1000 or (a.size == 0 and shape != (0,)) else []) + \
        [f"dtype={dtype}", "device=0"]
    got = repr(d)
    assert got.startswith(prefix + body + ",") and got.endswith(", ".join(extras) + ")"), got
    last = (prefix + body + ",").rsplit("\n", 1)[-1]
    spacer = "\n" + " " * len(prefix) if len(last) + len(", ".join(extras) + ")") > 75 else " "
    assert got == prefix + body + "," + spacer + ", ".join(extras) + ")"


@needs_lib
def test_printing_follows_printoptions(lib, rng):
    a = rng.standard_normal(100).astype(np.float32)
    d = pyew.asarray(a)
    with np.printoptions(threshold=10, edgeitems=2, precision=3):
        assert str(d) == str(a) and "..." in str(d) and "shape=(100,)" in repr(d)
    with np.printoptions(threshold=1000, precision=2):
        assert str(d) == str(a) and "..." not in repr(d)
    assert repr(pyew.asarray(np.array(1.5, np.float32))) == "DeviceArray(1.5, dtype=float32, device=0)"
    assert repr(pyew.asarray(np.array([1, 2], np.int64))) == "DeviceArray([1, 2], dtype=int64, device=0)"


# ---- assignment, numpy results into GPU out=, the order of uses across streams -------------------

@needs_lib
def test_item_and_slice_assignment(lib):
    """d[a:b] += 1 writes in place (Python then stores the view back, which does nothing); d[i] = v
    and d[a:b] = values assign with numpy's casting and broadcasting."""
    d = pyew.asarray(np.arange(1, 7, dtype=np.float32))
    d[1:] += 1
    d[0] += 10
    np.testing.assert_array_equal(d.get(), [11, 3, 4, 5, 6, 7])
    d[2] = 2.5
    d[3:5] = np.array([-1, -2])                       # ints cast to float32
    d[5:] = [9]
    np.testing.assert_array_equal(d.get(), [11, 3, 2.5, -1, -2, 9])
    d[:2] = pyew.asarray(np.array([7, 8], np.float64))    # another dtype on the GPU: cast
    d[:0] = 5                                             # nothing to write
    np.testing.assert_array_equal(d.get(), [7, 8, 2.5, -1, -2, 9])
    i = pyew.asarray(np.zeros((2, 3), np.int32))
    i[1] = 2.9                                            # numpy's unsafe cast: 2
    i[0] = [1, 2, 3]
    np.testing.assert_array_equal(i.get(), [[1, 2, 3], [2, 2, 2]])
    b = pyew.asarray(np.zeros(3, bool))
    b[1:] = True
    np.testing.assert_array_equal(b.get(), [False, True, True])
    m = pyew.asarray(np.arange(6, dtype=np.float32))
    m[1:] = m[:-1]                                   # overlapping: numpy's result (a memmove)
    np.testing.assert_array_equal(m.get(), [0, 0, 1, 2, 3, 4])
    m[...] = 2                                       # the whole array, and a 0-d one
    z = pyew.asarray(np.float32(1.5))
    z[()] = 4
    np.testing.assert_array_equal(m.get(), [2] * 6)
    assert z.shape == () and float(z) == 4 and m[...].shape == (6,)
    g = pyew.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    g[:] = g[0]                                      # a GPU array broadcast into the view, as numpy does
    g[1][1:] = pyew.asarray(np.float64(7))          # a 0-d one of another dtype
    np.testing.assert_array_equal(g.get(), [[0, 1, 2], [0, 7, 7]])


@needs_lib
def test_bad_assignments_leave_the_array_as_it_was(lib):
    d = pyew.asarray(np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match="could not assign"):
        d[1:3] = np.arange(3)
    with pytest.raises(ValueError, match=r"could not broadcast a GPU array of shape \(3,\) into a view of shape \(2"):
        d[1:3] = pyew.asarray(np.arange(3, dtype=np.float32))
    with pytest.raises(TypeError, match="could not assign dict"):
        d[0] = {}
    i = pyew.asarray(np.arange(4, dtype=np.int32))
    with pytest.raises(OverflowError):              # numpy's errors, not a wrapped value
        i[2] = 2 ** 40
    with pytest.raises(ValueError):
        i[0] = float("nan")
    np.testing.assert_array_equal(i.get(), np.arange(4))
    with pytest.raises(IndexError):
        d[7] = 1
    np.testing.assert_array_equal(d.get(), np.arange(4, dtype=np.float32))


@needs_lib
def test_numpy_inputs_into_a_gpu_out_of_another_dtype(lib):
    out = pyew.empty(4, "float64")
    r = np.add(np.ones(4, np.float32), 1, out=out)
    assert r is out
    np.testing.assert_array_equal(out.get(), [2, 2, 2, 2])


@needs_lib
def test_uses_of_an_array_on_two_streams_run_in_order(lib, monkeypatch):
    """An array written on the default stream and read on a pyew.Stream: the stream waits for
    the default one first (on the GPU), once; back on the default stream, the other way."""
    waits = []
    real = rt.stream_wait
    monkeypatch.setattr(rt, "stream_wait", lambda w, o: waits.append((w.handle, o.handle)) or real(w, o))
    a = pyew.asarray(np.arange(4, dtype=np.float32))
    with pyew.Stream() as s:
        b = pyew.mul(a, a)
        pyew.mul(a, a)
    assert waits == [(s.handle, 0)]
    waits.clear()
    c = pyew.add(a, b)
    assert (0, s.handle) in waits
    np.testing.assert_array_equal(c.get(), np.arange(4) + np.arange(4) ** 2)


@needs_lib
def test_reads_on_two_streams_overlap_and_a_write_waits_for_both(lib, monkeypatch):
    """Weights read by calls alternating between two streams: each stream waits once for the
    weights' write, not for the other's reads; a write into them waits for both readers."""
    waits = []
    real = rt.stream_wait
    monkeypatch.setattr(rt, "stream_wait", lambda w, o: waits.append((w.handle, o.handle)) or real(w, o))
    w = pyew.asarray(np.arange(4, dtype=np.float32))
    xs = [pyew.asarray(np.full(4, i, np.float32)) for i in range(6)]
    s1, s2 = pyew.Stream(), pyew.Stream()
    for i, x in enumerate(xs):
        with (s1 if i % 2 else s2):
            pyew.mul(w, x)
    # w once per stream, each x_i once: all on the default stream, where they were written;
    # none between s1 and s2
    assert sorted(waits) == sorted([(s1.handle, 0)] * 4 + [(s2.handle, 0)] * 4)
    waits.clear()
    pyew.add(w, 1.0, out=w)                          # a write on the default stream
    assert sorted(waits) == sorted([(0, s1.handle), (0, s2.handle)])


def test_a_read_only_array_is_not_exported_as_writable(fake_runtime):
    ro = DeviceArray(array.Foreign(object(), True, 0), 0x1000, (4,), dt.BY_NAME["float32"])
    with pytest.raises(BufferError, match="read-only"):
        ro.__dlpack__()
    with pytest.raises(ValueError, match="read-only"):
        ro[0] = 1


def test_byte_swapped_data_gets_a_hint():
    with pytest.raises(TypeError, match=r"byte-swapped: pass a.astype\(a.dtype.newbyteorder\('='\)\)"):
        array.lookup_dtype(np.dtype(">f4"))


@needs_lib
def test_bool_inputs_take_numpys_loops(lib):
    """An op without a bool kernel runs bools in the kernel numpy's loop points to, not the
    smallest safe dtype: floor_divide's loop is int8 (so int32 here), sqrt's float16; subtract
    and negative of bools are numpy's TypeError."""
    b = pyew.asarray(np.array([True, False, True]))
    h = np.array([True, False, True])
    assert ufunc_op("floor_divide") is not None and ufunc_op("sqrt") is not None
    for name, args in (("floor_divide", (b, b)), ("sqrt", (b,)), ("true_divide", (b, b))):
        if ufunc_op(name) is None:
            continue
        got = getattr(np, name)(*args)
        with np.errstate(all="ignore"):
            want = getattr(np, name)(*[h] * len(args))
        if want.dtype == np.int8:
            want = want.astype(np.int32)            # pyew's smallest int
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got.get(), want)
    for name, args in (("subtract", (b, b)), ("negative", (b,))):
        if ufunc_op(name) is not None:
            with pytest.raises(TypeError, match=f"numpy's {name} refuses bool"):
                getattr(np, name)(*args)


@needs_lib
def test_in_place_with_a_list_casts_as_numpy(lib):
    d = pyew.asarray(np.arange(4, dtype=np.float32))
    d += [1, 2, 3, 4]                     # int64 values into float32: 'same_kind', as numpy
    np.testing.assert_array_equal(d.get(), [1, 3, 5, 7])
    i = pyew.asarray(np.arange(4, dtype=np.int32))
    i += [1, 2, 3, 4]
    np.testing.assert_array_equal(i.get(), [1, 3, 5, 7])
    with pytest.raises(TypeError):
        i += [0.5, 1, 2, 3]               # float into int: numpy refuses too
    np.testing.assert_array_equal(i.get(), [1, 3, 5, 7])


@needs_lib
def test_comparing_ints_with_a_python_int_they_cannot_hold(lib):
    """numpy 2 answers int32 == 2**40 (False) instead of refusing the number: pyew compares in int64,
    and past int64 (2**70) against an infinity in float64, exact for every int64 element; a numpy
    array on the host likewise. Arithmetic still refuses such a number, as numpy does."""
    h = np.array([-5, 0, 7], np.int32)
    d = pyew.asarray(h)
    big = np.array([-(2 ** 63), 2 ** 62 + 1, 2 ** 63 - 1], np.int64)
    for v in (2 ** 40, -(2 ** 40), 2 ** 63, -(2 ** 63) - 1, 2 ** 70, -(2 ** 200)):
        for name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
            if ufunc_op(name) is None:
                continue
            for a, x in ((d, h), (pyew.asarray(big), big), (big, big)):
                got = getattr(np, name)(a, v) if isinstance(a, pyew.DeviceArray) else getattr(pyew, name)(a, v)
                assert got.dtype == np.bool_
                got = got.get() if isinstance(got, pyew.DeviceArray) else got
                np.testing.assert_array_equal(got, getattr(np, name)(x, v), err_msg=f"{name} {v} {x.dtype}")
    g = pyew.asarray(big)
    np.testing.assert_array_equal((g > 2 ** 62).get(), big > 2 ** 62)    # in range: exact, not float64
    with pytest.raises(OverflowError):
        pyew.add(d, 2 ** 40)                        # arithmetic refuses it, as numpy does
    with pytest.raises(OverflowError, match="out of bounds"):
        pyew.equal(2 ** 63, 2 ** 64)                # two would both stand as one infinity: refused
    for name, a, b in (("equal", 2 ** 64, 5), ("less", 5, 2 ** 64), ("less", np.int64(5), 2 ** 64),
                       ("less", -(2 ** 64), 5)):        # one, with numbers alone: answered
        assert getattr(pyew, name)(a, b) == getattr(np, name)(a, b), (name, a, b)


def test_indexing_refuses_bools_and_ufunc_at_is_named():
    d = _bare((4,))
    with pytest.raises(IndexError, match="not True"):
        d[True]
    with pytest.raises(TypeError, match=r"add\.at is not supported"):
        np.add.at(d, slice(0, 2), 1)


@needs_lib
def test_comparing_with_none_is_elementwise_as_numpy(lib):
    d = pyew.asarray(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal((d == None).get(), np.arange(3) == None)     # noqa: E711
    np.testing.assert_array_equal((d != None).get(), np.arange(3) != None)     # noqa: E711
    assert (d == None).dtype == np.bool_                                        # noqa: E711


@needs_lib
def test_copies_and_pickles_are_copies(lib):
    import copy
    import pickle
    a = np.arange(4, dtype=np.float32)
    d = pyew.asarray(a)
    for c in (copy.copy(d), copy.deepcopy(d), pickle.loads(pickle.dumps(d))):
        assert isinstance(c, DeviceArray) and c.ptr != d.ptr and c.dtype == d.dtype
        c[0] = 100
        np.testing.assert_array_equal(d.get(), a)
        assert c.get()[0] == 100


@needs_lib
def test_astype_takes_numpys_arguments(lib):
    d = pyew.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert d.astype(np.float32, copy=False) is d and d.astype("float32").ptr != d.ptr
    assert d.astype("float64", "K").dtype == np.float64 and d.astype("float64", order="C").shape == (2, 3)
    with pytest.raises(TypeError, match="according to the rule 'safe'"):
        d.astype("int32", casting="safe")
    assert d.astype("float64", casting="safe").dtype == np.float64
    with pytest.raises(ValueError, match="order='F' is not supported"):
        d.astype("float64", order="F")
    assert d.ravel("K").shape == (6,) and d[0].ravel("F").shape == (3,)
    assert d.flatten("K").shape == (6,) and d[0].flatten("F").shape == (3,)
    np.testing.assert_array_equal(d.flatten("A").get(), np.arange(6))
    with pytest.raises(ValueError, match="order='F' is not supported"):
        d.flatten("F")
    # copy takes numpy's order (a stream only by keyword)
    for c in (d.copy("C"), d.copy(order="K"), d[0].copy("F"), d.copy(stream=None)):
        assert c.ptr != d.ptr
    np.testing.assert_array_equal(d.copy("A").get(), np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match="order='F' is not supported"):
        d.copy("F")
    assert d.copy("c").shape == (2, 3)
    with pytest.raises(TypeError, match=r"a stream goes by keyword: copy\(stream=s\)"):
        d.copy(pyew.Stream())


@needs_lib
def test_format_as_numpy(lib):
    """f"{d:.3f}" formats a 0-d array as its scalar; other arrays take only an empty spec."""
    z = pyew.asarray(np.float32(1.5))
    assert f"{z:.3f}" == "1.500" and format(pyew.asarray(np.int32(7)), "03d") == "007"
    d = pyew.asarray(np.arange(3, dtype=np.float32))
    assert f"{d}" == str(d) == str(np.arange(3, dtype=np.float32))
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{d:.2f}"


@needs_lib
def test_ufuncs_of_other_libraries_are_refused(lib):
    """A ufunc that is not numpy's (numba's @vectorize may name one relu or gelu) does not run the
    op of its name: a TypeError names it."""
    d = pyew.asarray(np.arange(3, dtype=np.float32))
    from pyew import ufuncs
    named_relu = type("U", (), {"__name__": "relu", "nin": 1, "nout": 1})()     # as numpy hands it over
    with pytest.raises(TypeError, match="ufunc 'relu' is neither numpy's nor scipy.special's"):
        ufuncs.array_ufunc(named_relu, "__call__", (d,), {})
    with pytest.raises(TypeError, match="neither numpy's"):
        np.frompyfunc(lambda v: v * 0, 1, 1)(d)
    np.testing.assert_array_equal(np.negative(d).get(), [0, -1, -2])


@needs_lib
def test_python_number_subclasses_are_typed_as_numpy_types_them(lib):
    """An IntEnum is an int64 to numpy (not a weak Python int)."""
    import enum

    class E(enum.IntEnum):
        A = 3
    d = pyew.asarray(np.ones(2, np.int32))
    got = d + E.A
    assert got.dtype == (np.ones(2, np.int32) + E.A).dtype == np.int64
    np.testing.assert_array_equal(got.get(), [4, 4])


@needs_lib
def test_index_and_in_as_numpy(lib):
    z = pyew.asarray(np.array(2, np.int32))
    assert [10, 11, 12][z] == 12 and list(range(z)) == [0, 1]
    with pytest.raises(TypeError, match="only integer scalar arrays"):
        [1, 2][pyew.asarray(np.array([1], np.int32))]
    with pytest.raises(TypeError, match="only integer scalar arrays"):
        [1, 2][pyew.asarray(np.array(1.0))]
    d = pyew.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert 4 in d and 7 not in d


@needs_lib
def test_comparing_with_a_string_is_elementwise_as_numpy(lib):
    d = pyew.asarray(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal((d == "a").get(), [False] * 3)
    np.testing.assert_array_equal((d != b"a").get(), [True] * 3)
    for other in (object(), None):                     # no element equals a plain object, either way round
        for got in (d == other, other == d, np.equal(d, other), np.equal(other, d)):
            assert isinstance(got, pyew.DeviceArray)
            np.testing.assert_array_equal(got.get(), [False] * 3)
        np.testing.assert_array_equal((d != other).get(), [True] * 3)
        np.testing.assert_array_equal(np.not_equal(d, other).get(), [True] * 3)


@needs_lib
def test_power_operator_takes_numpys_fast_paths(lib, monkeypatch):
    """d ** 2, d ** -1 and d ** 0.5 of a float array run square, reciprocal and sqrt, as numpy's
    operator does (exact); an integer array to a negative integer power is numpy's ValueError."""
    from pyew import ufuncs

    class Uncached(dict):
        def __setitem__(self, k, v):
            pass
    ran = []
    real = ufuncs._entry
    monkeypatch.setattr(ufuncs, "_entries", Uncached())
    monkeypatch.setattr(ufuncs, "_entry", lambda name: ran.append(name) or real(name))
    x = np.array([0.25, 4.0, 9.0], np.float32)
    d = pyew.asarray(x)
    for e, name in ((2, "square"), (-1, "reciprocal"), (0.5, "sqrt"), (3, "power"), (2.0, "power")):
        ran.clear()
        np.testing.assert_allclose((d ** e).get(), x ** e, rtol=1e-6)
        assert ran[0] == name, (e, ran)
    d **= 2
    np.testing.assert_array_equal(d.get(), x * x)
    i = pyew.asarray(np.arange(1, 4, dtype=np.int32))
    b = pyew.asarray(np.array([True, False]))
    o = pyew.asarray(np.full(3, 5, np.int64))

    def into_o():
        i2 = i.copy()
        i2 **= np.array([1, -1, 1])
    # exponents on the host are checked, as numpy checks them: numbers, arrays, lists; bool bases
    for bad in (lambda: i ** -1, lambda: np.power(i, -2), lambda: i ** [-1], lambda: i ** np.array(-1),
                lambda: b ** -1, lambda: np.power(np.arange(3, dtype=np.int32), -1, out=o), into_o):
        with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
            bad()
    assert (o.get() == 5).all()
    np.testing.assert_array_equal((i ** 2).get(), [1, 4, 9])
    np.testing.assert_allclose((i ** [-1.0]).get(), [1, 0.5, 1 / 3])        # a float exponent: float64
    # a GPU array of exponents is not read back: the op's own rule (1 / x^|y| toward zero)
    np.testing.assert_array_equal((i ** pyew.asarray(np.array([-1], np.int32))).get(), [1, 0, 0])


@needs_lib
def test_out_as_numpys(lib):
    """out= of another dtype is written with casting 'same_kind' (a refused cast is numpy's
    TypeError, nothing computed or written); out=(o,); a numpy out the result broadcasts to;
    a GPU out overlapping an input in part; 0-d operands give numpy scalars."""
    x = np.arange(6, dtype=np.float32)
    o64 = np.full(6, np.nan)
    assert pyew.add(x, x, out=o64) is o64
    np.testing.assert_array_equal(o64, x + x)
    o32 = np.full(6, -1, np.int32)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float32'\\) to "
                                        "dtype\\('int32'\\)"):
        pyew.add(x, x, out=o32)
    assert (o32 == -1).all()
    o = np.zeros(6, np.float32)
    assert pyew.add(x, 1, out=(o,)) is o and (o == x + 1).all()
    wide = np.zeros((2, 6), np.float32)
    assert pyew.add(x, 1, out=wide) is wide
    np.testing.assert_array_equal(wide, np.broadcast_to(x + 1, (2, 6)))
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        pyew.add(x, 1, out=np.zeros(3, np.float32))
    d = pyew.asarray(x)
    gw = pyew.empty((2, 6), "float32")                  # numpy broadcasts into out=, on the GPU too
    assert pyew.add(d, 1, out=gw) is gw
    np.testing.assert_array_equal(gw.get(), np.broadcast_to(x + 1, (2, 6)))
    g3 = pyew.asarray(np.full(3, -1, np.float32))
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        pyew.add(d, 1, out=g3)
    assert (g3.get() == -1).all()
    g64 = pyew.empty(6, "float64")
    assert pyew.add(d, d, out=g64) is g64
    np.testing.assert_array_equal(g64.get(), x + x)
    assert pyew.evaluate("d * 2", out=g64) is g64
    np.testing.assert_array_equal(g64.get(), x * 2)
    pyew.add(d[1:], d[:-1], out=d[1:])
    np.testing.assert_array_equal(d.get(), np.concatenate([[0], x[1:] + x[:-1]]))
    r = pyew.exp(np.float32(1))
    assert type(r) is np.float32 and abs(r - np.exp(np.float32(1))) <= 1e-6
    assert type(pyew.add(1, 2)) is np.int64 and pyew.add(1, 2) == 3


@needs_lib
def test_masked_arrays_are_refused_not_unmasked(lib):
    m = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0], dtype=np.float32)
    for call in (lambda: pyew.exp(m), lambda: pyew.add(np.ones(3, np.float32), m),
                 lambda: pyew.evaluate("m + 1", {"m": m})):
        with pytest.raises(TypeError, match="masked array, and pyew has no masks.*a.filled"):
            call()


@needs_lib
def test_formulas_of_0d_operands_alone_give_numpys_scalar(lib):
    """numexpr takes 0-d arrays and numpy scalars alone; numpy's answer is a scalar of their type."""
    r = pyew.evaluate("x + 1", {"x": np.array(2.0)})
    assert type(r) is np.float64 and r == 3.0
    r = pyew.evaluate("x * y", {"x": np.float32(2), "y": 3})
    assert type(r) is np.float32 and r == 6.0
    o = np.zeros((), np.float32)
    assert pyew.evaluate("x * y", {"x": np.float32(2), "y": 3}, out=o) is o and o == 6.0
    with pytest.raises(pyew.FormulaError, match="no array operand"):
        pyew.evaluate("y * 2", {"y": 3})                 # Python numbers alone: Python's arithmetic


@needs_lib
def test_an_array_read_on_one_stream_wrapped_anew_each_call_remembers_it_once(lib):
    """A torch or CuPy stream wrapped in a new pyew.ExternalStream for each call (as pyew.dask does
    per chunk) is one reader of a long-lived array, not one per call."""
    w = pyew.asarray(np.ones(64, np.float32))
    x = pyew.asarray(np.ones(64, np.float32))
    for _ in range(50):
        with pyew.ExternalStream(12345):
            pyew.add(x, w)
    assert len(w.buffer.readers) == 1 and len(w.buffer.others) == 1
