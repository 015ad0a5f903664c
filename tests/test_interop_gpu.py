"""GPU arrays of other libraries in and out: PyTorch, CuPy, JAX and Numba, each where it is
installed. Zero copy, streams honoured, lifetimes kept, bfloat16 through DLPack."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import pyew
from pyew import dlpack, interop

from .helpers import busy_torch_stream, poison, random_array

pytestmark = pytest.mark.gpu


def test_torch_tensors_in_and_out(torch_cuda, rng):
    torch = torch_cuda
    a = random_array(rng, 10007, "float32")
    t = torch.from_numpy(a).cuda()
    r = pyew.relu(t)
    assert isinstance(r, pyew.DeviceArray)
    np.testing.assert_array_equal(r.get(), np.maximum(a, 0))
    out = torch.full_like(t, float("nan"))
    assert pyew.add(t, t, out=out) is not None
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), a + a)
    o64 = torch.full((10007,), float("nan"), dtype=torch.float64, device="cuda")
    assert pyew.add(t, t, out=o64) is o64                  # numpy's same_kind cast into a torch out
    np.testing.assert_array_equal(o64.cpu().numpy(), (a + a).astype(np.float64))
    d = pyew.asarray(t)                                    # no copy
    assert d.ptr == t.data_ptr() and d.shape == tuple(t.shape)
    d2 = pyew.from_dlpack(t)
    assert d2.ptr == t.data_ptr()
    # mixed with a DeviceArray and a numpy array: a GPU call
    m = pyew.add(t, a)
    np.testing.assert_array_equal(m.get(), a + a)


def test_torch_through_the_dlpack_exchange_api(torch_cuda, rng):
    """Where PyTorch offers DLPack's C exchange API and the C extension is built, tensors are read
    through it: every dtype pyew has, slices at an offset, 0-d and empty tensors, the refusals."""
    torch = torch_cuda
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no DLPack C exchange API")
    if pyew.library.get().ext is None:
        pytest.skip("pyew runs without its C extension")
    base = torch.from_numpy(random_array(rng, 4099, "float32")).cuda()
    pyew.relu(base)
    assert "exchange" in interop._readers[type(base)].__qualname__
    for tdt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool):
        t = base[3:].to(tdt)[5:]                            # a slice: its data pointer is past the storage's
        d = pyew.asarray(t)
        assert (d.ptr, d.shape, d.dtype.itemsize) == (t.data_ptr(), tuple(t.shape), t.element_size())
        assert torch.equal(torch.from_dlpack(d), t)
    x = base[1:]
    y = pyew.add(x, x)
    np.testing.assert_array_equal(y.get(), (x + x).cpu().numpy())
    s = torch.tensor(2.5, device="cuda")
    assert pyew.asarray(s).shape == () and float(pyew.mul(s, 2.0)) == 5.0
    assert pyew.add(base[:0], base[:0]).shape == (0,)
    with pytest.raises(ValueError, match=r"non-contiguous Tensor.*\.contiguous\(\)"):
        pyew.relu(base.view(4099, 1)[::2])
    with pytest.raises(ValueError, match="requires grad"):
        pyew.relu(base.clone().requires_grad_())
    with pytest.raises(TypeError, match="complex64"):
        pyew.relu(base.to(torch.complex64))
    host = pyew.relu(base.cpu())                            # a CPU tensor is host data
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, torch.relu(base).cpu().numpy())


def test_torch_non_contiguous_names_the_fix(torch_cuda):
    t = torch_cuda.ones((64, 32), device="cuda").T
    with pytest.raises(ValueError, match=r"non-contiguous Tensor.*\.contiguous\(\)"):
        pyew.relu(t)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64", "int32", "int64"])
def test_dlpack_round_trip_with_torch(torch_cuda, dtype, rng):
    torch = torch_cuda
    tdt = getattr(torch, dtype)
    a = random_array(rng, 4099, dtype if dtype != "bfloat16" else "float32")
    t = torch.from_numpy(a).cuda().to(tdt)
    y = pyew.relu(t)                                          # in through __dlpack__
    back = torch.from_dlpack(y)                               # out through the versioned capsule
    assert back.dtype == tdt and back.data_ptr() == y.ptr
    assert torch.equal(back, torch.relu(t))
    legacy = torch.utils.dlpack.from_dlpack(y.__dlpack__())   # the legacy capsule
    assert torch.equal(legacy, back)


def test_dlpack_export_arguments(torch_cuda, rng):
    a = random_array(rng, 100, "float32")
    d = pyew.asarray(a)
    cap = d.__dlpack__(max_version=(1, 0))
    assert b"dltensor_versioned" in repr(cap).encode()
    cap = d.__dlpack__()
    assert '"dltensor"' in repr(cap)
    c = torch_cuda.utils.dlpack.from_dlpack(d.__dlpack__(copy=True))
    assert c.data_ptr() != d.ptr and np.array_equal(c.cpu().numpy(), a)
    assert d.__dlpack_device__() == (dlpack.KDL_CUDA, pyew.device_info()["ordinal"])
    with pytest.raises(BufferError, match=r"is on \(kDLCUDA, 0\) and pyew exports it only there"):
        d.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="other than 0"):
        d.__dlpack__(stream=0)


def test_exported_array_outlives_the_device_array(torch_cuda, rng):
    torch = torch_cuda
    a = random_array(rng, 1 << 20, "float32")
    d = pyew.asarray(a)
    t = torch.from_dlpack(d)
    cai = torch.as_tensor(pyew.asarray(a), device="cuda")     # through the CUDA Array Interface
    del d
    gc.collect()
    junk = [pyew.asarray(np.zeros(1 << 20, np.float32)) for _ in range(4)]   # would reuse freed memory
    pyew.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), a)
    np.testing.assert_array_equal(cai.cpu().numpy(), a)
    del t, cai, junk
    gc.collect()
    assert dlpack.live_exports() == 0, "the consumer's deleter released the export"


def test_torch_producer_stream_is_waited_for(torch_cuda):
    """A tensor still being written on a torch side stream: pyew (on the legacy default stream)
    must see the finished values, through DLPack's stream handshake, without a device sync."""
    with busy_torch_stream(torch_cuda, 1 << 22, 200_000_000) as (side, x):
        y = pyew.scale(x, alpha=2.0)                        # inside: the producer stream is `side`
    got = y.get()
    assert np.all(got == 6.0)


