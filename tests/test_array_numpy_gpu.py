"""DeviceArray as numpy users expect it, on the GPU: every Python operator and every numpy ufunc the
loaded library implements (pyew.ufuncs), on each dtype of its op, against numpy's float64 (int64,
bool) reference on fresh random data with special values, tails, misaligned views, n = 0 and
poisoned outputs; reflected forms with Python numbers (NEP 50), in-place forms, out= aliasing,
bool results, and the error paths (ufunc methods, keywords, missing ops, implicit host copies)."""
from __future__ import annotations

import types

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew import ufuncs
from pyew.array import DeviceArray
from pyew.ufuncs import OPERATORS

from .helpers import manifest_ops, poison
from .reference import assert_matches

pytestmark = pytest.mark.gpu

SIZES = (0, 1, 7, 4097, 65536 + 3)


def _table() -> dict[str, object]:
    """numpy ufunc name -> the library's op (empty where the library does not load)."""
    ops = {op.name: op for op in manifest_ops("map")}
    return {u: ops[name] for u, name in ufuncs.derive(ops.values()).items()}


TABLE = _table()
UFUNC_CASES = [pytest.param(u, k.dtype.name, id=f"{u}-{k.dtype.name}") for u, op in TABLE.items()
               if isinstance(getattr(np, u, None), np.ufunc) and getattr(np, u).nout == 1
               and getattr(np, u).nin == len(op.inputs) for k in op.kernels]
OPERATOR_CASES = [pytest.param(o, k.dtype.name, id=f"{o.method}-{k.dtype.name}") for o in OPERATORS
                  if o.ufunc in TABLE for k in TABLE[o.ufunc].kernels]


def _wide(a: np.ndarray) -> np.ndarray:
    """The reference's inputs: float64 for floats, int64 for integers, bool as it is."""
    if a.dtype == np.bool_:
        return a
    return a.astype(np.int64 if a.dtype.kind in "iu" else np.float64)


def _specials(info: dt.DType) -> np.ndarray:
    if info.kind == "bool":
        return np.array([True, False], bool)
    if info.kind == "int":
        return np.array([0, 1, -1, 2, -2, 1000, -1000], info.np)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 1e-3, 100.0, -100.0]
    return np.array(vals, np.float64).astype(info.np)


def _inputs(ufunc: str, info: dt.DType, n: int, nin: int, rng) -> list[np.ndarray]:
    """Random inputs of numpy's domain for the ufunc, special values in the first elements (for
    floats also where numpy's answer is a convention: x // 0, remainder(x, inf), ...): integer-valued
    floats where the ufunc is discontinuous (floor_divide, remainder, fmod: a float64 reference is
    then exact); nonzero integer divisors, non-negative integer exponents and shift counts."""
    out = []
    for j in range(nin):
        if info.kind == "bool":
            a = rng.integers(0, 2, n).astype(bool)
        elif info.kind == "int":
            a = rng.integers(-1000, 1000, n).astype(info.np)
            if j == 1 and ufunc in ("power", "left_shift", "right_shift"):
                a = rng.integers(0, 5 if ufunc == "power" else 20, n).astype(info.np)
            elif j == 1 and ufunc in ("floor_divide", "remainder", "fmod", "divide", "true_divide"):
                a = (rng.integers(1, 50, n) * rng.choice([-1, 1], n)).astype(info.np)
            elif ufunc == "power":
                a = rng.integers(-20, 20, n).astype(info.np)
        elif ufunc in ("floor_divide", "remainder", "fmod"):
            a = rng.integers(-60, 60, n).astype(np.float64)
            if j == 1:
                a = np.where(a == 0, 7.0, a)
            a = a.astype(info.np)
        else:
            a = rng.uniform(-6, 6, n).astype(info.np)
        if info.kind != "int" or ufunc not in ("power", "left_shift", "right_shift", "floor_divide", "remainder",
                                               "fmod"):
            s = np.roll(_specials(info), j)[:n]
            a[:len(s)] = s
        if info.kind == "int" and ufunc == "reciprocal":
            a[a == 0] = 1           # numpy's integer 1/0 is whatever the loop's type overflows to
        out.append(a)
    return out


