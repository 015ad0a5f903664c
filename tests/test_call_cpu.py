"""pyew's call layer without a GPU: numpy 2's promotion, kernel choice, broadcasting and dimension
collapsing as pure functions, then whole op calls through the real call pipeline and transfer
engine over stand-ins for the CUDA runtime and the kernels (tests/fake_cuda.py, fake_kernels.py)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew.operands import HOST, SCALAR, Operand, broadcast_strides, collapse, kernel_dtype, result_dtype

from .helpers import manifest_ops

BF16 = np.dtype(ml_dtypes.bfloat16)
needs_lib = pytest.mark.skipif(not manifest_ops(), reason="libew.so not built (make all)")


def _arr(dtype):
    return Operand("x", HOST, np.zeros(1, dtype), dt.lookup(dtype), (1,))


def _py(v):
    return Operand("s", SCALAR, v, None, ())


@pytest.mark.parametrize("ops,want", [
    ((_arr(np.float16), _arr(np.float32)), np.float32),
    ((_arr(np.int32), _arr(np.float32)), np.float64),
    ((_arr(np.int32), _arr(np.int64)), np.int64),
    ((_arr(np.float16), _py(2.5)), np.float16),          # a Python float is weak (NEP 50)
    ((_arr(np.int32), _py(2.5)), np.float64),
    ((_arr(np.int32), _py(7)), np.int32),
    ((_arr(BF16), _arr(np.float32)), np.float32),
    ((_arr(BF16), _arr(np.float16)), np.float32),         # as ml_dtypes' ufuncs resolve it
    ((_arr(BF16), _py(2)), BF16),
    ((_py(1.0), _py(2)), np.float64),
])
def test_promotion_follows_numpy(ops, want):
    assert result_dtype(list(ops), "op") == np.dtype(want)


def test_python_int_out_of_range_is_refused_like_numpy():
    with pytest.raises(OverflowError):
        np.add(np.zeros(1, np.int32), 2**40)
    from pyew.operands import scalar_value
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        scalar_value(_py(2**40), dt.BY_NAME["int32"], "add")


def test_kernel_choice_is_numpys_loop_choice():
    f = tuple(dt.BY_NAME[n] for n in ("float32", "float64", "float16", "bfloat16"))
    assert kernel_dtype(np.dtype(np.int32), f, "sigmoid").name == "float64"     # as np.exp(int32)
    assert kernel_dtype(np.dtype(np.float16), f[:2], "x").name == "float32"
    with pytest.raises(TypeError, match="no kernel for complex64"):
        kernel_dtype(np.dtype(np.complex64), f, "sigmoid")


@pytest.mark.parametrize("shape,in_shapes,want_shape,want_strides", [
    ((65536, 4096), [(65536, 4096), (4096,)], (65536, 4096), [(4096, 1), (0, 1)]),          # row bias
    ((64, 256, 128, 128), [(64, 256, 128, 128), (256, 1, 1)], (64, 256, 16384),
     [(256 * 16384, 16384, 1), (0, 1, 0)]),                                                  # channel bias
    ((8, 1, 5), [(8, 1, 5), (8, 1, 5)], (40,), [(1,), (1,)]),                               # same shape
    ((4, 5), [(4, 5), ()], (20,), [(1,), (0,)]),                                            # scalar
    ((1, 1), [(1, 1)], (1,), [(0,)]),
])
def test_collapse(shape, in_shapes, want_shape, want_strides):
    got_shape, got_strides = collapse(shape, [broadcast_strides(s, shape) for s in in_shapes])
    assert got_shape == want_shape and got_strides == want_strides


# ---- whole calls over the stand-ins -------------------------------------------------------------------

@needs_lib
@pytest.mark.parametrize("n", [0, 1, 1000, 300_001])
def test_numpy_calls(fakes, n, rng):
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(pyew.add(x, y), x + y)
    np.testing.assert_allclose(pyew.sigmoid(x), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    out = np.zeros(n, np.float32)
    assert pyew.mul(x, 2.0, out=out) is out
    np.testing.assert_array_equal(out, x * 2)
    xs = np.repeat(x, 2)[::2]
    np.testing.assert_array_equal(pyew.relu(xs), np.maximum(x, 0))


@needs_lib
def test_device_calls_and_astype(fakes, rng):
    a = rng.standard_normal(5000).astype(np.float32)
    d = pyew.asarray(a)
    r = pyew.add(d, d)
    assert isinstance(r, pyew.DeviceArray)
    np.testing.assert_array_equal(r.get(), a + a)
    np.testing.assert_array_equal(d.astype("float16").get(), a.astype(np.float16))
    np.testing.assert_array_equal(pyew.add(d, a).get(), a + a)        # mixed host and device
    e = pyew.DeviceArray.new(7, "float16")                # a dtype name, an int shape, the current stream
    assert e.shape == (7,) and e.dtype == np.float16
    assert pyew.DeviceArray.new([2, 3], np.int32).shape == (2, 3)
    with pytest.raises(TypeError, match="numpy's matmul is not elementwise.*torch or CuPy"):
        np.matmul(d, d)
    traced = pyew.fuse(lambda x: x.sum())
    with pytest.raises(AttributeError, match="a traced value has no attribute 'sum'.*outside it"):
        traced(d)


@needs_lib
def test_scatter_add_and_dot_refuse_an_inconvertible_dtype_before_any_gpu_work(fakes):
    dst = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"scatter_add: input 'src' is uint32 and dst is float32, but the library "
                                        r"has no cast from uint32 to float32 \(op to_float32\); convert the input"):
        pyew.scatter_add(dst, np.array([0]), np.array([1], np.uint32))
    assert (dst == 0).all()
    with pytest.raises(TypeError, match=r"dot: input 'a' is uint32 and the dot runs in float64, but the library "
                                        r"has no cast from uint32 to float64"):
        pyew.dot(np.ones(3, np.uint32), np.ones(3, np.float32))


@needs_lib
def test_relu_mask_streams_its_bitmask(fakes, rng):
    n = 100_000 + 5
    x = rng.standard_normal(n).astype(np.float32)
    y, m = pyew.relu_mask(x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    bits = ((m[:, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(-1)[:n].astype(bool)
    np.testing.assert_array_equal(bits, x > 0)
    g = rng.standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(pyew.relu_mask_backward(g, m), np.where(x > 0, g, 0))
    with pytest.raises(TypeError, match=r"out\[1\] \(the mask\) is a numpy array and the other out a GPU array"):
        pyew.relu_mask(x, out=(pyew.empty(n, "float32"), np.empty((n + 31) // 32, np.uint32)))
    buf = np.full(n, -7, np.float32)              # numpy outs that share memory: refused, as on the GPU
    with pytest.raises(ValueError, match="the two outs overlap"):
        pyew.relu_mask(x, out=(buf, buf[:(n + 31) // 32].view(np.uint32)))
    assert (buf == -7).all()


@needs_lib
def test_errors_change_nothing(fakes, rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = np.full(100, 7.0, np.float32)
    with pytest.raises(ValueError, match="non-broadcastable output operand with shape \\(99,\\)"):
        pyew.relu(x, out=np.empty(99, np.float32))
    with pytest.raises(TypeError, match="unexpected keyword"):
        pyew.elu(x, beta=1.0, out=out)
    with pytest.raises(OverflowError, match="int64"):
        pyew.add(np.arange(3), 2**70)
    with pytest.raises(TypeError, match="takes 2 input"):
        pyew.add(x)
    with pytest.raises(TypeError, match="stream must be a pyew.Stream"):
        pyew.relu(x, stream=5)
    with pytest.raises(TypeError, match="not an array or number"):
        pyew.relu(object())
    np.testing.assert_array_equal(out, 7.0)


@needs_lib
def test_broadcasting_through_the_strided_entry(fakes, rng):
    shapes = [((4, 1), (1, 5)), ((3, 4, 5), (5,)), ((2, 3, 1, 6), (3, 7, 1)), ((7,), ()), ((0, 3), (3,)),
              ((300, 64), (64,)), ((16, 32, 100), (32, 1)), ((1, 1, 9), (2, 1, 1))]
    for sa, sb in shapes:
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        np.testing.assert_array_equal(pyew.add(a, b), a + b)
        np.testing.assert_array_equal(pyew.mul(pyew.asarray(a), pyew.asarray(b)).get(), a * b)
        np.testing.assert_array_equal(pyew.sub(pyew.asarray(a), b).get(), a - b)


@needs_lib
def test_mixed_dtypes_are_converted_on_the_gpu(fakes, rng):
    x = rng.standard_normal(1000).astype(np.float16)
    y = rng.standard_normal(1000).astype(np.float32)
    fakes[1].launches.clear()
    got = pyew.add(x, y)
    assert got.dtype == np.float32 and "forward" in fakes[1].launches
    np.testing.assert_array_equal(got, x.astype(np.float32) + y)
    i = np.arange(1000, dtype=np.int32)
    np.testing.assert_array_equal(pyew.add(i, y), i + y)          # float64, as numpy


@needs_lib
def test_scalar_only_calls(fakes):
    r = pyew.add(2.0, 3)
    assert r.shape == () and r.dtype == np.float64 and float(r) == 5.0
    r = pyew.mul(np.float16(2), 3)
    assert r.dtype == np.float16 and float(r) == 6.0


@needs_lib
def test_the_common_device_call_keeps_the_streams_books(fakes, rng):
    """DeviceArrays of one dtype and shape and nothing else (replayed plans): the result is
    allocated on the current stream and each input's buffer records the stream that read it (its
    free and its next write wait for it), as on the general path; empty arrays, and calls off that
    path, still work."""
    a = rng.standard_normal(3001).astype(np.float32)
    x = pyew.asarray(a)
    s = pyew.ExternalStream(0x5000)        # another library's stream (a Stream needs a real GPU)
    with s:
        y = pyew.sigmoid(x)
    assert y.buffer.stream is s and x.buffer.readers == [s] and s in x.buffer.others
    assert x.buffer.last is pyew.runtime.DEFAULT_STREAM          # its last write: the upload
    z = pyew.add(y, x)
    assert z.buffer.stream is pyew.runtime.DEFAULT_STREAM and y.buffer.last is s
    assert y.buffer.readers == [pyew.runtime.DEFAULT_STREAM]
    np.testing.assert_allclose(z.get(), 1 / (1 + np.exp(-a.astype(np.float64))) + a, rtol=1e-6, atol=1e-6)
    e = pyew.relu(pyew.empty((0, 3), "float16"))
    assert isinstance(e, pyew.DeviceArray) and e.shape == (0, 3) and e.dtype == np.float16
    h = pyew.asarray(a.astype(np.float16))
    np.testing.assert_array_equal(pyew.add(x, h).get(), a + a.astype(np.float16))   # promoted
    np.testing.assert_array_equal(pyew.add(x, x[:1]).get(), a + a[0])                # broadcast
    np.testing.assert_array_equal(pyew.scale(x, alpha=2.0).get(), a * np.float32(2))  # a param
    with pytest.raises(TypeError):
        pyew.relu(x, x)


@needs_lib
def test_a_read_only_gpu_array_is_refused_as_out(fakes, rng):
    """One GPU: DeviceArray inputs with a read-only import as out= leave the plan and get
    the general path's error; out keeps its contents."""
    from pyew import interop
    from pyew import runtime as rt
    a = rng.standard_normal(64).astype(np.float32)
    x = pyew.asarray(a)
    keep = pyew.asarray(np.full(64, 7, np.float32))

    class ReadOnly:
        __cuda_array_interface__ = {"shape": (64,), "typestr": "<f4", "data": (keep.ptr, True),
                                    "version": 3, "strides": None, "stream": 1}

    ro = interop.import_device(ReadOnly(), rt.DEFAULT_STREAM)
    assert ro.readonly
    with pytest.raises(ValueError, match="read-only GPU array"):
        pyew.add(x, x, out=ro)
    np.testing.assert_array_equal(keep.get(), np.full(64, 7, np.float32))


