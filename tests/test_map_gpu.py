"""GPU tests generated from the loaded library's op table: every map op x dtype against its
spec's numpy reference (float64) on fresh random data, through the numpy path (the transfer
engine, one shot and streamed), DeviceArrays, misaligned views, special values, out=, streams and
scalars."""
from __future__ import annotations

import numpy as np
import pytest

import pyew

from .helpers import map_kernels, params_of, poison, random_array
from .reference import assert_matches, evaluate, zeros_checked

pytestmark = pytest.mark.gpu

MAP_KERNELS = map_kernels()
SIZES = (0, 1, 7, 4097, 2**20 + 3)


def _inputs(op, k, n, rng):
    """Random inputs of each input's dtype (where's condition is bool whatever the op's dtype)."""
    arrays = [random_array(rng, n, d.name) for d in k.in_dtypes]
    if op.name == "div":   # keep divisors away from zero so the check is about division
        arrays[1] = np.where(np.abs(arrays[1].astype(np.float64)) < 0.25, 0.5, arrays[1]).astype(arrays[1].dtype)
    return arrays


def _check(op, k, arrays, got, what):
    ref = evaluate(op.ref, op.inputs, arrays, params_of(op), k.dtype, k.in_dtypes)
    assert_matches(got, ref, k.out_dtype, f"{op.name} {k.dtype.name} {what}", rtol=op.rtol, ulp=op.ulp,
                   zeros=zeros_checked(op.name))


def _number(k):
    """A Python number that keeps the kernel's dtype (NEP 50: weak), as numpy resolves it; ml_dtypes'
    bfloat16 keeps it for ints."""
    if k.dtype.kind == "bool":
        return True
    return 3 if k.dtype.kind == "int" or k.dtype.name == "bfloat16" else 2.5


def _same_dtype_input(k):
    """The index of an input of the output's dtype (out= may be exactly it), or None."""
    return next((j for j, d in enumerate(k.in_dtypes) if d is k.out_dtype), None)


@pytest.mark.parametrize("op,k", MAP_KERNELS)
def test_numpy_roundtrip(op, k, rng):
    fn = getattr(pyew, op.name)
    for n in SIZES:
        arrays = _inputs(op, k, n, rng)
        got = fn(*arrays, **params_of(op))
        assert isinstance(got, np.ndarray) and got.shape == (n,) and got.dtype == k.out_dtype.np
        _check(op, k, arrays, got, f"n={n}")


@pytest.mark.parametrize("op,k", MAP_KERNELS)
def test_streamed_equals_one_shot(op, k, rng, transfer_limits):
    """The numpy path streamed in many blocks through a tiny device budget gives the same bits as
    one shot, also for strided inputs and a strided numpy out=."""
    fn = getattr(pyew, op.name)
    n = 3 * 65536 + 77
    arrays = _inputs(op, k, n, rng)
    transfer_limits(small_bytes=1 << 30)
    one = fn(*arrays, **params_of(op))
    transfer_limits(small_bytes=0, device_bytes=256 * 1024, threads=3)
    many = fn(*arrays, **params_of(op))
    assert one.tobytes() == many.tobytes()
    strided = [np.repeat(a, 2)[::2] for a in arrays]            # same values, stride 2
    out = np.zeros(2 * n, k.out_dtype.np)[1::2]
    assert fn(*strided, out=out, **params_of(op)) is out
    assert out.tobytes() == one.tobytes()


def _view_offsets(arity):
    """(output offset, input offsets) in elements: each input and out differently misaligned, all
    equally misaligned, and every offset of an input relative to the output (alone for one input,
    mixed with another for two), with the output aligned and misaligned."""
    cases = [((s + 2) % 4, [(j + s) % 4 for j in range(arity)]) for s in range(3)]
    cases.append((3, [3] * arity))
    for rel in range(1, 8):
        for o in (0, 5):
            cases.append((o, [o + rel * (j + 1) for j in range(arity)]))
    return cases


