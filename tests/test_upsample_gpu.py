"""upsample_nearest2d and its backward on the GPU: bit-exact against a numpy model of PyTorch's
float32 index rule (and against torch itself where it has a GPU), 2x fast path with every pack
width, general path (integer scales, output_size up and down, same size), misaligned views, out=,
stream=, many grid-stride trips, and indices past 2^31."""
from __future__ import annotations

import numpy as np
import pytest

import pyew

from .helpers import poison, random_array
from .special_ref import assert_same_bits, nearest_src, upsample_backward_ref, upsample_ref, view_at

pytestmark = pytest.mark.gpu
FLOATS = ["float32", "float64", "float16", "bfloat16"]

# (input shape, scale or None, output_size or None)
CASES = [
    ((2, 3, 5, 7), 2, None),          # odd width: 2x path, one element per thread
    ((2, 3, 4, 8), 2, None),          # 2x path, widest packs
    ((1, 2, 6, 6), 2, None),          # width 6: packs of 2
    ((1, 1, 1, 1), 2, None),
    ((2, 2, 5, 6), 3, None),          # general path, integer scale
    ((1, 3, 4, 5), 1, None),          # same size: a copy
    ((2, 3, 5, 7), None, (10, 14)),   # 2x given as a size
    ((2, 3, 5, 7), None, (11, 13)),   # non-integer ratios
    ((2, 3, 5, 7), None, (3, 4)),     # downsampling: some inputs feed nothing
    ((2, 3, 5, 7), None, (1, 1)),
    ((2, 3, 5, 7), None, (5, 20)),    # one axis same size
    ((1, 2, 2, 3), None, (82, 5)),    # a ratio where float32 rounding moves the forward index
    ((0, 3, 4, 4), 2, None),          # empty batch
]


def out_hw(shape, scale, size):
    return size if size is not None else (shape[2] * scale, shape[3] * scale)


def call_fwd(x, scale, size, **kw):
    return pyew.upsample_nearest2d(x, output_size=size, **kw) if size else pyew.upsample_nearest2d(x, scale, **kw)


def call_bwd(dy, scale, size, hw, **kw):
    return pyew.upsample_nearest2d_backward(dy, input_size=hw, **kw) if size else \
        pyew.upsample_nearest2d_backward(dy, scale, **kw)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,scale,size", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_forward_and_backward_numpy(dtype, shape, scale, size, rng):
    x = random_array(rng, shape, dtype)
    if x.size > 3:
        x.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    oh, ow = out_hw(shape, scale, size)
    y = call_fwd(x, scale, size)
    assert isinstance(y, np.ndarray) and y.shape == shape[:2] + (oh, ow) and y.dtype == x.dtype
    assert_same_bits(y, upsample_ref(x, oh, ow), "forward")
    dy = random_array(rng, y.shape, dtype)
    dx = call_bwd(dy, scale, size, shape[2:])
    assert dx.shape == shape and dx.dtype == x.dtype
    assert_same_bits(dx, upsample_backward_ref(dy, shape[2], shape[3], dtype), "backward")


def test_default_scale_is_2(rng):
    x = random_array(rng, (1, 2, 3, 4), "float32")
    np.testing.assert_array_equal(pyew.upsample_nearest2d(x), x.repeat(2, axis=2).repeat(2, axis=3))
    dy = random_array(rng, (1, 2, 6, 8), "float32")
    windows = dy.reshape(1, 2, 3, 2, 4, 2).astype(np.float64)
    want, mag = windows.sum(axis=(3, 5)), np.abs(windows).sum(axis=(3, 5))
    got = pyew.upsample_nearest2d_backward(dy).astype(np.float64)
    assert (np.abs(got - want) <= 3 * 2.0**-24 * mag).all()     # 3 float32 additions per element


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale,size", [(2, None), (3, None), (None, (7, 9))])
def test_integer_scales_are_adjoint(dtype, scale, size, rng):
    """For these sizes the gather backward is exactly the adjoint of the forward: with small
    integers every sum is exact, so it must equal np.add.at over the forward's index map."""
    shape = (2, 2, 3, 4) if size else (2, 2, 5, 6)
    oh, ow = out_hw(shape, scale, size)
    dy = rng.integers(-8, 8, size=shape[:2] + (oh, ow)).astype(pyew.dtypes.BY_NAME[dtype].np)
    dx = call_bwd(dy, scale, size, shape[2:])
    want = np.zeros(shape, np.float64)
    iy, ix = nearest_src(shape[2], oh), nearest_src(shape[3], ow)
    for a in range(oh):
        for b in range(ow):
            want[:, :, iy[a], ix[b]] += dy[:, :, a, b].astype(np.float64)
    np.testing.assert_array_equal(dx.astype(np.float64), want)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale,size", [(2, None), (3, None), (None, (9, 4))])