@needs_lib
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, BF16, np.int32, np.int64])
def test_device_arrays_with_python_numbers(fakes, rng, monkeypatch, dtype):
    """x * 0.5 and 3 - x on DeviceArrays: one launch of the strided entry, each number read from its
    GPU's slot for the value (written once, on pyew's own stream, then reused), the result in the
    array's dtype as numpy gives it (NEP 50); odd lengths as the packs, then the rest."""
    from pyew import memory
    fills, syncs = [], fakes[0].streams.synced           # the streams waited for
    monkeypatch.setattr(pyew.call, "fill", lambda *a: fills.append(a))
    launches = fakes[1].launches
    a = (rng.standard_normal(1003) * 10).astype(dtype)
    x = pyew.asarray(a)
    k = 3 if np.dtype(dtype) in (np.int32, np.int64, BF16) else 0.5   # ml_dtypes: bfloat16 * 0.5 is float32
    for n in (1003, 1000, 3, 0):
        for got, want in ((pyew.mul(x[:n], k), a[:n] * k), (pyew.sub(k, x[:n]), k - a[:n]),
                          (pyew.add(x[:n], -k), a[:n] + (-k))):
            assert got.dtype == want.dtype == dtype and got.shape == (n,)
            np.testing.assert_array_equal(got.get(), want)
    assert set(launches) == {"strided"} and not fills
    # a length past a multiple of the 16-byte pack: two launches (none for n = 0)
    pack = 16 // np.dtype(dtype).itemsize
    assert len(launches) == 3 * sum(2 if n % pack and n > pack else 1 for n in (1003, 1000, 3))
    table = memory._constants[0]
    assert table.used == 2 and syncs.count(table.stream) == 2       # k and -k, each waited for once
    launches.clear()
    np.testing.assert_array_equal(pyew.mul(x, k).get(), a * k)
    assert table.used == 2 and syncs.count(table.stream) == 2 and launches and set(launches) == {"strided"}


