"""Planned calls replayed in C (pyew/_ewcall.c) on the GPU: the same results as numpy in float64,
no Python frame of the replay once a plan has a native form, and every call it must not take (a
producer's stream to wait for, a tensor that requires grad, out=, stream=) left to Python."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import pyew

from .helpers import poison, random_array

pytestmark = pytest.mark.gpu


def _frames(fn, *args, **kw):
    """fn's result and the names of the Python functions it entered."""
    names = []

    def seen(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)
    sys.setprofile(seen)
    try:
        res = fn(*args, **kw)
    finally:
        sys.setprofile(None)
    return res, names


def _native():
    if pyew.library.get().ext is None:
        pytest.skip("pyew runs without its C extension")
    if pyew.runtime.device_count() != 1:
        pytest.skip("plans are replayed in C on a machine of one GPU")


def _fresh(shape, dtype):
    """Leave a poisoned block of the result's size in the allocator's reuse list, so a result that
    lands there and is not fully written shows NaN."""
    poison(pyew.empty(shape, dtype))


PYTHON_REPLAY = {"replay", "plan_key", "plan_args", "import_device", "prepare"}


@pytest.mark.parametrize("n", [0, 1, 7, 4099, 1 << 20])
def test_device_arrays_and_numbers_replay_in_c(rng, n):
    _native()
    a, b = random_array(rng, n, "float32"), random_array(rng, n, "float32")
    x, y = pyew.asarray(a), pyew.asarray(b)
    m = pyew.asarray(random_array(rng, (3, n), "float32").reshape(3, n) if n else np.zeros((3, 0), np.float32))
    cases = [
        (pyew.add, (x, y), a.astype(np.float64) + b),
        (pyew.mul, (x, 0.5), a.astype(np.float64) * 0.5),
        (pyew.mul, (x, np.float32(0.25)), a.astype(np.float64) * 0.25),   # numpy scalars: keyed by type
        (pyew.add, (x, np.bool_(True)), a.astype(np.float64) + 1),
        (pyew.sigmoid, (x,), 1 / (1 + np.exp(-a.astype(np.float64)))),
        (pyew.add, (m, y), m.get().astype(np.float64) + b),              # a row bias: the strided entry
    ]
    for fn, args, want in cases:
        fn(*args)                                                   # makes the plan
        _fresh(want.shape, "float32")
        res, names = _frames(fn, *args)
        assert not PYTHON_REPLAY & set(names), (fn.__name__, names)
        assert res.shape == want.shape and res.dtype == np.float32
        np.testing.assert_allclose(res.get(), want, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("start", [0, 1, 4])
def test_views_with_a_tail(rng, start):
    """A number times a view whose length is past a multiple of the 16-byte pack: replayed as the
    whole packs and then the rest where the view is aligned (start 0, 4), else as one launch."""
    _native()
    a = random_array(rng, 4103, "float32")
    base = pyew.asarray(a)
    x = base[start:]
    for fn, args, want in ((pyew.add, (x, x), a[start:].astype(np.float64) * 2),
                           (pyew.mul, (x, 0.5), a[start:].astype(np.float64) * 0.5)):
        fn(*args)
        _fresh(want.shape, "float32")
        res, names = _frames(fn, *args)
        assert not PYTHON_REPLAY & set(names)
        np.testing.assert_array_equal(res.get(), want)


def test_numbers_out_of_range_still_raise_numpys_error(rng):
    _native()
    x = pyew.asarray(np.arange(5, dtype=np.int32))
    pyew.add(x, 3)
    with pytest.raises(OverflowError):
        pyew.add(x, 2**40)


def test_torch_tensors_on_the_calls_stream_replay_in_c(torch_cuda, rng):
    torch = torch_cuda
    _native()
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no DLPack C exchange API")
    for n in (1, 4099, 1 << 20):
        a, b = random_array(rng, n, "float32"), random_array(rng, n, "float32")
        t, u = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        pyew.add(t, u)
        _fresh((n,), "float32")
        res, names = _frames(pyew.add, t, u)
        assert not PYTHON_REPLAY & set(names), names
        assert isinstance(res, pyew.DeviceArray)
        np.testing.assert_allclose(res.get(), a.astype(np.float64) + b, rtol=2**-24, atol=0)
        res, names = _frames(pyew.add, pyew.asarray(a), u)          # mixed with a DeviceArray
        assert not PYTHON_REPLAY & set(names), names
        np.testing.assert_allclose(res.get(), a.astype(np.float64) + b, rtol=2**-24, atol=0)
    t16 = torch.from_numpy(random_array(rng, 1001, "float16")).cuda()
    pyew.relu(t16)
    res, names = _frames(pyew.relu, t16)
    assert not PYTHON_REPLAY & set(names)
    np.testing.assert_array_equal(res.get(), np.maximum(t16.cpu().numpy(), 0))


def test_what_c_leaves_to_python(torch_cuda, rng):
    torch = torch_cuda
    _native()
    a = random_array(rng, 4099, "float32")
    t = torch.from_numpy(a).cuda()
    pyew.add(t, t)
    g = t.clone().requires_grad_(True)
    with pytest.raises(ValueError, match="requires grad"):
        pyew.add(g, t)
    s = t[::2]
    with pytest.raises(ValueError, match="non-contiguous"):
        pyew.add(s, s)
    # pyew's own stream: the tensor's producer (torch's default stream) must be waited for
    with pyew.Stream():
        res, names = _frames(pyew.add, t, t)
    assert "import_device" in names
    np.testing.assert_array_equal(res.get(), a.astype(np.float64) * 2)
    # torch's side stream: its work is waited for on the way in
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        w = torch.empty(1 << 22, device="cuda")
        torch.cuda._sleep(100_000_000)
        w.fill_(3.0)
        pyew.add(w, w)
        res, names = _frames(pyew.add, w, w)
    assert "import_device" in names
    got = res.get()
    assert got.min() == 6.0 == got.max()
    # out= and stream= take the Python path
    out = pyew.empty(4099, "float32")
    poison(out)
    r, names = _frames(pyew.add, t, t, out=out)
    assert r is out and "replay" in names
    np.testing.assert_array_equal(out.get(), a.astype(np.float64) * 2)
    r, names = _frames(pyew.add, t, t, stream=pyew.runtime.DEFAULT_STREAM)
    assert "replay" in names
    np.testing.assert_array_equal(r.get(), a.astype(np.float64) * 2)


def test_cupy_arrays_replay_in_c(cupy, rng):
    cp = cupy
    _native()
    for n in (1, 4099):
        a, b = random_array(rng, n, "float32"), random_array(rng, n, "float32")
        c, d = cp.asarray(a), cp.asarray(b)
        pyew.add(c, d)
        _fresh((n,), "float32")
        res, names = _frames(pyew.add, c, d)
        assert not PYTHON_REPLAY & set(names), names
        np.testing.assert_allclose(res.get(), a.astype(np.float64) + b, rtol=2**-24, atol=0)
    with cp.cuda.Stream():                      # CuPy's own stream: waited for on the Python path
        res, names = _frames(pyew.add, c, d)
    assert "import_device" in names
    np.testing.assert_allclose(res.get(), a.astype(np.float64) + b, rtol=2**-24, atol=0)


FORMULA_PYTHON = PYTHON_REPLAY | {"_run_fused", "launch_ptrs", "map"}


@pytest.mark.parametrize("n", [0, 1, 7, 4099, 1 << 20])
def test_formulas_replay_in_c(rng, n):
    """pyew.fuse and pyew.evaluate on DeviceArrays and numbers, broadcasts included: the formula's
    plan replayed in C through ew_jit_map, with numpy's results in float64."""
    _native()
    a, b = random_array(rng, n, "float32"), random_array(rng, n, "float32")
    c = random_array(rng, (3, n), "float32").reshape(3, n) if n else np.zeros((3, 0), np.float32)
    x, y, m = pyew.asarray(a), pyew.asarray(b), pyew.asarray(c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    fma = pyew.fuse(lambda x, w, b: x * w + b)
    cases = [
        (fma, (x, y, 0.5), a64 * b64 + 0.5),
        (fma, (x, np.float32(1.5), np.float16(-2)), a64 * 1.5 - 2),
        (fma, (m, y, x), c.astype(np.float64) * b64 + a64),                  # a broadcast: the strided kernels
        (lambda: pyew.evaluate("exp(x) * y", local_dict={"x": x, "y": y}), (), np.exp(a64) * b64),
    ]
    for fn, args, want in cases:
        fn(*args)                                                   # compiles, makes the plan
        _fresh(want.shape, "float32")
        res, names = _frames(fn, *args)
        assert not FORMULA_PYTHON & set(names), names
        assert res.shape == want.shape and res.dtype == np.float32
        np.testing.assert_allclose(res.get(), want, rtol=4e-6, atol=1e-30)


def test_a_formula_kernel_still_to_compile_goes_to_python_once(rng):
    """A view at another alignment has the same plan but needs another kernel: C declines the
    call, Python compiles the kernel and launches it, and the next such call replays in C."""
    _native()
    a = random_array(rng, 4100, "float32")
    base = pyew.asarray(a)
    f = pyew.fuse(lambda x: x * 3 - 1)
    want = a.astype(np.float64) * 3 - 1
    f(base[0:4099])
    f(base[0:4099])
    for round_ in range(2):
        _fresh((4099,), "float32")
        res, names = _frames(f, base[1:4100])
        if round_ == 0:
            assert "launch_ptrs" in names, names
        else:
            assert not FORMULA_PYTHON & set(names), names
        np.testing.assert_allclose(res.get(), want[1:4100], rtol=2**-22, atol=0)


def test_formulas_on_torch_tensors_replay_in_c(torch_cuda, rng):
    torch = torch_cuda
    _native()
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no DLPack C exchange API")
    a, b = random_array(rng, 4099, "float32"), random_array(rng, 4099, "float32")
    t, u = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    f = pyew.fuse(lambda x, w, b: pyew.relu(x * w + b))
    f(t, u, 0.25)
    _fresh((4099,), "float32")
    res, names = _frames(f, t, u, 0.25)
    assert not FORMULA_PYTHON & set(names), names
    want = np.maximum(a.astype(np.float64) * b + 0.25, 0)
    np.testing.assert_allclose(res.get(), want, rtol=2**-22, atol=0)
    with pyew.Stream():                 # pyew's own stream: the producer's work is waited for in Python
        res, names = _frames(f, t, u, 0.25)
    assert "import_device" in names
    np.testing.assert_allclose(res.get(), want, rtol=2**-22, atol=0)