def test_torchs_stream_follows_pyews_work_on_its_tensors(torch_cuda):
    """pyew runs on its own (busy) stream; torch's next work on its side stream, a write into the
    out= tensor and an allocation reusing a freed temporary input, must follow pyew's kernels."""
    torch = torch_cuda
    n = 1 << 22
    x = torch.full((n,), 2.0, device="cuda")
    side = torch.cuda.Stream()
    # nothing below may synchronize the device, which would order everything: torch's cache holds
    # blocks for side (no cudaMalloc) and pyew's kernels are loaded (no lazy module load)
    with torch.cuda.stream(side):
        warm = [torch.empty(n, device="cuda") for _ in range(3)]
        pyew.add(x, x, out=warm[0])
        pyew.mul(warm[1], 2.0)
    del warm
    torch.cuda.synchronize()
    with pyew.Stream() as ps:
        with torch.cuda.stream(torch.cuda.ExternalStream(ps.handle)):
            torch.cuda._sleep(200_000_000)                  # pyew's stream stays busy a while
        with torch.cuda.stream(side):
            out = torch.empty(n, device="cuda")
            assert pyew.add(x, x, out=out) is out            # numpy's rule: out= returns out
            out.fill_(7.0)                                   # queued on side: must run after pyew's add
            y = pyew.mul(torch.full((n,), 3.0, device="cuda"), 2.0)    # the input is freed at once
            reuse = torch.full((n,), 100.0, device="cuda")   # may take its memory
    torch.cuda.synchronize()
    assert float(out.min()) == 7.0 == float(out.max())
    got = y.get()
    assert got.min() == 6.0 == got.max() and float(reuse.min()) == 100.0


def test_cupy_arrays_and_stream(cupy, rng):
    cp = cupy
    a = random_array(rng, 5000, "float16")
    x = cp.asarray(a)
    np.testing.assert_array_equal(pyew.relu(x).get(), np.maximum(a, 0))
    out = cp.zeros_like(x)
    pyew.mul(x, x, out=out)
    np.testing.assert_array_equal(cp.asnumpy(out), a * a)
    back = cp.asarray(pyew.relu(x))                           # CuPy reads the CUDA Array Interface
    np.testing.assert_array_equal(cp.asnumpy(back), np.maximum(a, 0))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        big = cp.ones(1 << 24, cp.float32)
        for _ in range(20):
            big = big * 1.0 + 1.0                          # work queued on s
        r = pyew.add(big, big)                             # CAI v3 stream = s: waited for
    assert np.all(r.get() == 42.0)


def test_cupy_bad_inputs(cupy):
    x = cupy.ones((8, 8), cupy.float32)[:, ::2]
    with pytest.raises(ValueError, match="non-contiguous"):
        pyew.relu(x)
    with pytest.raises(TypeError, match="complex"):
        pyew.relu(cupy.ones(4, cupy.complex64))