@needs_lib
def test_python_numbers_keep_their_sign_and_inf_and_nan(fakes, rng):
    a = np.abs(rng.standard_normal(64)).astype(np.float32) + 1
    x = pyew.asarray(a)
    for k in (0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3.4028234e38):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(pyew.mul(x, k).get(), a * np.float32(k))
    assert np.signbit(pyew.mul(x, -0.0).get()).all() and not np.signbit(pyew.mul(x, 0.0).get()).any()


def test_reuse_last_converts_each_new_set_of_objects_once():
    calls = []

    def convert(values):
        calls.append(values)
        if values[0] < 0:
            raise OverflowError("negative")
        return [v * 2 for v in values]
    conv = pyew.call.reuse_last(convert)
    a, b = 1.5, 2.5
    assert conv([a, b]) == [3.0, 5.0] and conv([a, b]) == [3.0, 5.0] and len(calls) == 1
    c = float("1.5")                       # equal to a, another object: converted again
    assert conv([c, b]) == [3.0, 5.0] and len(calls) == 2
    with pytest.raises(OverflowError):
        conv([-1.0])
    with pytest.raises(OverflowError):     # an error is not kept as a result
        conv([-1.0])
    assert conv([c, b]) == [3.0, 5.0] and len(calls) == 4


@needs_lib
def test_a_plan_reuses_the_slots_of_the_same_number_objects(fakes, rng, monkeypatch):
    """A loop passing the same number object (a literal) converts it once; another object, even of
    an equal value with the other sign, is converted again, and every result is numpy's."""
    from pyew.kinds import map as map_kind
    converted = []
    real = map_kind.weak_scalar_bits
    monkeypatch.setattr(map_kind, "weak_scalar_bits", lambda v, info: converted.append(v) or real(v, info))
    a = rng.standard_normal(100).astype(np.float32)
    x = pyew.asarray(a)
    half = 0.5
    for _ in range(4):
        np.testing.assert_array_equal(pyew.mul(x, half).get(), a * np.float32(0.5))
    assert len(converted) <= 2          # the call that made the plan may convert it on the general path too
    before = len(converted)
    for k in (0.25, 0.0, -0.0, half):
        np.testing.assert_array_equal(pyew.mul(x, k).get(), a * np.float32(k))
    assert len(converted) == before + 4
    assert np.signbit(pyew.mul(x, -0.0).get()[a > 0]).all()