@pytest.mark.parametrize("op,k", MAP_KERNELS)
def test_device_misaligned_views(op, k, rng):
    """Views at element offsets of their buffers (_view_offsets): every pack width and launch
    shape a view can take, and the tail."""
    fn = getattr(pyew, op.name)
    n = 4096 + 13
    for out_off, offs in _view_offsets(len(op.inputs)):
        arrays = _inputs(op, k, n, rng)
        dev = []
        for a, off in zip(arrays, offs):
            pad = np.concatenate([a[:off], a]) if off else a
            dev.append(pyew.asarray(pad)[off:])
        out = poison(pyew.empty(n + out_off, k.out_dtype.name))[out_off:]
        res = fn(*dev, out=out, **params_of(op))
        assert res is out
        _check(op, k, arrays, out.get(), f"views at {offs}, out at {out_off}")


def _special(info):
    """NaN, +-inf, signed zeros, subnormals and the overflow-prone points of a float dtype; an integer
    type's limits and their neighbours; both bools."""
    if info.kind == "bool":
        return np.array([False, True])
    if info.kind == "int":
        lim = np.iinfo(info.np)
        signed = [-1, -2] if lim.min < 0 else []           # the unsigned storage dtypes have none
        return np.array([0, 1, *signed, 2, 3, lim.max, lim.min, lim.max - 1, lim.min + 1], dtype=info.np)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 4.05, -4.05, 11.0, -11.0, 20.0, -20.0, 65504.0,
            -65504.0, 1e-3, -1e-3, 3.0, -3.0, 0.5, -0.5, 100.0, -100.0, 1e30, -1e30, 1e-40, -1e-45]
    if info.name == "float64":          # its own subnormals and the edge of its range
        vals += [1e-310, -1e-310, 5e-324, 1.7e308, -1.7e308]
    with np.errstate(over="ignore", under="ignore"):
        return np.array(vals, np.float64).astype(info.np)


@pytest.mark.parametrize("op,k", MAP_KERNELS)
def test_special_values(op, k, rng):
    """NaN, +-inf, signed zeros and the overflow-prone points, combined with random data."""
    info = k.dtype
    fn = getattr(pyew, op.name)
    m = len(_special(info))
    arrays = []
    for j, d in enumerate(k.in_dtypes):
        special = _special(d)
        a = random_array(rng, 3 * m, d.name)
        a[j * m % (2 * m): j * m % (2 * m) + len(special)] = np.roll(special, j)
        arrays.append(a)
    with np.errstate(all="ignore"):
        got = fn(*arrays, **params_of(op))
    _check(op, k, arrays, got, "special values")
    # every special value against every other (for two and three inputs): integer limits wrap,
    # divisions by zero and NaN against infinities are defined, as in numpy
    free = [j for j, d in enumerate(k.in_dtypes) if d is info]
    grids = np.meshgrid(*[_special(info)] * len(free), indexing="ij")
    arrays = [random_array(rng, grids[0].size, d.name) for d in k.in_dtypes]
    for j, g in zip(free, grids):
        arrays[j] = g.reshape(-1)
    with np.errstate(all="ignore"):
        got = fn(*arrays, **params_of(op))
    _check(op, k, arrays, got, "special values against each other")
    if info.kind == "int" and op.name in ("add", "sub", "mul"):
        want = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op.name](*arrays)
        np.testing.assert_array_equal(got, want)
    if op.name in ("gelu", "sigmoid", "silu", "gelu_tanh") and info.kind == "float":
        finite_in = np.isfinite(arrays[0].astype(np.float64))
        assert np.all(np.isfinite(got.astype(np.float64))[finite_in]), "finite input gave inf/NaN"