def test_arrays_between_two_elements_are_refused(cupy, torch_cuda):
    """A GPU array whose address lies between two elements (a byte buffer read as wider elements)
    is refused by CuPy's and torch's readers, as input and as out=, also where a plan for its
    kind of array is replayed: a kernel reading it would fault and end the process's CUDA context,
    which the last call shows alive."""
    cp, torch = cupy, torch_cuda
    want = np.arange(16, dtype=np.float32) * 2
    good, t_good = cp.arange(16, dtype=cp.float32), torch.arange(16, dtype=torch.float32, device="cuda")
    raw = cp.zeros(16 * 4 + 8, cp.uint8)
    odd = cp.ndarray((16,), cp.float32, memptr=raw.data + 1)
    assert odd.data.ptr % 4 == 1
    try:
        t_odd = torch.as_tensor(odd, device="cuda")           # torch over the same bytes (CUDA Array Interface)
        assert t_odd.data_ptr() % 4 == 1
    except (RuntimeError, ValueError, TypeError):
        t_odd = None                                          # a torch that refuses it has nothing to test
    for x, bad in ((good, odd), (t_good, t_odd)):
        if bad is None:
            continue
        for _ in range(3):                                    # the plan for this kind of array is made and replayed
            np.testing.assert_array_equal(pyew.add(x, x).get(), want)
        for args, kw in (((bad, x), {}), ((x, bad), {}), ((x, x), {"out": bad})):
            with pytest.raises(ValueError, match="not a multiple of its float32 elements' 4 bytes; .*pass a copy"):
                pyew.add(*args, **kw)
        with pytest.raises(ValueError, match="not a multiple of its float32 elements' 4 bytes"):
            pyew.asarray(bad)
    assert not raw.any()                                      # nothing was written through out=
    np.testing.assert_array_equal(pyew.add(good, t_good).get(), want)


def test_cuda_array_interface_export(rng):
    d = pyew.asarray(random_array(rng, 10, "float32"))
    cai = d.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == 1 and cai["data"] == (d.ptr, False)
    s = pyew.Stream()
    e = pyew.relu(d, stream=s)
    assert e.__cuda_array_interface__["stream"] == s.handle


def test_jax_arrays(jax_gpu, rng):
    import jax.numpy as jnp
    a = random_array(rng, 1000, "float32")
    x = jnp.asarray(a)
    np.testing.assert_array_equal(pyew.relu(x).get(), np.maximum(a, 0))
    b = jnp.asarray(a).astype(jnp.bfloat16)
    y = pyew.relu(b)
    back = jnp.from_dlpack(y)
    assert back.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(back), np.asarray(jnp.maximum(b, 0)))


def test_numba_device_arrays(rng):
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("numba sees no GPU")
    a = random_array(rng, 1000, "float64")
    x = cuda.to_device(a)
    np.testing.assert_array_equal(pyew.relu(x).get(), np.maximum(a, 0))
    d = pyew.asarray(a)
    v = cuda.as_cuda_array(d)
    np.testing.assert_array_equal(v.copy_to_host(), a)


def test_special_ops_take_foreign_arrays(torch_cuda, rng):
    torch = torch_cuda
    a = random_array(rng, 4096, "float32")
    t = torch.from_numpy(a).cuda()
    y, m = pyew.relu_mask(t)
    dx = pyew.relu_mask_backward(t, m)
    np.testing.assert_array_equal(dx.get(), np.where(a > 0, a, 0))
    r = pyew.dot(t, t).get()
    np.testing.assert_allclose(r, np.dot(a.astype(np.float64), a), rtol=1e-4)
    x4 = torch.from_numpy(a.reshape(4, 4, 16, 16)).cuda()
    np.testing.assert_array_equal(pyew.upsample_nearest2d(x4).get(),
                                  a.reshape(4, 4, 16, 16).repeat(2, 2).repeat(2, 3))
    dst = torch.zeros(10, device="cuda")
    pyew.scatter_add(dst, torch.tensor([1, 1, 3], device="cuda"), torch.ones(3, device="cuda"))
    assert dst.cpu().tolist() == [0, 2, 0, 1, 0, 0, 0, 0, 0, 0]
    out = poison(pyew.empty(4096, "float32"))
    pyew.relu_mask_backward(t, m, out=out)
    np.testing.assert_array_equal(out.get(), np.where(a > 0, a, 0))


def test_external_streams(torch_cuda, cupy, rng):
    """stream= and `with` take another library's stream: pyew's work is ordered with its work."""
    torch = torch_cuda
    with busy_torch_stream(torch, 1 << 22, 100_000_000) as (side, x):
        pass
    s = pyew.ExternalStream(side.cuda_stream)
    assert s.device == pyew.Device(x.device.index)
    r = pyew.add(x, 1.0, stream=s)
    with s:
        r2 = pyew.relu(x)
    with torch.cuda.stream(side):
        back = torch.from_dlpack(r)                          # consumed on the same stream: no wait needed
        assert float(back.min()) == 4.0 and float(back.max()) == 4.0
    side.synchronize()
    np.testing.assert_array_equal(r2.get(), np.full(1 << 22, 3.0, np.float32))
    a = random_array(rng, 5000, "float32")
    cs = cupy.cuda.Stream(non_blocking=True)
    with cs:
        c = cupy.asarray(a)
        out = cupy.empty_like(c)
        pyew.mul(c, 2.0, out=out, stream=pyew.ExternalStream(cs))      # the stream object: kept alive
        np.testing.assert_array_equal(cupy.asnumpy(out), a * 2)   # CuPy reads it on its stream