@needs_lib
def test_python_numbers_off_the_short_path(fakes, rng):
    """What plans leave to the general path gives numpy's answers and errors: promotion
    (an int32 array with 0.5, bfloat16 with 0.5), a float overflowing float32, ints beyond 2^53 or
    the dtype's range, a bool, out= of another dtype, or a shifted overlap."""
    i = np.arange(-50, 50, dtype=np.int32)
    xi = pyew.asarray(i)
    got = pyew.mul(xi, 0.5)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.get(), i * 0.5)
    a = rng.standard_normal(100).astype(np.float32)
    x = pyew.asarray(a)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(pyew.add(x, 1e300).get(), a + np.float32(np.inf))
    np.testing.assert_array_equal(pyew.add(x, 2**60).get(), a + np.float32(2**60))
    np.testing.assert_array_equal(pyew.add(xi, True).get(), i + True)
    b = a.astype(BF16)
    got = pyew.mul(pyew.asarray(b), 0.5)
    assert got.dtype == (b * 0.5).dtype == np.float32
    np.testing.assert_array_equal(got.get(), b * 0.5)
    launches = fakes[1].launches
    launches.clear()
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        pyew.add(xi, 2**40)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float32'\\) to "
                                        "dtype\\('int32'\\)"):
        pyew.add(x, 1.0, out=pyew.empty(100, "int32"))
    assert not launches
    o = pyew.asarray(np.full(100, 7, np.uint32))
    with pytest.raises(TypeError, match="greater: the result is bool and out is uint32, but the library has no "
                                        "cast from bool to uint32"):
        pyew.greater(x, 0.0, out=o)                    # numpy would allow it: the missing cast, before running
    with pytest.raises(TypeError, match="no cast from bool to uint32"):
        np.greater(x, 0.0, out=o)
    assert not launches
    np.testing.assert_array_equal(o.get(), 7)
    np.testing.assert_array_equal(x.get(), a)
    pyew.add(x, 1.0, out=x)                              # exactly the input: in place
    np.testing.assert_array_equal(x.get(), a + np.float32(1))


@needs_lib
def test_full_slot_table_falls_back_to_a_buffer_per_call(fakes, rng, monkeypatch):
    from pyew import memory
    monkeypatch.setattr(memory, "_CONSTANT_SLOTS", 2)
    a = rng.standard_normal(40).astype(np.float32)
    x = pyew.asarray(a)
    for k in (1.0, 2.0, 3.0, 4.0, 1.0):
        np.testing.assert_array_equal(pyew.add(x, k).get(), a + np.float32(k))
        np.testing.assert_array_equal(pyew.add(a, k), a + np.float32(k))           # numpy in, too
    assert memory._constants[0].used == 2 and set(memory._constants[0].slots) == {(0x3f800000, 4), (0x40000000, 4)}


@needs_lib
def test_device_broadcasts_take_a_cached_layout(fakes, rng, monkeypatch):
    """DeviceArrays of one dtype and broadcast shapes (a row bias, a channel bias, with a number)
    are classified once into a plan (the strided entry and its layout) and replayed; what does
    not broadcast, or needs more than 8 dims, gets the general path's error."""
    from pyew import call
    x = rng.standard_normal((6, 4, 5)).astype(np.float32)
    row, chan = rng.standard_normal(5).astype(np.float32), rng.standard_normal((4, 1)).astype(np.float32)
    dx, drow, dchan = pyew.asarray(x), pyew.asarray(row), pyew.asarray(chan)
    call.plans().clear()
    classified = []
    prepare = call.prepare
    monkeypatch.setattr(call, "prepare", lambda *a, **k: classified.append(a[0].name) or prepare(*a, **k))
    for _ in range(3):
        np.testing.assert_array_equal(pyew.add(dx, drow).get(), x + row)
        np.testing.assert_array_equal(pyew.mul(dchan, dx).get(), chan * x)
        np.testing.assert_array_equal(pyew.sub(dx, 0.25).get(), x - np.float32(0.25))
        np.testing.assert_array_equal(pyew.sub(dx, 0.75).get(), x - np.float32(0.75))   # another number: same plan
    assert classified == ["add", "mul", "sub"]          # once each, then replayed from the plan
    y = pyew.asarray(x)
    assert pyew.add(y, drow, out=y) is y                       # in place over the big operand
    np.testing.assert_array_equal(y.get(), x + row)
    with pytest.raises(ValueError, match="do not broadcast"):
        pyew.add(dx, pyew.asarray(np.ones(3, np.float32)))
    nine = pyew.asarray(np.ones((2,) * 9, np.float32))
    with pytest.raises(ValueError, match="needs 9 dims after collapsing"):
        pyew.add(nine, pyew.asarray(np.ones((2, 1) * 4 + (2,), np.float32)))
    big = pyew.asarray(np.zeros(6 * 4 * 5 + 1, np.float32))
    # an out overlapping an input in part: as numpy, the input is read before the out is written
    pyew.add(big[:-1].reshape(6, 4, 5), drow, out=big[1:].reshape(6, 4, 5))
    np.testing.assert_array_equal(big.get(), np.concatenate([[0], np.broadcast_to(row, (6, 4, 5)).ravel()]))


# ---- bool, comparisons and where's fixed condition ------------------------------------------------------

@pytest.mark.parametrize("ops,want", [
    ((_arr(np.bool_), _arr(np.int32)), np.int32),
    ((_arr(np.bool_), _arr(np.bool_)), np.bool_),
    ((_py(True), _arr(np.float16)), np.float16),         # a Python bool is weak too
    ((_py(True), _arr(np.int32)), np.int32),
    ((_arr(np.bool_), _py(1)), np.int64),
    ((_arr(np.bool_), _py(2.5)), np.float64),
    ((_arr(np.bool_), _arr(BF16)), BF16),
    ((_arr(np.bool_), _arr(np.float16)), np.float16),
])
def test_promotion_with_bool_follows_numpy(ops, want):
    assert result_dtype(list(ops), "op") == np.dtype(want)