def _poison(a: DeviceArray) -> DeviceArray:
    """helpers.poison, and bool arrays all True (a kernel that writes nothing leaves them so)."""
    if a.itemsize > 1:
        return poison(a)
    if a.size:
        pyew.call.fill(a.ptr, a.size, dt.lookup(a.dtype), 1, pyew.runtime.default_stream(a.device.id))
    return a


def _numpy_dtype(ufunc: str, arrays) -> np.dtype | None:
    """The dtype numpy gives the ufunc on these inputs (None where numpy has no loop for them)."""
    try:
        with np.errstate(all="ignore"):
            return getattr(np, ufunc)(*[a[:1] if isinstance(a, np.ndarray) else a for a in arrays]).dtype
    except (TypeError, ValueError):
        return None


def _check(got, ufunc: str, arrays, what: str, rtol=None):
    """got (a DeviceArray) against numpy's ufunc on the inputs widened to float64 / int64: numpy's
    result dtype where numpy has a loop for them, and within reference.py's tolerances."""
    assert isinstance(got, DeviceArray), f"{what}: {type(got).__name__}"
    want_dtype = _numpy_dtype(ufunc, arrays)
    op = TABLE[ufunc]
    info = dt.lookup(got.dtype)
    if want_dtype is not None and any(k.out_dtype.np == want_dtype for k in op.kernels):
        assert got.dtype == want_dtype, f"{what}: dtype {got.dtype}, numpy gives {want_dtype}"
    with np.errstate(all="ignore"):
        ref = np.asarray(getattr(np, ufunc)(*[_wide(a) if isinstance(a, np.ndarray) else a for a in arrays]))
    host = got.get()
    if info.kind in ("bool", "int"):
        want = np.broadcast_to(ref, host.shape).astype(info.np)
        bad = np.flatnonzero(host != want)
        assert bad.size == 0, f"{what}: {bad.size} wrong, first at {bad[0]}: {host.flat[bad[0]]} != {want.flat[bad[0]]}"
        return
    assert_matches(host, ref, info, what, rtol=rtol if rtol is not None else op.rtol)


# ---- numpy's ufuncs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("ufunc,dtype", UFUNC_CASES)
def test_ufunc_on_device_arrays(ufunc, dtype, rng):
    """np.<ufunc>(DeviceArrays) for every length, on misaligned views, with a numpy operand
    (uploaded), into a poisoned out= (as an array and as numpy's tuple) and in place."""
    uf = getattr(np, ufunc)
    info = dt.BY_NAME[dtype]
    for n in SIZES:
        arrays = _inputs(ufunc, info, n, uf.nin, rng)
        dev = [pyew.asarray(a) for a in arrays]
        _check(uf(*dev), ufunc, arrays, f"np.{ufunc} {dtype} n={n}")
        views = [pyew.asarray(np.concatenate([a[:1 + j], a]))[1 + j:] for j, a in enumerate(arrays)]
        _check(uf(*views), ufunc, arrays, f"np.{ufunc} {dtype} views n={n}")
        if uf.nin == 2:
            _check(uf(dev[0], arrays[1]), ufunc, arrays, f"np.{ufunc} {dtype} with numpy n={n}")
            _check(uf(arrays[0], dev[1]), ufunc, arrays, f"np.{ufunc} {dtype} numpy first n={n}")
        res = uf(*dev)
        out = _poison(pyew.empty(n + 1, dt.lookup(res.dtype).name))[1:]
        assert uf(*dev, out=out) is out and uf(*dev, out=(out,)) is out
        _check(out, ufunc, arrays, f"np.{ufunc} {dtype} out= n={n}")
        if res.dtype == dev[0].dtype:
            x = pyew.asarray(arrays[0])
            assert uf(x, *dev[1:], out=x) is x
            _check(x, ufunc, arrays, f"np.{ufunc} {dtype} in place n={n}")


# ---- Python's operators ------------------------------------------------------------------------------

def _number(o, info: dt.DType):
    """A Python number of the operand's kind that keeps the array's dtype (NEP 50)."""
    if info.kind == "bool":
        return True
    if info.kind == "int" or o.ufunc in ("floor_divide", "remainder") or info.name == "bfloat16":
        return 3
    return 0.75