@pytest.mark.parametrize("op,k", MAP_KERNELS)
def test_out_inplace_and_stream(op, k, rng):
    fn = getattr(pyew, op.name)
    n = 10007
    arrays = _inputs(op, k, n, rng)
    host_out = np.full(n, 7, k.out_dtype.np)
    assert fn(*arrays, out=host_out, **params_of(op)) is host_out
    _check(op, k, arrays, host_out, "numpy out=")
    s = pyew.Stream()
    dev = [pyew.asarray(a, stream=s) for a in arrays]
    j = _same_dtype_input(k)
    if j is not None:
        res = fn(*dev, out=dev[j], stream=s, **params_of(op))
        assert res is dev[j]
    else:
        res = fn(*dev, stream=s, **params_of(op))
    s.synchronize()
    _check(op, k, arrays, res.get(stream=s), "in place on a stream")
    with pyew.Stream() as s2:
        res2 = fn(*[pyew.asarray(a) for a in arrays], **params_of(op))
        assert pyew.current_stream() is s2
    s2.synchronize()
    _check(op, k, arrays, res2.get(), "with Stream()")
    # numpy in place: out is exactly an input
    if j is not None:
        x = arrays[j].copy()
        fn(*arrays[:j], x, *arrays[j + 1:], out=x, **params_of(op))
        _check(op, k, arrays, x, "numpy in place")


@pytest.mark.parametrize("op,k", map_kernels(lambda op, k: len(op.inputs) == 2))
def test_scalar_operands(op, k, rng):
    fn = getattr(pyew, op.name)
    x = _inputs(op, k, 1000, rng)[0]
    s = _number(k)
    got = fn(x, s, **params_of(op))
    assert got.dtype == k.out_dtype.np
    _check(op, k, [x, np.full_like(x, s)], got, "array op scalar")
    got = fn(s, pyew.asarray(x), **params_of(op)).get()
    _check(op, k, [np.full_like(x, s), x], got, "scalar op device array")
    got = fn(pyew.asarray(x), np.asarray(s, k.dtype.np), **params_of(op)).get()
    _check(op, k, [x, np.full_like(x, s)], got, "device op 0-d array")


@pytest.mark.parametrize("op,k", map_kernels(lambda op, k: len(op.inputs) == 2))
def test_python_numbers_on_every_length_and_view(op, k, rng):
    """DeviceArray op number and number op DeviceArray (each number read from its GPU's slot):
    tails past the last whole pack, views at every offset of a pack, n = 0, into a poisoned out=
    and in place; special values for float dtypes."""
    fn = getattr(pyew, op.name)
    s = -0.625 if k.dtype.kind == "float" and k.dtype.name != "bfloat16" else _number(k)
    base = _inputs(op, k, 4099 + 16, rng)[0]
    d = pyew.asarray(base)
    for off in range(9):
        for n in (0, 1, 5, 4096, 4099):
            x = base[off:off + n]
            got = fn(d[off:off + n], s, **params_of(op)).get()
            _check(op, k, [x, np.full_like(x, s)], got, f"x[{off}:{off + n}] op {s}")
            out = poison(pyew.empty(n, k.out_dtype.name))
            assert fn(s, d[off:off + n], out=out, **params_of(op)) is out
            _check(op, k, [np.full_like(x, s), x], out.get(), f"{s} op x[{off}:{off + n}], out=")
    if _same_dtype_input(k) == 0:
        y = pyew.asarray(base)
        fn(y, s, out=y, **params_of(op))
        _check(op, k, [base, np.full_like(base, s)], y.get(), "in place")
    if k.dtype.kind == "float" and k.dtype.name != "bfloat16":
        for v in (float("inf"), float("-inf"), float("nan"), -0.0, 1e-300):
            got = fn(d[:4099], v, **params_of(op)).get()
            _check(op, k, [base[:4099], np.full_like(base[:4099], v)], got, f"x op {v}")


def test_a_number_first_used_on_a_side_stream(rng):
    """A value's slot is written and waited for before any kernel reads it, whatever stream the
    kernel is on."""
    a = random_array(rng, 1 << 20, "float32")
    x = pyew.asarray(a)
    pyew.synchronize()                               # x's upload, queued on the default stream, is done
    v = float(rng.uniform(1, 2))                     # a value no earlier test used
    with pyew.Stream() as st:
        y = pyew.mul(x, v)
        z = pyew.add(v, y)
    st.synchronize()
    np.testing.assert_array_equal(z.get(), np.float32(v) + a * np.float32(v))