def test_misaligned_views_out_stream(dtype, scale, size, rng):
    """x a view 15 elements into its buffer (C*H*W odd), out a view likewise: the 2x path must pick
    a narrower pack and the general path must not care."""
    shape = (3, 1, 3, 5)
    oh, ow = out_hw(shape, scale, size)
    for off in (1, 2):
        x = random_array(rng, shape, dtype)
        xd = view_at(x, off)
        out = poison(pyew.empty((shape[0] + off, 1, oh, ow), dtype))[off:]
        s = pyew.Stream()
        y = call_fwd(xd, scale, size, out=out, stream=s)
        assert y is out
        assert_same_bits(y.get(stream=s), upsample_ref(x, oh, ow), f"forward off={off}")
        dy = random_array(rng, (shape[0], 1, oh, ow), dtype)
        dyd = view_at(dy, off)
        dx_out = poison(pyew.empty((shape[0] + off,) + shape[1:], dtype))[off:]
        dx = call_bwd(dyd, scale, size, shape[2:], out=dx_out, stream=s)
        assert dx is dx_out
        assert_same_bits(dx.get(stream=s), upsample_backward_ref(dy, shape[2], shape[3], dtype), f"backward off={off}")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("scale,size", [(2, None), (None, (37, 70))])
def test_many_loop_trips(dtype, scale, size, rng, small_grid):
    shape = (4, 8, 64, 72)
    oh, ow = out_hw(shape, scale, size)
    x = random_array(rng, shape, dtype)
    assert_same_bits(call_fwd(pyew.asarray(x), scale, size).get(), upsample_ref(x, oh, ow), "forward")
    dy = random_array(rng, shape[:2] + (oh, ow), dtype)
    assert_same_bits(call_bwd(dy, scale, size, shape[2:]), upsample_backward_ref(dy, shape[2], shape[3], dtype),
                     "backward")


def test_matches_torch(rng, torch_cuda):
    torch = torch_cuda
    import torch.nn.functional as F
    for dtype, tdt in (("float32", torch.float32), ("float16", torch.float16)):
        for shape, scale, size in CASES:
            if shape[0] == 0:
                continue
            x = random_array(rng, shape, dtype)
            xt = torch.from_numpy(x).cuda().requires_grad_()
            yt = F.interpolate(xt, scale_factor=scale, mode="nearest") if size is None else \
                F.interpolate(xt, size=size, mode="nearest")
            y = call_fwd(x, scale, size)
            assert_same_bits(y, yt.detach().cpu().numpy(), f"torch forward {dtype} {shape} {scale} {size}")
            dy = random_array(rng, tuple(yt.shape), dtype)
            yt.backward(torch.from_numpy(dy).cuda())
            dx = call_bwd(dy, scale, size, shape[2:])
            assert_same_bits(dx, xt.grad.cpu().numpy(), f"torch backward {dtype} {shape} {scale} {size}")
            assert tdt == xt.dtype


def test_indices_past_2_to_31():
    """Outputs of more than 2^31 elements (the 64-bit index kernels): check the rows past the
    2^31st element and the first rows, forward and backward, for the 2x and the general path."""
    pyew.synchronize()
    pyew.runtime.trim_pool()              # memory cached by earlier tests counts as free
    free = pyew.device_info()["free_memory"]
    if free < 14 << 30:
        pytest.skip(f"needs 14 GiB of free GPU memory, {free >> 30} GiB free")
    for scale, h, w in ((2, 2**14 + 1, 2**15), (3, 2**13 + 1, 2**15)):
        r = np.arange(h, dtype=np.int32)[:, None]
        c = np.arange(w, dtype=np.int32)[None, :]
        x = ((r * 7 + c) % 113).astype(np.float16)        # small integers: the sums below are exact
        xd = pyew.asarray(x.reshape(1, 1, h, w))
        del r, c
        y = pyew.upsample_nearest2d(xd, scale)
        assert y.size > 2**31
        rows = y.reshape(scale * h, scale * w)
        for lo in (0, scale * h - 2 * scale):
            got = rows[lo:lo + 2 * scale].get()
            src = x[lo // scale:lo // scale + 2]
            np.testing.assert_array_equal(got, src.repeat(scale, axis=0).repeat(scale, axis=1))
        dx = pyew.upsample_nearest2d_backward(y, scale).reshape(h, w)
        del y, rows
        for lo in (0, h - 3):
            got = dx[lo:lo + 3].get()
            np.testing.assert_array_equal(got, (x[lo:lo + 3].astype(np.float32) * scale * scale).astype(np.float16))
        del dx, xd