@pytest.mark.parametrize("o,dtype", OPERATOR_CASES)
def test_operator(o, dtype, rng):
    """The operator on DeviceArrays (and views), with a broadcast numpy row, with a Python number
    on either side (reflected), and in place; each against numpy on the same dtypes."""
    info = dt.BY_NAME[dtype]
    f = getattr(np.ndarray, o.methods[0])
    for n in SIZES:
        arrays = _inputs(o.ufunc, info, n, o.arity, rng)
        dev = [pyew.asarray(a) for a in arrays]
        what = f"{o.symbol} {dtype} n={n}"
        if o.arity == 1:
            _check(getattr(dev[0], o.methods[0])(), o.ufunc, arrays, what)
            continue
        _check(getattr(dev[0], o.methods[0])(dev[1]), o.ufunc, arrays, what)
        if n > 1:
            _check(getattr(dev[0][1:], o.methods[0])(dev[1][:-1]), o.ufunc, [arrays[0][1:], arrays[1][:-1]],
                   what + " views")
            row = arrays[1][:1]                         # a numpy operand, uploaded and broadcast
            _check(getattr(dev[0], o.methods[0])(row), o.ufunc, [arrays[0], row], what + " broadcast numpy")
        k = _number(o, info)
        if o.ufunc in ("power", "left_shift", "right_shift") and info.kind == "int":
            k = 2
        got = getattr(dev[0], o.methods[0])(k)
        with np.errstate(all="ignore"):                # numpy's dtype is all that is compared here
            want_dtype = f(arrays[0], k).dtype
        assert got.dtype == want_dtype, f"{what} number: {got.dtype}"
        _check(got, o.ufunc, [arrays[0], k], what + f" {k}")
        if o.reflected:
            base = arrays[1] if o.ufunc not in ("floor_divide", "remainder", "divide") else \
                np.where(_wide(arrays[1]) == 0, 1, arrays[1]).astype(info.np)
            if o.ufunc == "power" and info.kind == "int":
                base = np.abs(base % 5).astype(info.np)
            got = getattr(pyew.asarray(base), o.methods[1])(k)        # k <op> base
            with np.errstate(all="ignore"):
                want_dtype = getattr(np.ndarray, o.methods[1])(base, k).dtype
            assert got.dtype == want_dtype, f"{what} reflected"
            _check(got, o.ufunc, [k, base], what + f" {k} reflected")
            want = arrays[0].copy()
            try:
                with np.errstate(all="ignore"):
                    getattr(want, o.methods[2])(arrays[1])
            except TypeError:       # numpy refuses the cast back (int /= int): so must pyew
                x = pyew.asarray(arrays[0])
                with pytest.raises(TypeError, match="same_kind"):
                    getattr(x, o.methods[2])(dev[1])
                np.testing.assert_array_equal(x.get(), arrays[0])
                continue
            x = pyew.asarray(arrays[0])
            assert getattr(x, o.methods[2])(dev[1]) is x
            if info.kind == "float":
                _check(x, o.ufunc, arrays, what + " in place")
            else:
                np.testing.assert_array_equal(x.get(), want, err_msg=what + " in place")


def test_nep50_weak_python_numbers(rng):
    a = rng.uniform(-4, 4, 4097).astype(np.float16)
    d = pyew.asarray(a)
    for got, want in [(d * 0.5, a * 0.5), (0.5 * d, 0.5 * a), (d + 1, a + 1), (3.0 - d, 3.0 - a), (d / 4, a / 4)]:
        assert got.dtype == np.float16 == want.dtype
        assert_matches(got.get(), want.astype(np.float64), dt.BY_NAME["float16"], "weak number")
    i = np.arange(-100, 100, dtype=np.int32)
    assert (pyew.asarray(i) * 0.5).dtype == np.float64 and (pyew.asarray(i) + 7).dtype == np.int32


def test_comparisons_give_bool_arrays(rng):
    a = rng.integers(-3, 3, 10007).astype(np.float32)
    b = rng.integers(-3, 3, 10007).astype(np.float32)
    da, db = pyew.asarray(a), pyew.asarray(b)
    for o in OPERATORS:
        if o.method not in ("lt", "le", "gt", "ge", "eq", "ne") or o.ufunc not in TABLE:
            continue
        f = getattr(np.ndarray, o.methods[0])
        for got, want in [(getattr(da, o.methods[0])(db), f(a, b)), (getattr(da, o.methods[0])(1.0), f(a, 1.0)),
                          (getattr(np, o.ufunc)(2.0, da), getattr(np, o.ufunc)(2.0, a)),
                          (getattr(da, o.methods[0])(b[:1]), f(a, b[:1]))]:
            assert got.dtype == np.bool_, o.symbol
            np.testing.assert_array_equal(got.get(), want, err_msg=o.symbol)
    if "logical_and" in TABLE and "equal" in TABLE and "less" in TABLE:
        m = np.logical_and(da == db, da < 2.0)
        np.testing.assert_array_equal(m.get(), (a == b) & (a < 2))


