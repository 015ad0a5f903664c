"""DeviceArray, streams, memory and error paths on the GPU."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt

from .helpers import poison, random_array
from .reference import assert_matches

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [d.name for d in dt.TABLE])
def test_asarray_get_roundtrip(dtype, rng):
    a = random_array(rng, (3, 5, 7), dtype)
    d = pyew.asarray(a)
    assert d.shape == (3, 5, 7) and d.dtype == a.dtype and d.size == 105 and d.ndim == 3
    assert d.nbytes == a.nbytes
    np.testing.assert_array_equal(d.get(), a)
    with pytest.raises(TypeError, match=r"call \.get\(\)"):
        np.asarray(d)                       # no implicit copy to the host, as CuPy
    np.testing.assert_array_equal(d.copy().get(), a)
    np.testing.assert_array_equal(d.reshape(-1).get(), a.reshape(-1))
    np.testing.assert_array_equal(d[1:3].get(), a[1:3])
    np.testing.assert_array_equal(d[2].get(), a[2])
    np.testing.assert_array_equal(d[-1].get(), a[-1])
    assert repr(d).startswith("DeviceArray([[[") and repr(d).endswith(f"dtype={dtype}, device=0)")


def test_non_contiguous_numpy_input(rng):
    a = random_array(rng, (64, 64), "float32")
    t = a.T
    np.testing.assert_allclose(pyew.relu(t), np.maximum(t, 0))
    np.testing.assert_array_equal(pyew.asarray(a[::2]).get(), a[::2])


def test_view_shares_memory(rng):
    a = random_array(rng, 100, "float32")
    d = pyew.asarray(a)
    v = d[10:20]
    pyew.scale(v, out=v, alpha=2.0)
    want = a.copy()
    want[10:20] *= 2
    np.testing.assert_array_equal(d.get(), want)


def test_empty_zeros_and_zero_size():
    z = pyew.zeros((4, 3), "float16")
    assert z.dtype == np.float16 and np.all(z.get() == 0)
    e = pyew.empty(0, "float32")
    assert e.size == 0 and e.get().shape == (0,)
    assert pyew.gelu(e).shape == (0,)
    assert pyew.add(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)).shape == (0, 3)


def test_astype_matches_numpy(rng):
    a = random_array(rng, 1001, "float32", -70000, 70000)
    d = pyew.asarray(a)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(d.astype("float16").get(), a.astype(np.float16))
    np.testing.assert_array_equal(d.astype("float64").get(), a.astype(np.float64))
    np.testing.assert_array_equal(d.astype("float32").get(), a)
    np.testing.assert_array_equal(d.astype("int32").get(), a.astype(np.int32))      # toward zero
    np.testing.assert_array_equal(d.astype("int64").get(), a.astype(np.int64))
    with pytest.raises(TypeError, match="no cast"):
        d.astype("uint32")


def test_multidim_shapes(rng):
    a = random_array(rng, (7, 3, 5), "bfloat16")
    got = pyew.silu(a)
    assert got.shape == (7, 3, 5) and got.dtype == a.dtype


def test_errors_leave_out_untouched(rng):
    a = random_array(rng, 64, "float32")
    out = np.full(64, 5.0, np.float32)
    with pytest.raises(ValueError, match="non-broadcastable output operand with shape \\(63,\\)"):
        pyew.relu(a, out=np.empty(63, np.float32))
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float64'\\) to "
                                        "dtype\\('int32'\\)"):
        pyew.add(a, a.astype(np.float64), out=out.view(np.int32))
    with pytest.raises(ValueError, match="do not broadcast"):
        pyew.add(pyew.asarray(a), pyew.asarray(a[:32]))
    with pytest.raises(TypeError, match="must be a GPU array"):
        pyew.relu(pyew.asarray(a), out=out)
    d = pyew.asarray(a)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'relu' output"):
        pyew.relu(d, out=pyew.empty(64, "int32"))
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        pyew.add(np.arange(4, dtype=np.int32), 2**40)
    np.testing.assert_array_equal(out, 5.0)


def test_stream_ordering_and_free_across_streams(rng):
    """A buffer allocated on one stream and used on another must not be freed under that work."""
    a = random_array(rng, 1 << 22, "float32")
    s1, s2 = pyew.Stream(), pyew.Stream()
    x = pyew.asarray(a, stream=s1)
    s1.synchronize()
    y = pyew.sigmoid(x, stream=s2)
    del x
    gc.collect()
    z = pyew.sigmoid(y, stream=s2)
    s2.synchronize()
    np.testing.assert_allclose(z.get(), 1 / (1 + np.exp(-1 / (1 + np.exp(-a.astype(np.float64))))), rtol=1e-6)


def test_pool_reuses_memory(rng):
    """Freed outputs go back to the pool and are reused: 200 results of 4 MiB must not reserve
    anywhere near 200 x 4 MiB."""
    from cuda.bindings import runtime as crt
    pool = pyew.runtime.device().pool
    x = pyew.asarray(random_array(rng, 1 << 20, "float32"))
    pyew.synchronize()
    before = int(pyew.runtime.check(crt.cudaMemPoolGetAttribute(
        pool, crt.cudaMemPoolAttr.cudaMemPoolAttrReservedMemCurrent), "cudaMemPoolGetAttribute"))
    for _ in range(200):
        y = pyew.relu(x)
    pyew.synchronize()
    after = int(pyew.runtime.check(crt.cudaMemPoolGetAttribute(
        pool, crt.cudaMemPoolAttr.cudaMemPoolAttrReservedMemCurrent), "cudaMemPoolGetAttribute"))
    assert after - before < 64 << 20, f"pool grew by {(after - before) >> 20} MiB over 200 calls"
    np.testing.assert_array_equal(y.get(), np.maximum(x.get(), 0))


def test_device_info():
    info = pyew.device_info()
    assert info["sms"] > 0 and info["threads_per_sm"] >= 1024 and info["total_memory"] > 0
    assert isinstance(info["name"], str) and info["capability"][0] >= 7


def test_cuda_array_interface_shares_memory(rng):
    torch = pytest.importorskip("torch")
    a = random_array(rng, 1000, "float32")
    d = pyew.asarray(a)
    t = torch.as_tensor(d, device="cuda")
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), a)


def test_index_past_int32(rng):
    """n >= 2^31 in one launch: the 64-bit index path, checked around the 2^31 boundary."""
    n = 2**31 + 9000
    pyew.synchronize()
    pyew.runtime.trim_pool()              # memory cached by earlier tests counts as free
    info = pyew.device_info()
    if info["free_memory"] < 3 * n * 2 + (1 << 30):
        pytest.skip("not enough GPU memory for 2^31 float16 elements")
    x = pyew.empty(n, "float16")
    pyew.call.fill(x.ptr, n, x.info, int(np.array(1.5, np.float16).view(np.uint16)), pyew.runtime.DEFAULT_STREAM)
    chunks = [0, 2**31 - 4096, n - 3000]   # the head, across 2^31, the tail; disjoint
    host = {}
    for c in chunks:
        m = min(8192, n - c)
        host[c] = random_array(rng, m, "float16")
        pyew.runtime.copy_htod(x.ptr + 2 * c, host[c].ctypes.data, host[c].nbytes, pyew.runtime.DEFAULT_STREAM.cu)
    y = poison(pyew.empty(n, "float16"))
    pyew.hardswish(x, out=y)
    for c, h in host.items():
        got = y[c:c + h.size].get()
        h64 = h.astype(np.float64)
        want = np.where(h64 <= -3, 0, np.where(h64 >= 3, h64, h64 * (h64 + 3) / 6))
        assert_matches(got, want, dt.lookup("float16"), f"y[{c}:{c + h.size}]")   # 16-bit forms: 1 ulp
    mid = y[2**31 - 10000: 2**31 - 4096].get()
    assert np.all(mid == np.float16(1.5 * 4.5 / 6))
    assert_matches(y[n - 1:].get(), want[-1:], dt.lookup("float16"), "y[n - 1]")


def test_device_fast_path_with_out(rng):
    """DeviceArray inputs with out=: a fitting out is written (in place too); out of the wrong
    dtype or shape, or a shifted view of an input, gets the general path's errors."""
    a, b = random_array(rng, 4099, "float32"), random_array(rng, 4099, "float32")
    x, y = pyew.asarray(a), pyew.asarray(b)
    out = poison(pyew.empty(4099, "float32"))
    assert pyew.add(x, y, out=out) is out
    np.testing.assert_array_equal(out.get(), a + b)
    assert pyew.add(x, y, out=x) is x                     # exactly an input: in place
    np.testing.assert_array_equal(x.get(), a + b)
    # numpy's out=: another dtype cast with 'same_kind', a partly overlapping out read first
    o16 = poison(pyew.empty(4099, "float16"))
    assert pyew.add(x, y, out=o16) is o16
    np.testing.assert_array_equal(o16.get(), (x.get() + b).astype(np.float16))
    with pytest.raises(ValueError, match="non-broadcastable output operand with shape \\(4098,\\)"):
        pyew.add(x, y, out=pyew.empty(4098, "float32"))
    keep = y.get()
    pyew.add(y[1:], y[1:], out=y[:-1])
    np.testing.assert_array_equal(y.get(), np.concatenate([keep[1:] + keep[1:], keep[-1:]]))


def test_small_buffers_are_reused_on_the_default_stream(rng):
    """A freed small result's memory serves the next same-size allocation on the default stream,
    and what was computed into the reused memory is right; other streams allocate afresh."""
    a = random_array(rng, 1237, "float32")             # a size no other test frees
    x = pyew.asarray(a)
    y = pyew.relu(x)
    ptr = y.ptr
    del y
    z = pyew.sigmoid(x)                                   # same size: y's memory
    assert z.ptr == ptr
    np.testing.assert_allclose(z.get(), 1 / (1 + np.exp(-a.astype(np.float64))), rtol=1e-6)
    s = pyew.Stream()
    w = pyew.relu(pyew.asarray(a, stream=s), stream=s)
    s.synchronize()
    del z
    assert pyew.relu(x).ptr == ptr
    np.testing.assert_array_equal(w.get(), np.maximum(a, 0))
