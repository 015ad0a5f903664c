"""relu_mask / add_relu_mask / relu_mask_backward on the GPU against bit-exact numpy references:
n % 32 != 0, n = 0, misaligned views, NaN/inf/-0, out=, stream=, grid-stride loops that run many
trips, and torch's threshold_backward where torch has a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import pyew

from .helpers import poison, random_array
from .special_ref import assert_same_bits, pack_mask, relu_mask_ref, unpack_mask, view_at

pytestmark = pytest.mark.gpu
FLOATS = ["float32", "float64", "float16", "bfloat16"]
SIZES = [0, 1, 5, 31, 32, 33, 64, 100, 1000, 4097, 65536 + 7]


def specials(a: np.ndarray, rng) -> np.ndarray:
    """Sprinkle NaN, +-inf, +-0 over a copy of a."""
    a = a.copy()
    if a.size:
        for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            a[rng.integers(0, a.size, size=max(1, a.size // 50))] = v
    return a


def check_forward(dtype, x, addend, y, mask, what):
    want_y, want_m = relu_mask_ref(dtype, x, addend)
    assert isinstance(mask, np.ndarray) and mask.dtype == np.uint32 and mask.shape == want_m.shape, what
    assert_same_bits(y, want_y, f"{what} y")
    np.testing.assert_array_equal(mask, want_m, err_msg=f"{what} mask")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("add", [False, True], ids=["relu", "add_relu"])
def test_forward_numpy(dtype, add, rng):
    for n in SIZES:
        x = specials(random_array(rng, n, dtype), rng)
        a = specials(random_array(rng, n, dtype), rng) if add else None
        y, mask = pyew.add_relu_mask(x, a) if add else pyew.relu_mask(x)
        assert isinstance(y, np.ndarray) and y.shape == (n,) and y.dtype == x.dtype
        check_forward(dtype, x, a, y, mask, f"{dtype} n={n}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_forward_shapes_and_scalar_addend(dtype, rng):
    x = random_array(rng, (3, 7, 5), dtype)
    y, mask = pyew.relu_mask(x)
    assert y.shape == (3, 7, 5) and mask.shape == (4,)
    check_forward(dtype, x.reshape(-1), None, y.reshape(-1), mask, "3-d")
    y, mask = pyew.add_relu_mask(x, 2)           # a Python int keeps the dtype of x (NEP 50)
    check_forward(dtype, x.reshape(-1), np.full(x.size, 2, x.dtype), y.reshape(-1), mask, "scalar addend")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("add", [False, True], ids=["relu", "add_relu"])
def test_forward_misaligned_views_and_out(dtype, add, rng):
    """Inputs and out at element offsets 0..3 of their buffers (every pack width down to scalar),
    the mask written into a view one word into its buffer."""
    n = 32 * 97 + 13
    for shift in range(4):
        x = specials(random_array(rng, n, dtype), rng)
        a = random_array(rng, n, dtype)
        xd, ad = view_at(x, shift), view_at(a, (shift + 1) % 4)
        y_out = poison(pyew.empty(n + 3, dtype))[(shift + 2) % 4:][:n]
        m_buf = pyew.asarray(np.full((n + 31) // 32 + 2, 0xDEADBEEF, np.uint32))
        m_out = m_buf[1:1 + (n + 31) // 32]
        args = (xd, ad) if add else (xd,)
        fn = pyew.add_relu_mask if add else pyew.relu_mask
        y, mask = fn(*args, out=(y_out, m_out))
        assert y is y_out and mask is m_out
        check_forward(dtype, x, a if add else None, y.get(), mask.get(), f"shift={shift}")
        around = m_buf.get()
        assert around[0] == 0xDEADBEEF and around[-1] == 0xDEADBEEF, "mask written outside its words"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_forward_device_in_place_and_stream(dtype, rng):
    n = 5000
    x = random_array(rng, n, dtype)
    d = pyew.asarray(x)
    with pyew.Stream() as s:
        y, mask = pyew.relu_mask(d, out=(d, None), stream=s)
        s.synchronize()
    assert y is d and isinstance(mask, pyew.DeviceArray) and mask.dtype == np.uint32
    check_forward(dtype, x, None, y.get(), mask.get(), "in place on a stream")
    host_y = np.empty(n, x.dtype)
    host_m = np.empty((n + 31) // 32, np.uint32)
    y2, m2 = pyew.relu_mask(x, out=(host_y, host_m), stream=pyew.Stream())
    assert y2 is host_y and m2 is host_m
    check_forward(dtype, x, None, y2, m2, "numpy out=")


@pytest.mark.parametrize("dtype", FLOATS)
def test_forward_many_loop_trips(dtype, rng, small_grid):
    n = 400_000 + 17      # >> the 32 blocks x 8 warps a 1-SM grid has: every warp loops
    x = specials(random_array(rng, n, dtype), rng)
    a = random_array(rng, n, dtype)
    check_forward(dtype, x, a, *pyew.add_relu_mask(x, a), "small grid")
    check_forward(dtype, x[1:], None, *(r.get() for r in pyew.relu_mask(pyew.asarray(x)[1:])), "small grid view")


def test_forward_large(rng):
    n = 3 * 2**24 + 5     # several hundred thousand warps' worth on any GPU
    x = random_array(rng, n, "float16")
    y, mask = pyew.relu_mask(pyew.asarray(x))
    check_forward("float16", x, None, y.get(), mask.get(), "large")


def test_unused_mask_bits_are_zero(rng):
    for n in (1, 33, 95, 96):
        _, mask = pyew.relu_mask(np.ones(n, np.float32))
        want_last = (1 << (n % 32)) - 1 if n % 32 else 0xFFFFFFFF
        assert mask[-1] == want_last and (mask[:-1] == 0xFFFFFFFF).all()


# ---- backward ----------------------------------------------------------------------------------

def backward_ref(dy, mask):
    bits = unpack_mask(mask, dy.size).reshape(dy.shape)
    return np.where(bits, dy, np.zeros((), dy.dtype))   # +0 where the bit is 0, whatever dy is


@pytest.mark.parametrize("dtype", FLOATS)
def test_backward_numpy(dtype, rng):
    for n in SIZES:
        x = specials(random_array(rng, n, dtype), rng)
        _, mask = pyew.relu_mask(x)
        dy = specials(random_array(rng, n, dtype), rng)
        dx = pyew.relu_mask_backward(dy, mask)
        assert isinstance(dx, np.ndarray) and dx.dtype == dy.dtype and dx.shape == (n,)
        assert_same_bits(dx, backward_ref(dy, mask), f"{dtype} n={n}")
        off = ~unpack_mask(mask, n)
        assert not np.signbit(dx[off].astype(np.float64)).any() and (dx[off].astype(np.float64) == 0).all(), \
            "dx must be exactly +0 where the mask bit is 0, even for NaN/inf dy"


@pytest.mark.parametrize("dtype", FLOATS)
def test_backward_misaligned_views_out_stream(dtype, rng):
    n = 32 * 61 + 9
    for shift in range(4):
        bits = rng.random(n) < 0.5
        mask = pack_mask(bits)
        dy = specials(random_array(rng, n, dtype), rng)
        dyd = view_at(dy, shift)
        md = pyew.asarray(np.concatenate([[7], mask]).astype(np.uint32))[1:]
        out = poison(pyew.empty(n + 4, dtype))[(shift + 1) % 4:][:n]
        s = pyew.Stream()
        dx = pyew.relu_mask_backward(dyd, md, out=out, stream=s)
        assert dx is out
        assert_same_bits(dx.get(stream=s), backward_ref(dy, mask), f"shift={shift}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_backward_many_loop_trips(dtype, rng, small_grid):
    n = 300_000 + 3
    mask = pack_mask(rng.random(n) < 0.3)
    dy = random_array(rng, n, dtype)
    assert_same_bits(pyew.relu_mask_backward(dy, mask), backward_ref(dy, mask), "small grid")


def test_add_relu_backward_roundtrip(rng):
    x, a = random_array(rng, 1001, "float32"), random_array(rng, 1001, "float32")
    y, mask = pyew.add_relu_mask(pyew.asarray(x), pyew.asarray(a))
    dy = random_array(rng, 1001, "float32")
    dx = pyew.relu_mask_backward(pyew.asarray(dy), mask).get()
    np.testing.assert_array_equal(dx, np.where(x.astype(np.float32) + a > 0, dy, 0).astype(np.float32))


def test_backward_matches_torch_threshold_backward(rng, torch_cuda):
    torch = torch_cuda
    n = 100_003
    x = random_array(rng, n, "float32")            # no NaN: torch passes gradient through NaN inputs
    x[::97] = 0.0
    dy = specials(random_array(rng, n, "float32"), rng)
    y, mask = pyew.relu_mask(x)
    xt = torch.from_numpy(x).cuda()
    yt = torch.relu(xt)
    want = torch.ops.aten.threshold_backward(torch.from_numpy(dy).cuda(), yt, 0.0).cpu().numpy()
    np.testing.assert_array_equal(y, yt.cpu().numpy())          # values (torch may keep -0)
    assert_same_bits(pyew.relu_mask_backward(dy, mask), want, "backward vs torch")