def test_bool_arrays_with_the_bitwise_operators(rng):
    a, b = rng.integers(0, 2, 4099).astype(bool), rng.integers(0, 2, 4099).astype(bool)
    da, db = pyew.asarray(a), pyew.asarray(b)
    for o in OPERATORS:
        op = TABLE.get(o.ufunc)
        if o.method not in ("and", "or", "xor", "invert") or op is None or \
                dt.BY_NAME.get("bool") not in op.dtypes:
            continue
        if o.arity == 1:
            got, want = getattr(da, o.methods[0])(), getattr(a, o.methods[0])()
        else:
            got, want = getattr(da, o.methods[0])(db), getattr(a, o.methods[0])(b)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got.get(), want, err_msg=o.symbol)


# ---- out= aliasing and casting -----------------------------------------------------------------------

@pytest.mark.skipif("add" not in TABLE, reason="the library has no add")
def test_out_aliasing(rng):
    """out= exactly an input runs in place; an out that overlaps an input shifted (x[1:] += x[:-1])
    gets numpy's answer, as if the inputs were read first."""
    n = 65536 + 7
    a = rng.standard_normal(n).astype(np.float32)
    x = pyew.asarray(a)
    assert np.add(x, x, out=x) is x
    np.testing.assert_array_equal(x.get(), a + a)
    x = pyew.asarray(a)
    v = x[1:]
    v += x[:-1]
    want = a.copy()
    want[1:] += want[:-1]
    np.testing.assert_array_equal(x.get(), want)
    x = pyew.asarray(a)
    assert np.add(x[1:], x[:-1], out=x[:-1]) is not None
    want = a.copy()
    np.add(want[1:], want[:-1], out=want[:-1])
    np.testing.assert_array_equal(x.get(), want)


@pytest.mark.skipif("add" not in TABLE, reason="the library has no add")
def test_in_place_casting(rng):
    a = rng.standard_normal(4099).astype(np.float16)
    w = rng.standard_normal(4099)
    x = pyew.asarray(a)
    x += pyew.asarray(w)                # float64 result, converted into float16 as numpy does
    want = a.copy()
    want += w
    assert x.dtype == np.float16
    assert_matches(x.get(), want.astype(np.float64), dt.BY_NAME["float16"], "f16 += f64")
    i = np.arange(4099, dtype=np.int32)
    xi = pyew.asarray(i)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float64'\\) to "
                                        "dtype\\('int32'\\)"):
        xi += 0.5
    np.testing.assert_array_equal(xi.get(), i)


# ---- errors ------------------------------------------------------------------------------------------

def test_errors(rng, monkeypatch):
    d = pyew.asarray(rng.standard_normal(100).astype(np.float32))
    with pytest.raises(TypeError, match="numpy's add.reduce is not supported on DeviceArrays"):
        np.add.reduce(d)
    with pytest.raises(TypeError, match="numpy's add.accumulate is not supported"):
        np.add.accumulate(d)
    with pytest.raises(TypeError, match="numpy's multiply.outer is not supported"):
        np.multiply.outer(d, d)
    with pytest.raises(TypeError, match="numpy's add.at is not supported"):
        np.add.at(d, [0], 1.0)
    with pytest.raises(TypeError, match=r"np.add\(\.\.\., where="):
        np.add(d, d, where=np.ones(100, bool))
    with pytest.raises(TypeError, match=r"np.add\(\.\.\., dtype="):
        np.add(d, d, dtype=np.float64)
    with pytest.raises(TypeError, match=r"np.add\(\.\.\., casting='unsafe'"):
        np.add(d, d, casting="unsafe")
    with pytest.raises(TypeError, match=r"call \.get\(\)"):
        np.asarray(d)
    with pytest.raises(TypeError, match="unhashable"):
        hash(d)
    monkeypatch.setattr(ufuncs, "_table", types.MappingProxyType({}))
    ufuncs._entries.clear()
    try:
        with pytest.raises(TypeError, match=r"operator \+ needs an op for numpy's 'add'.*add an \[\[op\]\]"):
            d + d
        with pytest.raises(TypeError, match="np.exp on a DeviceArray needs an op for numpy's 'exp'"):
            np.exp(d)
    finally:
        ufuncs._forget()