def test_bool_is_a_dtype_of_one_byte():
    b = dt.lookup(np.bool_)
    assert b is dt.BY_NAME["bool"] is dt.lookup("|b1") and b.itemsize == 1 and b.kind == "bool"
    assert b.ctype == b.compute == "bool" and b.pair is None


@needs_lib
def test_comparisons_and_tests_return_bool(fakes, rng):
    x = rng.standard_normal(3000).astype(np.float32)
    y = rng.standard_normal(3000).astype(np.float32)
    x[::7] = np.nan
    for name, want in (("greater", x > y), ("less_equal", x <= y), ("not_equal", x != y),
                       ("isnan", np.isnan(x)), ("logical_not", np.logical_not(x))):
        got = getattr(pyew, name)(*((x, y) if name in ("greater", "less_equal", "not_equal") else (x,)))
        assert got.dtype == np.bool_, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    d = pyew.greater(pyew.asarray(x), 0.25)                  # a number against a DeviceArray
    assert d.dtype == np.bool_
    np.testing.assert_array_equal(d.get(), x > np.float32(0.25))
    b = rng.integers(0, 2, 3000).astype(bool)
    c = rng.integers(0, 2, 3000).astype(bool)
    np.testing.assert_array_equal(pyew.add(b, c), b + c)     # numpy's add of bools: or
    np.testing.assert_array_equal(pyew.bitwise_xor(pyew.asarray(b), c).get(), b ^ c)
    np.testing.assert_array_equal(pyew.add(b, np.arange(3000, dtype=np.int32)), b + np.arange(3000, dtype=np.int32))


@needs_lib
def test_where_converts_its_condition_and_promotes_only_the_values(fakes, rng):
    n = 2001
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    c = rng.integers(0, 2, n).astype(bool)
    f = np.where(c, rng.standard_normal(n), 0.0).astype(np.float32)     # a float condition: nonzero is true
    f[::11] = np.nan
    got = pyew.where(c, x, y)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.where(c, x, y))
    fakes[1].launches.clear()
    np.testing.assert_array_equal(pyew.where(f, x, y), np.where(f, x, y))       # converted by to_bool
    assert fakes[1].launches.count("forward") == 2
    # DeviceArrays of one dtype: a float32 condition must not reach the kernel as if it were bool
    dev = pyew.where(pyew.asarray(f), pyew.asarray(x), pyew.asarray(y))
    np.testing.assert_array_equal(dev.get(), np.where(f, x, y))
    # the condition takes no part in promotion; Python numbers are weak
    i = np.arange(n, dtype=np.int32)
    for args in ((c, i, 2.5), (f, i, y.astype(np.float16)), (c, x.astype(np.float16), 3), (True, i, 7),
                 (np.float64(0), x, y), (c, 1.5, 2)):
        want = np.where(*args)
        got = pyew.where(*args)
        assert got.dtype == want.dtype, (args, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
    b = pyew.where(pyew.asarray(c), pyew.asarray(c), False)                    # all bool: a plan
    np.testing.assert_array_equal(b.get(), c)
    # broadcasting, with the condition a row
    m = rng.standard_normal((5, 7)).astype(np.float32)
    row = rng.integers(0, 2, 7).astype(bool)
    np.testing.assert_array_equal(pyew.where(row, m, -m), np.where(row, m, -m))


@needs_lib
def test_storage_dtypes_take_the_kernel_they_cast_to(fakes, rng):
    """int8, uint8, int16 and uint16 run in the smallest kernel they cast to safely, as numpy picks
    a loop: arithmetic in int32 (exact where numpy's uint8 wraps), functions in float16 or float32."""
    u = np.array([0, 1, 200, 255], np.uint8)
    got = pyew.add(u, u)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, u.astype(np.int32) * 2)
    assert pyew.sigmoid(u).dtype == np.float16 and pyew.sigmoid(u.astype(np.int16)).dtype == np.float32
    assert pyew.mul(pyew.asarray(u), np.float32(2)).dtype == np.float32        # numpy's rule
    assert (pyew.asarray(u) * 0.5).dtype == np.float64
    np.testing.assert_array_equal(pyew.where(u, 1, 0), np.where(u, 1, 0))


@needs_lib
def test_where_refuses_a_condition_it_cannot_convert(fakes, rng):
    mask = np.arange(10, dtype=np.uint32)          # relu_mask's word type: no to_bool kernel
    x = np.ones(10, np.float32)
    with pytest.raises(TypeError, match=r"where: input 'condition' is uint32 and the op's input 'condition' is "
                                        r"always bool, but the library has no cast from uint32 to bool \(op to_bool\)"):
        pyew.where(mask, x, x)


@needs_lib
def test_ops_know_their_ufunc_and_fixed_inputs(fakes):
    man = pyew.library.get().manifest
    assert man.op("sub").ufunc == "subtract" and man.op("add").ufunc is None
    where = man.op("where")
    assert where.fixed == {"condition": dt.BY_NAME["bool"]} and man.op("add").fixed == {}
    k = where.kernel(dt.BY_NAME["float16"])
    assert [d.name for d in k.in_dtypes] == ["bool", "float16", "float16"]
    assert [d.name for d in man.op("add").kernel(dt.BY_NAME["int32"]).in_dtypes] == ["int32", "int32"]
    assert man.op("sqrt").ulp == 0 and man.op("sqrt").launch == "basic" and man.op("gelu").launch == "tuned"
    assert "Input condition is always bool" in pyew.where.__doc__
    assert "numpy's subtract." in pyew.sub.__doc__


