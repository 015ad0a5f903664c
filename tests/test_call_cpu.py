"""pyew's call layer without a GPU: numpy 2's promotion, kernel choice, broadcasting and dimension
collapsing as pure functions, then whole op calls through the real call pipeline and transfer
engine over stand-ins for the CUDA runtime and the kernels (tests/fake_cuda.py, fake_kernels.py)."""
from __future__ import annotations

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


@needs_lib
def test_errors_change_nothing(fakes, rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = np.full(100, 7.0, np.float32)
    with pytest.raises(ValueError, match="result is float32 \\(100,\\)"):
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
    """DeviceArrays of one dtype and shape and nothing else (the short path): the result is
    allocated on the current stream and each input's buffer records the stream that used it, as on
    the general path; empty arrays, and calls off that path, still work."""
    a = rng.standard_normal(3001).astype(np.float32)
    x = pyew.asarray(a)
    s = pyew.ExternalStream(0x5000)        # another library's stream (a Stream needs a real GPU)
    with s:
        y = pyew.sigmoid(x)
    assert y._buf.stream is s and x._buf.last is s and s in x._buf.others
    z = pyew.add(y, x)
    assert z._buf.stream is pyew.runtime.DEFAULT_STREAM and y._buf.last is pyew.runtime.DEFAULT_STREAM
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
    """One GPU: DeviceArray inputs with a read-only import as out= leave the short path and get
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