# ---- reshape, printing -------------------------------------------------------------------------------

def test_reshape_ravel_flatten(rng):
    a = rng.standard_normal((6, 10)).astype(np.float32)
    d = pyew.asarray(a)
    r, f = d.reshape(3, -1), d.flatten()
    assert r.ptr == d.ptr and d.ravel().ptr == d.ptr and f.ptr != d.ptr
    np.testing.assert_array_equal(r.get(), a.reshape(3, -1))
    np.testing.assert_array_equal(f.get(), a.ravel())
    np.testing.assert_array_equal(d[1:3].reshape((5, 4)).get(), a[1:3].reshape(5, 4))
    assert len(d) == 6 and len(d.ravel()) == 60


@pytest.mark.parametrize("shape", [(7,), (3, 4), (), (5000,), (200, 30), (4, 5, 600)])
def test_printing(shape, rng):
    a = rng.standard_normal(shape).astype(np.float32)
    d = pyew.asarray(a)
    assert str(d) == str(a)
    body = np.array2string(a, separator=", ", prefix="DeviceArray(", suffix=")")
    assert repr(d).startswith("DeviceArray(" + body + ",") and repr(d).endswith(f"dtype=float32, device={d.device.id})")


@pytest.mark.skipif("add" not in TABLE, reason="the library has no add")
def test_operators_with_other_libraries_gpu_arrays(torch_cuda, rng):
    """A torch tensor with a DeviceArray is a GPU operand like any other: no copy, a DeviceArray out."""
    torch = torch_cuda
    a = rng.standard_normal(4097).astype(np.float32)
    b = rng.standard_normal(4097).astype(np.float32)
    t = torch.from_numpy(b).cuda()
    d = pyew.asarray(a)
    for got in (d + t, np.add(d, t), np.add(t, d)):
        assert isinstance(got, DeviceArray)
        np.testing.assert_array_equal(got.get(), a + b)
    d += t
    np.testing.assert_array_equal(d.get(), a + b)


# ---- assignment, numpy results into GPU out=, uses across streams, bool loops --------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "float64"])
def test_item_and_slice_assignment(dtype, rng):
    """d[a:b] += v in place (misaligned views included), d[i] = number, d[a:b] = host values
    (cast and broadcast as numpy assigns), d[a:b] = a GPU array of another dtype: against numpy
    doing the same on a copy."""
    info = dt.BY_NAME[dtype]
    n = 4099
    host = (rng.uniform(-50, 50, n) if info.kind == "float" else rng.integers(-50, 50, n)).astype(info.np)
    d = pyew.asarray(host)
    want = host.copy()
    d[3:] += 1
    want[3:] += 1
    d[5] = 7
    want[5] = 7
    d[10:2000] = np.arange(1990) % 11
    want[10:2000] = np.arange(1990) % 11
    d[2000:] = [3]
    want[2000:] = 3
    other = rng.uniform(-9, 9, 1001) if info.kind == "float" else rng.integers(-9, 9, 1001)
    d[1:1002] = pyew.asarray(other)                       # 64-bit on the GPU, cast by the library
    want[1:1002] = other.astype(info.np)
    d[7:] = d[:-7]                                        # overlapping, as numpy's memmove
    want[7:] = want[:-7].copy()
    d[:-3] = d[3:]
    want[:-3] = want[3:].copy()
    np.testing.assert_array_equal(d.get(), want)
    d[...] = 3
    z = pyew.asarray(np.zeros((), info.np))
    z[()] = 5
    assert np.all(d.get() == 3) and z.get() == 5
    # GPU arrays broadcast into a view, cast first where their dtype differs (a row into the
    # rows after it, an element into a misaligned tail, another dtype's 0-d array)
    m = pyew.asarray(host[: 3 * 1000].reshape(3, 1000))
    want = host[: 3 * 1000].reshape(3, 1000).copy()
    m[1:] = m[0]
    want[1:] = want[0]
    m[0][3:] = m[0][1]
    want[0][3:] = want[0][1]
    m[2][1:6] = pyew.asarray(np.float64(-2))
    want[2][1:6] = -2
    np.testing.assert_array_equal(m.get(), want)


