"""Several GPUs: device selection, arrays that know their device, ops on the GPU of their inputs,
peer copies, other libraries' arrays on the second GPU, and threads on different GPUs. Tests that
need two GPUs skip on a machine with one."""
from __future__ import annotations

import numpy as np
import pytest

import pyew
from pyew import dlpack

from .helpers import poison, random_array, run_in_threads

pytestmark = pytest.mark.gpu


@pytest.fixture
def two_gpus():
    if pyew.device_count() < 2:
        pytest.skip("needs two GPUs")


def test_one_gpu_basics(rng):
    assert pyew.device_count() >= 1
    x = pyew.asarray(random_array(rng, 100, "float32"))
    assert x.device == pyew.Device() and x.__dlpack_device__() == (dlpack.KDL_CUDA, x.device.id)
    assert x.to_device(x.device) is x
    assert pyew.Device(0).info()["sms"] > 0
    with pytest.raises(ValueError, match="no CUDA device"):
        pyew.Device(pyew.device_count())


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64"])
def test_ops_run_on_the_second_gpu(two_gpus, rng, dtype):
    n = 100_003
    a, b = random_array(rng, n, dtype), random_array(rng, n, dtype)
    x, y = pyew.asarray(a, device=1), pyew.asarray(b, device=1)
    assert x.device.id == 1 and pyew.Device().id == 0
    out = poison(pyew.empty(n, dtype, device=1))
    pyew.add(x, y, out=out)
    want = (a.astype(np.float64) + b.astype(np.float64)).astype(a.dtype) if dtype != "int64" else a + b
    np.testing.assert_array_equal(out.get(), want)
    z = pyew.mul(x[1:], 3)                                   # a misaligned view, a scalar: the general path
    assert z.device.id == 1
    np.testing.assert_allclose(z.get().astype(np.float64), a[1:].astype(np.float64) * 3, rtol=1e-2)
    assert pyew.Device().id == 0


def test_numpy_calls_go_to_the_current_gpu(two_gpus, rng, transfer_limits):
    a = random_array(rng, (1 << 22) + 5, "float32")
    pyew.runtime.reset_pool_peak(1)
    for small in (64 << 20, 0):                               # one shot (32 MiB moved), then streamed
        pyew.set_transfer_limits(small_bytes=small)
        with pyew.Device(1):
            r = pyew.sigmoid(a)
            assert pyew.Device().id == 1
        assert pyew.Device().id == 0
        np.testing.assert_allclose(r, 1 / (1 + np.exp(-a.astype(np.float64))), rtol=2e-6)
    assert pyew.runtime.pool_usage(1)["used_peak"] > 0


def test_peer_copies(two_gpus, rng):
    a = random_array(rng, (257, 33), "float32")
    x = pyew.asarray(a)
    y = x.to_device(1)
    assert y.device.id == 1 and y.shape == a.shape
    np.testing.assert_array_equal(y.get(), a)
    v = x[3:].to_device(pyew.Device(1))                       # a view at an odd offset
    np.testing.assert_array_equal(v.get(), a[3:])
    back = pyew.add(y, 1.0).to_device(0)
    np.testing.assert_array_equal(back.get(), a + 1)
    assert pyew.empty(0, device=0).to_device(1).size == 0
    assert pyew.asarray(y, device=0).device.id == 0


def test_mixed_devices_are_refused(two_gpus):
    x, y = pyew.zeros(8, device=0), pyew.zeros(8, device=1)
    with pytest.raises(ValueError, match=r"'y' is on cuda:1, but this call runs on cuda:0"):
        pyew.add(x, y)
    with pytest.raises(ValueError, match=r"out' is on cuda:0, but this call runs on cuda:1"):
        pyew.relu(y, out=x)
    with pytest.raises(ValueError, match="stream .* is on device 0, but this call runs on device 1"):
        y.get(stream=pyew.Stream(device=0))


def test_streams_belong_to_a_gpu(two_gpus, rng):
    a = random_array(rng, 5000, "float32")
    s = pyew.Stream(device=1)
    assert s.device.id == 1
    with s:
        x = pyew.asarray(a, device=1)
        r = pyew.relu(x)
    s.synchronize()
    np.testing.assert_array_equal(r.get(), np.maximum(a, 0))
    np.testing.assert_array_equal(pyew.relu(x, stream=s).get(), np.maximum(a, 0))


def test_torch_on_the_second_gpu(two_gpus, torch_cuda, rng):
    torch = torch_cuda
    a = random_array(rng, 10_001, "float32")
    t = torch.from_numpy(a).to("cuda:1")
    before = torch.cuda.current_device()
    r = pyew.gelu(t)
    assert r.device.id == 1 and torch.cuda.current_device() == before
    back = torch.from_dlpack(r)
    assert back.device == torch.device("cuda:1")
    ref = torch.nn.functional.gelu(t.double()).float()
    torch.testing.assert_close(back, ref, rtol=1e-5, atol=1e-6)
    out = torch.full_like(t, float("nan"))
    pyew.add(t, t, out=out)
    torch.cuda.synchronize(1)
    np.testing.assert_array_equal(out.cpu().numpy(), a + a)
    with pytest.raises(ValueError, match="is on cuda:0, but this call runs on cuda:1"):
        pyew.add(t, torch.zeros_like(t, device="cuda:0"))