@needs_lib
def test_one_dispatch_replays_plans_for_every_gpu_operand_kind(fakes, rng, monkeypatch):
    """DeviceArrays, Python numbers, params and other libraries' GPU arrays (here a bare CUDA Array
    Interface) are classified once per kind of call and replayed; a replayed call whose out=
    overlaps an input in part, or whose number does not fit, gets the general path's error and
    changes nothing."""
    from pyew import call
    a = rng.standard_normal(64).astype(np.float32)
    x, keep = pyew.asarray(a), pyew.asarray(a)

    class Foreign:
        def __init__(self, d):
            self.d = d

        @property
        def __cuda_array_interface__(self):
            return {"shape": self.d.shape, "typestr": "<f4", "data": (self.d.ptr, False), "version": 3,
                    "strides": None, "stream": 1}

    call.plans().clear()                # plans of earlier tests' calls of these kinds
    classified = []
    prepare = call.prepare
    monkeypatch.setattr(call, "prepare", lambda *args, **k: classified.append(args[0].name) or prepare(*args, **k))
    for _ in range(3):
        np.testing.assert_array_equal(pyew.add(x, x).get(), a + a)
        np.testing.assert_array_equal(pyew.mul(x, 2.0).get(), a * np.float32(2))
        np.testing.assert_array_equal(pyew.scale(x, alpha=3.0).get(), a * np.float32(3))
        np.testing.assert_array_equal(pyew.sub(Foreign(keep), x).get(), np.zeros(64, np.float32))
    assert classified == ["add", "mul", "scale", "sub"]
    np.testing.assert_array_equal(pyew.scale(x, alpha=0.5).get(), a * np.float32(0.5))   # another param: a plan
    assert classified[-1] == "scale"
    xi = pyew.asarray(np.arange(64, dtype=np.int32))
    pyew.add(xi, 1)
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        pyew.add(xi, 2**40)                                 # the plan's number does not fit: the general error
    # an out overlapping an input in part reads the input first, as numpy: the general path, then
    # the same through the plan the call before made
    pyew.add(keep[1:], keep[1:], out=keep[:-1])
    np.testing.assert_array_equal(keep.get(), np.concatenate([a[1:] * 2, a[-1:]]))
    pyew.add(x[1:], x[1:])
    pyew.add(x[1:], x[1:], out=x[:-1])
    np.testing.assert_array_equal(x.get(), np.concatenate([a[1:] * 2, a[-1:]]))


@needs_lib
def test_small_numpy_calls_replay_a_host_plan(fakes, rng, monkeypatch):
    """numpy arrays of the kernel's dtype and one shape: classified once, then each call goes up,
    through the kernel and back in one shot, a numpy out= too; what a host plan does not cover (a
    big call, a byte order not the machine's) goes through the general path."""
    from pyew import call
    call.plans().clear()
    a = rng.standard_normal(37).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    classified = []
    prepare = call.prepare
    monkeypatch.setattr(call, "prepare", lambda *args, **k: classified.append(args[0].name) or prepare(*args, **k))
    for _ in range(3):
        np.testing.assert_array_equal(pyew.add(a, b), a + b)
        got = pyew.sigmoid(a)
        np.testing.assert_allclose(got, 1 / (1 + np.exp(-a.astype(np.float64))), rtol=1e-6)
    assert classified == ["add", "sigmoid"]
    o = np.full(37, np.nan, np.float32)
    assert pyew.add(a, b, out=o) is o
    np.testing.assert_array_equal(o, a + b)
    with pytest.raises(TypeError, match="which pyew does not support"):
        pyew.add(a.astype(">f4"), b)                                    # a key of its own: not the plan's
    np.testing.assert_array_equal(pyew.add(a, 2.0), a + np.float32(2))
    old = pyew.set_transfer_limits(small_bytes=64)
    try:
        np.testing.assert_array_equal(pyew.add(a, b), a + b)            # too big for one shot: streamed
    finally:
        pyew.set_transfer_limits(**old)
    assert classified.count("add") == 4