def test_numbers_past_the_slots(rng, monkeypatch):
    """With the slots used up, each call takes a buffer of its own."""
    from pyew import memory
    monkeypatch.setattr(memory, "_constants", {})
    monkeypatch.setattr(memory, "_CONSTANT_SLOTS", 3)
    a = random_array(rng, 10_001, "float16")
    x = pyew.asarray(a)
    for v in (0.5, 1.5, 2.5, 3.5, 4.5, 0.5):
        np.testing.assert_array_equal(pyew.mul(x, v).get(), a * np.float16(v))
        np.testing.assert_array_equal(pyew.sub(a, v), a - np.float16(v))
    assert memory._constants[0].used == 3


@pytest.mark.parametrize("op,k", map_kernels(lambda op, k: len(op.inputs) == 2 and k.dtype.kind == "float"))
def test_broadcasting_matches_numpy(op, k, rng):
    """Random broadcast shapes (size-1 dims, 0-size dims, 0-d arrays), numpy and device inputs."""
    fn = getattr(pyew, op.name)
    shapes = [((4, 1), (1, 5)), ((3, 4, 5), (5,)), ((2, 3, 1, 6), (3, 7, 1)), ((7,), ()), ((), (6, 2)),
              ((0, 3), (3,)), ((65536 // 64, 64), (64,)), ((16, 32, 100), (32, 1)), ((1, 1, 9), (2, 1, 1))]
    for _ in range(8):
        nd = rng.integers(1, 6)
        full = tuple(int(v) for v in rng.integers(1, 6, nd))
        a = tuple(d if rng.random() < 0.6 else 1 for d in full)
        b = tuple(d if rng.random() < 0.6 else 1 for d in full)[rng.integers(0, nd):]
        shapes.append((a, b))
    for sa, sb in shapes:
        a = random_array(rng, int(np.prod(sa)), k.dtype.name).reshape(sa)
        b = random_array(rng, int(np.prod(sb)), k.dtype.name).reshape(sb)
        if op.name == "div":
            b = np.where(np.abs(b.astype(np.float64)) < 0.25, 0.5, b).astype(b.dtype)
        want_shape = np.broadcast_shapes(sa, sb)
        full_a, full_b = np.broadcast_to(a, want_shape), np.broadcast_to(b, want_shape)
        got = fn(a, b, **params_of(op))
        assert got.shape == want_shape
        _check(op, k, [full_a.reshape(-1), full_b.reshape(-1)], got.reshape(-1), f"{sa} with {sb} (numpy)")
        dgot = fn(pyew.asarray(a), pyew.asarray(b), **params_of(op))
        assert dgot.shape == want_shape
        _check(op, k, [full_a.reshape(-1), full_b.reshape(-1)], dgot.get().reshape(-1), f"{sa} with {sb} (device)")
        out = poison(pyew.empty(want_shape, k.out_dtype.name))
        assert fn(pyew.asarray(a), b, out=out, **params_of(op)) is out
        assert out.get().tobytes() == dgot.get().tobytes()         # the same bits (NaNs of bfloat16 too)
    with pytest.raises(ValueError, match="do not broadcast"):
        fn(np.ones((3, 4), k.dtype.np), np.ones((5,), k.dtype.np))
    with pytest.raises(ValueError, match=r"non-broadcastable output operand with shape \(3, 4\) doesn't match the "
                                         r"broadcast shape \(2, 3, 4\)"):
        fn(np.ones((2, 3, 4), k.dtype.np), np.ones(4, k.dtype.np), out=np.ones((3, 4), k.out_dtype.np))


@pytest.mark.parametrize("threads", [1536, 640, 128])
def test_launches_under_a_resident_thread_budget(threads, rng, resident_threads):
    """Fewer resident threads per SM (unused shared memory per block) change no result: aligned,
    misaligned and broadcast operands, tails included, against numpy."""
    dev = resident_threads(threads)
    assert dev.dims == (dev.sms, threads)
    for name, dtype in (("sigmoid", "float32"), ("add", "float16"), ("gelu", "bfloat16"), ("mul", "float32")):
        op = pyew.library.get().manifest.op(name)
        k = next(k for k in op.kernels if k.dtype.name == dtype)
        for n in (1, 4097, 2**20 + 3):
            arrays = [random_array(rng, n + 3, dtype) for _ in op.inputs]
            dev_in = [pyew.asarray(a) for a in arrays]
            for start in (0, 1):
                views = [d[start + j:start + j + n] for j, d in enumerate(dev_in)]
                out = poison(pyew.empty(n, k.out_dtype.name))
                getattr(pyew, name)(*views, out=out)
                _check(op, k, [a[start + j:start + j + n] for j, a in enumerate(arrays)], out.get(),
                       f"{threads} threads per SM, n={n}, views at +{start}")
        if len(op.inputs) == 2:
            x = random_array(rng, 64 * 4099, dtype).reshape(64, 4099)
            b = random_array(rng, 4099, dtype)
            out = poison(pyew.empty(x.shape, k.out_dtype.name))
            getattr(pyew, name)(pyew.asarray(x), pyew.asarray(b), out=out)
            _check(op, k, [x.reshape(-1), np.broadcast_to(b, x.shape).reshape(-1)], out.get().reshape(-1),
                   f"{threads} threads per SM, row bias")


def test_dependent_calls_queued_back_to_back(rng):
    """Each call reads what the call before it wrote, all queued behind a few large calls with no
    synchronisation between them: a map kernel may be scheduled while the one before it finishes,
    and must still see all of its writes. Aligned and misaligned steps, against numpy."""
    busy = poison(pyew.empty(2**26, "float32"))
    for n in (4097, 2**22 + 3):
        x = np.round(random_array(rng, n, "float32") * 8)       # whole numbers: every sum below is exact
        ones = pyew.asarray(np.ones(n, np.float32))
        bufs = [pyew.asarray(np.concatenate([x, np.full(8, np.nan, np.float32)])), poison(pyew.empty(n + 8, "float32"))]
        off, steps = 0, 60
        for _ in range(8):
            pyew.add(busy, busy, out=busy)
        for i in range(steps):
            src, dst = bufs[i % 2], bufs[1 - i % 2]
            to = (off + i) % 8                                 # offsets differ on most steps: shifted loads
            pyew.add(src[off:off + n], ones, out=dst[to:to + n])
            off = to
        np.testing.assert_array_equal(bufs[steps % 2][off:off + n].get(), x + steps, err_msg=f"n={n}")


def test_bias_layouts_are_collapsed(rng):
    """Row bias, channel bias and a scalar: the common broadcasts, against numpy."""
    x = random_array(rng, 256 * 4096, "float16").reshape(256, 4096)
    b = random_array(rng, 4096, "float16")
    np.testing.assert_array_equal(pyew.add(pyew.asarray(x), pyew.asarray(b)).get(), x + b)
    x4 = random_array(rng, 4 * 16 * 8 * 8, "float32").reshape(4, 16, 8, 8)
    c = random_array(rng, 16, "float32").reshape(16, 1, 1)
    np.testing.assert_array_equal(pyew.mul(pyew.asarray(x4), pyew.asarray(c)).get(), x4 * c)
    np.testing.assert_array_equal(pyew.add_relu(x4, c), np.maximum(x4 + c, 0))


def test_promotion_follows_numpy(rng):
    """Mixed dtypes run in numpy's result dtype, the narrower operand converted on the GPU;
    bfloat16 mixes as ml_dtypes' ufuncs do."""
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    a32 = random_array(rng, 1000, "float32")
    cases = [(a32.astype(np.float16), a32), (a32.astype(np.int32), a32), (a32.astype(np.int32), 2.5),
             (a32.astype(bf16), a32), (a32.astype(bf16), a32.astype(np.float16)), (a32.astype(bf16), 1.5),
             (a32.astype(np.int32), a32.astype(np.int64)), (a32.astype(np.float16), 2.5)]
    for x, y in cases:
        want = x + y
        got = pyew.add(x, y)
        assert got.dtype == want.dtype, (x.dtype, type(y), got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
        dgot = pyew.add(pyew.asarray(x), y if np.isscalar(y) else pyew.asarray(y))
        assert dgot.dtype == want.dtype
        np.testing.assert_array_equal(dgot.get(), want)
    np.testing.assert_allclose(pyew.sigmoid(np.arange(-5, 5, dtype=np.int32)),
                               1 / (1 + np.exp(-np.arange(-5, 5.0))), rtol=1e-13)