def test_uses_on_two_streams_run_in_queue_order(rng):
    """y made by kernels queued on the default stream, read at once on a pyew.Stream: the stream
    waits for them on the GPU (without the wait it reads y before they ran)."""
    n = 1 << 26
    x = pyew.asarray(np.ones(n, np.float32))
    pyew.synchronize()
    for _ in range(5):
        y = pyew.mul(x, 2.0)
        for _ in range(6):
            y = pyew.add(y, 1.0)                              # 8 per element, about 2 ms of kernels
        with pyew.Stream() as s:
            z = pyew.add(y, 1.0)
        s.synchronize()
        got = z.get()
        assert got.min() == 9 and got.max() == 9
        back = pyew.mul(z, 2.0)                              # and back on the default stream
        assert np.all(back.get() == 18)


@pytest.mark.skipif(not {"add", "where", "gelu"} <= set(TABLE), reason="the library lacks add, where or gelu")
def test_a_gpu_out_the_result_broadcasts_to(rng):
    """numpy broadcasts a result into a larger out=, also of another dtype, for an op, a ufunc and a
    formula; a GPU out it cannot broadcast to is refused with nothing written."""
    a = rng.uniform(-4, 4, 4099).astype(np.float32)
    d = pyew.asarray(a)
    for dtype in ("float32", "float64"):
        out = poison(pyew.empty((3, 4099), dtype))
        assert pyew.add(d, 1.5, out=out) is out
        np.testing.assert_array_equal(out.get(), np.broadcast_to((a + np.float32(1.5)).astype(dtype), (3, 4099)))
        out = poison(pyew.empty((2, 4099), dtype))
        assert np.add(d, d[:1], out=out) is out
        np.testing.assert_array_equal(out.get(), np.broadcast_to((a + a[:1]).astype(dtype), (2, 4099)))
        out = poison(pyew.empty((2, 4099), dtype))
        assert pyew.evaluate("gelu(x) + 1", local_dict={"x": d}, out=out) is out
        want = pyew.evaluate("gelu(x) + 1", local_dict={"x": d}).get()
        np.testing.assert_array_equal(out.get(), np.broadcast_to(want.astype(dtype), (2, 4099)))
    narrow = poison(pyew.empty(7, "float32"))
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        pyew.add(d, 1.5, out=narrow)
    assert np.isnan(narrow.get()).all()


def test_numpy_inputs_into_a_gpu_out_of_another_dtype(rng):
    a = rng.uniform(-4, 4, 4099).astype(np.float32)
    out = poison(pyew.empty(4099, "float64"))
    assert np.add(a, 1, out=out) is out
    np.testing.assert_array_equal(out.get(), (a + np.float32(1)).astype(np.float64))