@needs_lib
def test_numpy_calls_with_numbers_and_rows_replay_a_host_plan(fakes, rng, monkeypatch):
    """Numbers, rows (ones, then the result's last dims) and columns (its first dims, then ones)
    join a host plan: classified once per kind of call, each later call with other values right;
    calls large enough for parts go in runs of whole rows, each reading the rows whole and its part
    of a column. An operand broadcast in a middle dim goes the general path, each call."""
    from pyew import call, transfer
    call.plans().clear()
    x = rng.standard_normal((16, 128, 1024)).astype(np.float32)        # 8 MiB: parts
    w, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal((128, 1024)).astype(np.float32)
    col = rng.standard_normal((16, 128, 1)).astype(np.float32)
    classified, parts = [], []
    prepare, split = call.prepare, transfer._parts
    monkeypatch.setattr(call, "prepare", lambda *args, **k: classified.append(args[0].name) or prepare(*args, **k))
    monkeypatch.setattr(transfer, "_parts", lambda *a: parts.append((a[2], split(*a))) or parts[-1][1])
    old = pyew.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    try:
        for v in (2.0, -0.5, 3.0):
            np.testing.assert_array_equal(pyew.mul(x, v), x * np.float32(v))
            np.testing.assert_array_equal(pyew.mul(v, x[0]), np.float32(v) * x[0])
            np.testing.assert_array_equal(pyew.add(x, w), x + w)
            np.testing.assert_array_equal(pyew.add(b, x), b + x)
            np.testing.assert_array_equal(pyew.clip(x, b, v), np.clip(x, b, np.float32(v)))
            np.testing.assert_array_equal(pyew.clip(x, w[:1], b), np.clip(x, w[:1], b))
            np.testing.assert_array_equal(pyew.add(x, col), x + col)
    finally:
        pyew.set_transfer_limits(**old)
    assert classified == ["mul", "mul", "add", "add", "clip", "clip", "add"]
    n = x.size
    for period, runs in parts:
        if runs:
            assert runs[0][0] == 0 and runs[-1][1] == n and all(a[1] == b_[0] for a, b_ in zip(runs, runs[1:]))
            assert all(lo % math.lcm(period, 256) == 0 for lo, _ in runs)
    assert {p for p, runs in parts if runs} >= {1, 128 * 1024}        # numbers, and rows of (128, 1024)
    assert sum(1 for _, r in parts if len(r) == transfer._OVERLAP_PARTS) >= 3 * 6
    # size-1 operands are rows too, an outer product a column and a row, a channel bias a row; a
    # middle broadcast of an operand with the result's first dim, a 0-d array or n = 0 are not
    shapes = {((3,), (1,)): 1, ((1, 2, 1), (1,)): 1, ((3,), ()): 3, ((), (6, 2)): 3, ((1, 1), (1, 3)): 1,
              ((2, 1, 2, 1), (1,)): 1, ((4, 1), (1, 5)): 1, ((4, 8, 10), (8, 1)): 1, ((2, 3, 1, 6), (3, 7, 1)): 3,
              ((6, 5, 4), (6, 1, 4)): 3, ((2, 5, 3, 7), (5, 1, 7)): 1,
              ((5, 0, 3), (3,)): 3, ((6, 5, 4), (6, 1, 1)): 1, ((6, 5, 4), (6, 5, 1)): 1}
    for (sa, sb), times in shapes.items():
        a, c = (np.asarray(rng.standard_normal(s), np.float32) for s in (sa, sb))
        classified.clear()
        for _ in range(3):
            got = pyew.add(a, c)
            assert got.shape == np.broadcast_shapes(sa, sb)
            np.testing.assert_array_equal(got, a + c)
        assert len(classified) == times, (sa, sb)
    i32 = np.arange(-50, 50, dtype=np.int32)
    for v in (1 << 40, 3, 1 << 40):     # out of int32's range: refused as numpy does, the plan or not
        if v > 3:
            with pytest.raises(OverflowError):
                pyew.add(i32, v)
        else:
            np.testing.assert_array_equal(pyew.add(i32, v), i32 + np.int32(v))


@needs_lib
def test_numpy_scalars_join_plans_keyed_by_their_type(fakes, rng, monkeypatch):
    """A numpy scalar is one of a plan's numbers, keyed by its type, which fixes numpy's promotion
    (NEP 50): with DeviceArrays and with numpy arrays, classified once, each later call with another
    value right; a type that widens the result (np.float64 with float32) takes the general path each
    call, with numpy's dtype."""
    from pyew import call
    call.plans().clear()
    classified = []
    prepare = call.prepare
    monkeypatch.setattr(call, "prepare", lambda *args, **k: classified.append(args[0].name) or prepare(*args, **k))
    a = rng.standard_normal(1003).astype(np.float32)
    h, i = a.astype(np.float16), np.arange(-500, 503, dtype=np.int32)
    d, j = a.astype(np.float64), i.astype(np.int64)
    x, xh, xi, xd, xj = pyew.asarray(a), pyew.asarray(h), pyew.asarray(i), pyew.asarray(d), pyew.asarray(j)
    for v in (2.0, -0.5, 3.0):
        for got, want in ((pyew.mul(x, np.float32(v)), a * np.float32(v)),
                          (pyew.add(x, np.float16(v)), a + np.float16(v)),           # converted exactly
                          (pyew.div(xd, np.int32(2 * v)), d / np.int32(2 * v)),
                          (pyew.sub(xj, np.uint32(abs(v))), j - np.uint32(abs(v))),
                          (pyew.add(xi, np.bool_(v > 0)), i + np.bool_(v > 0)),
                          (pyew.sub(np.float16(v), xh), np.float16(v) - h),
                          (pyew.mul(a[:37], np.float32(v)), a[:37] * np.float32(v)),     # one shot
                          (pyew.add(xi, np.int32(v)), i + np.int32(v)),
                          (pyew.maximum(x, np.bool_(v > 0)), np.maximum(a, np.bool_(v > 0))),
                          (pyew.mul(x, np.float64(v)), a * np.float64(v)),
                          (pyew.add(xi, np.int64(v)), i + np.int64(v))):
            got = got if isinstance(got, np.ndarray) else got.get()
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    assert classified.count("sub") == 2 and classified.count("maximum") == classified.count("div") == 1
    assert classified.count("mul") == 2 + 3 and classified.count("add") == 3 + 3
    assert {np.float32, np.float16, np.int32, np.bool_} <= {p for k in call.plans() for p in k}