def test_cupy_on_the_second_gpu(two_gpus, cupy, rng):
    a = random_array(rng, 4099, "float32")
    with cupy.cuda.Device(1):
        c = cupy.asarray(a)
        r = pyew.relu(c)
        cupy.cuda.get_current_stream().synchronize()
    assert r.device.id == 1
    np.testing.assert_array_equal(r.get(), np.maximum(a, 0))
    with cupy.cuda.Device(1):
        back = cupy.asarray(r)                                  # CUDA Array Interface out
        assert back.device.id == 1
        np.testing.assert_array_equal(cupy.asnumpy(back), np.maximum(a, 0))


def test_threads_on_different_gpus(two_gpus, rng):
    data = [random_array(rng, 1 << 20, "float32") for _ in range(2)]
    got = [None, None]

    def work(i):
        with pyew.Device(i):
            x = pyew.asarray(data[i])
            for _ in range(20):
                x = pyew.add(x, 1.0)
            got[i] = (x.device.id, x.get(), pyew.sigmoid(data[i]))

    run_in_threads(work, 2)
    for i in range(2):
        dev, x, s = got[i]
        assert dev == i
        np.testing.assert_allclose(x, data[i] + 20, rtol=1e-6)
        np.testing.assert_allclose(s, 1 / (1 + np.exp(-data[i].astype(np.float64))), rtol=2e-6)


def test_assignment_from_another_gpu(two_gpus, rng):
    """d0[a:b] = d1 copies d1 to d0's GPU first (same dtype) or converts it there (another one)."""
    a = random_array(rng, 100_003, "float32")
    d0 = poison(pyew.empty(100_003, "float32", device=0))
    d0[:] = pyew.asarray(a, device=1)
    np.testing.assert_array_equal(d0.get(), a)
    b = random_array(rng, 1000, "float64")
    d0[5:1005] = pyew.asarray(b, device=1)
    np.testing.assert_array_equal(d0.get()[5:1005], b.astype(np.float32))


def _bias_gelu_ref(a, w, b):
    import math
    y = a.astype(np.float64) * w + b
    return 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))


def test_formulas_run_on_the_gpu_of_their_operands(two_gpus, rng, transfer_limits):
    """evaluate and fuse over arrays on the second GPU compile for it, run there (result, out=,
    a stream of that GPU), refuse operands or out= on the other; numpy formulas under
    Device(1) run on GPU 1, one shot and streamed."""
    n = 100_003
    a, w, b = (random_array(rng, n, "float32", -3, 3) for _ in range(3))
    x, wd, bd = (pyew.asarray(v, device=1) for v in (a, w, b))
    want = _bias_gelu_ref(a, w, b)
    r = pyew.evaluate("gelu(x * w + b)", local_dict={"x": x, "w": wd, "b": bd})
    assert r.device.id == 1 and pyew.Device().id == 0
    np.testing.assert_allclose(r.get().astype(np.float64), want, rtol=2e-6, atol=1e-6)
    bias_gelu = pyew.fuse(lambda x, w, b: pyew.gelu(x * w + b))
    out = poison(pyew.empty(n, "float32", device=1))
    s = pyew.Stream(device=1)
    assert bias_gelu(x, wd, bd, out=out, stream=s) is out
    s.synchronize()
    np.testing.assert_array_equal(out.get(), r.get())
    with pytest.raises(ValueError, match="is on cuda:0, but this call runs on cuda:1"):
        pyew.evaluate("x * w", local_dict={"x": x, "w": pyew.asarray(w, device=0)})
    with pytest.raises(ValueError, match="is on cuda:0, but this call runs on cuda:1"):
        bias_gelu(x, wd, bd, out=pyew.empty(n, "float32", device=0))
    a, w, b = (random_array(rng, (1 << 21) + 5, "float32", -3, 3) for _ in range(3))     # one shot in parts
    want = _bias_gelu_ref(a, w, b)
    pyew.runtime.reset_pool_peak(1)
    for small in (64 << 20, 0):                               # one shot, then streamed
        pyew.set_transfer_limits(small_bytes=small)
        with pyew.Device(1):
            got = pyew.evaluate("gelu(a * w + b)")
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-6, atol=1e-6)
    assert pyew.runtime.pool_usage(1)["used_peak"] > 0


def test_torch_formulas_on_the_second_gpu(two_gpus, torch_cuda, rng):
    torch = torch_cuda
    a, w, b = (random_array(rng, 10_001, "float32", -3, 3) for _ in range(3))
    t, tw, tb = (torch.from_numpy(v).to("cuda:1") for v in (a, w, b))
    r = pyew.evaluate("gelu(t * tw + tb)")
    assert r.device.id == 1
    np.testing.assert_allclose(r.get().astype(np.float64), _bias_gelu_ref(a, w, b), rtol=2e-6, atol=1e-6)
    with pytest.raises(ValueError, match="is on cuda:0, but this call runs on cuda:1"):
        pyew.evaluate("t + u", local_dict={"t": t, "u": torch.zeros_like(t, device="cuda:0")})