def test_bool_inputs_run_numpys_loops():
    h = np.array([True, False, True, False])
    g = np.array([True, True, False, False])
    b, c = pyew.asarray(h), pyew.asarray(g)
    assert {"floor_divide", "sqrt", "subtract"} <= set(TABLE)
    with np.errstate(all="ignore"):
        if "floor_divide" in TABLE:
            got = np.floor_divide(b, c)
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got.get(), np.floor_divide(h, g).astype(np.int32))
        if "sqrt" in TABLE:
            got = np.sqrt(b)
            assert got.dtype == np.float16
            np.testing.assert_array_equal(got.get(), np.sqrt(h))
    if "subtract" in TABLE:
        with pytest.raises(TypeError, match="numpy's subtract refuses bool"):
            b - c


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_storage_dtypes_run_in_the_kernel_they_cast_to(dtype, rng):
    """Arrays of the storage dtypes (images, audio) go in and out as they are, and
    every op takes them through the library's casts on the GPU: arithmetic in the smallest int
    kernel that holds them (exact, where numpy's wraps), functions in the smallest float one; from
    numpy, as DeviceArrays (misaligned views and tails among them), torch tensors and in formulas."""
    info = dt.BY_NAME[dtype]
    lim = np.iinfo(info.np)
    n = 4099
    h = rng.integers(lim.min, int(lim.max) + 1, n, dtype=info.np)
    h[:4] = [lim.min, lim.max, 0, 1]
    k = rng.integers(lim.min, int(lim.max) + 1, n, dtype=info.np)
    d = pyew.asarray(h)
    assert d.dtype == info.np
    np.testing.assert_array_equal(d.get(), h)
    wide = np.int32
    for got in (pyew.add(h, k), pyew.add(d, pyew.asarray(k)), d + k, pyew.add(d[1:], pyew.asarray(k)[1:])):
        want = h.astype(np.int64) + k.astype(np.int64)
        assert got.dtype == wide
        got = got.get() if isinstance(got, DeviceArray) else got
        np.testing.assert_array_equal(got, want[-got.size:])
    f = np.dtype(np.float16 if info.itemsize == 1 else np.float32)
    out = poison(pyew.empty(n, f.name))
    assert pyew.sigmoid(d, out=out) is out
    with np.errstate(all="ignore"):
        want = (1 / (1 + np.exp(-h.astype(np.float64)))).astype(f)
        root = np.sqrt(h)
    np.testing.assert_allclose(out.get().astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=1e-7)
    np.testing.assert_array_equal(np.sqrt(d).get(), root)
    np.testing.assert_array_equal(pyew.to_bool(d).get(), h != 0)
    np.testing.assert_array_equal(d.astype("float32").get(), h.astype(np.float32))
    np.testing.assert_array_equal(pyew.where(d, 1.0, 0.0).get(), np.where(h, 1.0, 0.0))
    x = pyew.evaluate("x / 255.0 + y", local_dict={"x": d, "y": 1})
    np.testing.assert_allclose(x.get(), h / 255.0 + 1, rtol=1e-15)
    # and back: astype and the cast ops to the storage dtypes, in a formula too
    back = d.astype("float32").astype(dtype)
    assert back.dtype == info.np
    np.testing.assert_array_equal(back.get(), h)
    img = pyew.evaluate(f"to_{dtype}(clip(x * 1.5, {lim.min}, {lim.max}))", local_dict={"x": d})
    assert img.dtype == info.np
    np.testing.assert_array_equal(img.get(), np.clip(h * 1.5, lim.min, lim.max).astype(info.np))
    torch = pytest.importorskip("torch")
    if dtype != "uint16":           # torch's uint16 has few kernels
        t = torch.from_dlpack(d)
        assert t.dtype == getattr(torch, dtype)
        np.testing.assert_array_equal(pyew.add(t, t).get(), h.astype(np.int64) * 2)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_comparisons_with_python_ints_out_of_range(dtype, rng):
    """numpy 2 compares integer arrays with any Python int: past the dtype in int64, past int64
    exactly too (each way round), and a later call in range keeps its exact kernel."""
    if dtype == "bool":
        h = rng.integers(0, 2, 4099).astype(bool)
    else:
        h = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 4099, dtype=dtype, endpoint=True)
        h[:4] = np.iinfo(dtype).min, np.iinfo(dtype).max, np.iinfo(dtype).max - 1, 0
    d = pyew.asarray(h)
    assert {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"} <= set(TABLE)
    for v in (2**40, -(2**40), 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**70, -(2**200)):
        for name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
            if dtype == "bool" and not -2**63 <= v < 2**63:     # numpy's own OverflowError
                with pytest.raises(OverflowError):
                    getattr(np, name)(h, v)
                with pytest.raises(OverflowError):
                    getattr(np, name)(d, v)
                continue
            got = getattr(np, name)(d, v)
            np.testing.assert_array_equal(got.get(), getattr(np, name)(h, v), err_msg=f"{name} {v}")
            got = getattr(np, name)(v, d)
            np.testing.assert_array_equal(got.get(), getattr(np, name)(v, h), err_msg=f"{name} {v}, reflected")
    if dtype == "int64":
        v = int(h[1]) - 1                 # near 2**63: float64 would round it
        np.testing.assert_array_equal((d > v).get(), h > v)


def test_comparing_with_none():
    d = pyew.asarray(np.arange(4099, dtype=np.float32))
    assert not (d == None).get().any() and (d != None).get().all()      # noqa: E711