@needs_lib
def test_host_plans_write_a_numpy_out(fakes, rng, monkeypatch):
    """A numpy out= of the result's shape and dtype, C-ordered, takes the host plan's result (in
    place over an input too); one of another dtype, a strided one and one overlapping an input in
    part go the general path, which writes what numpy would."""
    from pyew import call
    call.plans().clear()
    classified = []
    prepare = call.prepare
    monkeypatch.setattr(call, "prepare", lambda *args, **k: classified.append(args[0].name) or prepare(*args, **k))
    x = rng.standard_normal((64, 33)).astype(np.float32)
    w = rng.standard_normal(33).astype(np.float32)
    o = np.full_like(x, np.nan)
    old = pyew.set_transfer_limits(small_bytes=64 << 20)
    try:
        for v in (1.5, 2.5):
            assert pyew.mul(x, v, out=o) is o
            np.testing.assert_array_equal(o, x * np.float32(v))
            assert pyew.add(x, w, out=o) is o
            np.testing.assert_array_equal(o, x + w)
        assert classified == ["mul", "add"]
        y = x.copy()
        assert pyew.add(y, w, out=y) is y                    # in place: exactly the input
        np.testing.assert_array_equal(y, x + w)
        assert classified == ["mul", "add"]
    finally:
        pyew.set_transfer_limits(**old)
    o64 = np.full(x.shape, np.nan)
    assert pyew.add(x, w, out=o64) is o64                # another dtype: cast as numpy's out= does
    np.testing.assert_array_equal(o64, (x + w).astype(np.float64))
    wide = np.full((64, 66), np.nan, np.float32)
    pyew.add(x, w, out=wide[:, ::2])                     # strided
    np.testing.assert_array_equal(wide[:, ::2], x + w)
    assert np.isnan(wide[:, 1::2]).all()
    z = np.concatenate([x.reshape(-1), np.zeros(33, np.float32)])
    a, b = z[:64 * 33].reshape(64, 33), z[33:].reshape(64, 33)
    want = a + w
    assert pyew.add(a, w, out=b) is b                    # overlapping in part: the input copied first
    np.testing.assert_array_equal(b, want)


@needs_lib
def test_host_plan_parts_are_runs_of_whole_rows(fakes, rng, monkeypatch):
    """With parts of a few KiB, calls whose rows (96 elements, a period that does not divide a
    quarter of the call) and columns go in parts: every part starts at a whole row, and the results
    are numpy's; a pinned out= one row ahead of its pinned input (overlapping in part) is not
    written before the input is read; a read-only out= is refused, unwritten."""
    from pyew import call, transfer
    call.plans().clear()
    monkeypatch.setattr(transfer, "_OVERLAP_PART_BYTES", 4096)
    seen, split = [], transfer._parts
    monkeypatch.setattr(transfer, "_parts", lambda *a: seen.append((a[2], split(*a))) or seen[-1][1])
    x = rng.standard_normal((101, 96)).astype(np.float32)
    w, col = rng.standard_normal(96).astype(np.float32), rng.standard_normal((101, 1)).astype(np.float32)
    old = pyew.set_transfer_limits(small_bytes=64 << 20)
    try:
        for _ in range(2):
            for got, want in ((pyew.add(x, w), x + w), (pyew.mul(x, col), x * col),
                              (pyew.clip(x, col, w), np.clip(x, col, w)), (pyew.mul(x, 3.0), x * np.float32(3))):
                np.testing.assert_array_equal(got, want)
        runs = [(p, r) for p, r in seen if r]
        assert len(runs) == 8 and all(len(r) >= 2 and all(lo % p == 0 for lo, _ in r) for p, r in runs)
        assert {p for p, _ in runs} == {96, 1}
        z = pyew.empty_pinned((513, 96), "float32")           # 192 KiB: by DMA, in parts
        z[...] = rng.standard_normal(z.shape)
        a, b = z[:512], z[1:]
        want = a + w
        assert pyew.add(a, w, out=b) is b
        np.testing.assert_array_equal(b, want)
        o = np.zeros_like(x)
        o.flags.writeable = False
        with pytest.raises(ValueError, match="add: out is a read-only numpy array"):
            pyew.add(x, w, out=o)
        assert not o.any()
    finally:
        pyew.set_transfer_limits(**old)


@needs_lib
def test_plans_keep_numbers_alone_and_params_apart(fakes, rng):
    """Python numbers alone stay a numpy call even after one with a GPU out=; a param's -0.0 is not
    its 0.0, NaN finds its own plan, and a param of the wrong type gets its error."""
    o = pyew.empty((), "float64")
    pyew.add(1.0, 2.0, out=o)
    r = pyew.add(1.0, 2.0)
    assert type(r) is np.float64 and r == 3.0               # numpy's scalar, as np.add(1.0, 2.0)
    x = pyew.asarray(np.array([1.0, -2.0], np.float32))
    for alpha in (0.0, -0.0, 0.0, float("nan"), float("nan")):
        got = pyew.scale(x, alpha=alpha).get()
        want = np.array([1.0, -2.0], np.float32) * np.float32(alpha)
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want)).all(), alpha
    with pytest.raises(TypeError, match="must be a float"):
        pyew.scale(x, alpha=[1.0])


def test_op_functions_made_under_the_stand_ins_launch_through_them(fakes, rng):
    """The C replay runs only while launches go to libew's own `library.launch`, whenever the op
    functions were made: functions made with a stand-in installed send every call to it."""
    from pyew import kinds
    _, kernels = fakes
    kinds.reset()                           # the op functions made again, now, under the stand-in
    a, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    x, y = pyew.asarray(a), pyew.asarray(b)
    before = len(kernels.launches)
    for _ in range(3):                      # the first makes the plan, the others replay it
        r = pyew.add(x, y)
    assert kernels.launches[before:] == ["forward"] * 3
    np.testing.assert_allclose(r.get(), a.astype(np.float64) + b, rtol=2**-24)
    m = pyew.mul(x, 0.5)
    m = pyew.mul(x, 0.5)
    assert kernels.launches[before + 3:] == ["strided"] * 4      # each call: the whole packs, then the rest
    np.testing.assert_array_equal(m.get(), a * np.float32(0.5))
