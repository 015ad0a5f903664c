"""numpy references for the special kernels. Where the kernel's result is defined bit for bit
(relu_mask, its backward, upsample and its gather backward), the reference reproduces the kernel's
arithmetic exactly (float32 index math, the accumulation type and order), so tests compare bits."""
from __future__ import annotations

import numpy as np

import pyew
from pyew import dtypes as dt


def compute_type(dtype: str):
    return np.float64 if dtype == "float64" else np.float32


def pack_mask(bits: np.ndarray) -> np.ndarray:
    """Bit i % 32 of word i // 32 is bits[i]; unused high bits of the last word are 0."""
    bits = np.asarray(bits, bool).reshape(-1)
    words = (bits.size + 31) // 32
    b = np.packbits(bits.astype(np.uint8), bitorder="little")
    b = np.concatenate([b, np.zeros(words * 4 - b.size, np.uint8)])
    return b.view("<u4").astype(np.uint32)


def unpack_mask(mask: np.ndarray, n: int) -> np.ndarray:
    b = np.asarray(mask, "<u4").view(np.uint8)
    return np.unpackbits(b, bitorder="little")[:n].astype(bool)


def relu_mask_ref(dtype: str, x, addend=None):
    """y and mask exactly as the kernel computes them: in the compute type, NaN not > 0."""
    c = compute_type(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.asarray(x).astype(c)
        if addend is not None:
            s = s + np.asarray(addend).astype(c)
        bits = s > 0
        y = np.where(bits | np.isnan(s), s, c(0)).astype(dt.BY_NAME[dtype].np)
    return y, pack_mask(bits)


def bits_of(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def assert_same_bits(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {got.shape} vs {want.dtype} {want.shape}"
    gn, wn = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    bad = np.flatnonzero((gn != wn).reshape(-1) | ((bits_of(got) != bits_of(want)) & ~wn).reshape(-1))
    assert bad.size == 0, (f"{what}: {bad.size} elements differ, first at flat {bad[0]}: got "
                           f"{got.reshape(-1)[bad[0]]!r}, want {want.reshape(-1)[bad[0]]!r}")


# ---- upsample: PyTorch's nearest rule in float32 ---------------------------------------------

def nearest_src(inn: int, out: int) -> np.ndarray:
    if inn == out:
        return np.arange(out)
    s = np.float32(inn) / np.float32(out)
    d = np.arange(out).astype(np.float32)
    return np.minimum(np.floor(d * s).astype(np.int64), inn - 1)


def nearest_bw_bounds(inn: int, out: int) -> np.ndarray:
    """Input i gathers outputs [b[i], b[i + 1]); b = min(ceil(float(i) * float(out) / float(in)), out)."""
    t = np.float32(out) / np.float32(inn)
    i = np.arange(inn + 1).astype(np.float32)
    return np.minimum(np.ceil(i * t).astype(np.int64), out)


def upsample_ref(x, oh: int, ow: int) -> np.ndarray:
    _, _, h, w = x.shape
    return x[:, :, nearest_src(h, oh)[:, None], nearest_src(w, ow)[None, :]]


def upsample_backward_ref(dy, h: int, w: int, dtype: str) -> np.ndarray:
    n, c, oh, ow = dy.shape
    if (h, w) == (oh, ow):
        return dy.copy()
    acc = compute_type(dtype)
    by, bx = nearest_bw_bounds(h, oh), nearest_bw_bounds(w, ow)
    wy, wx = by[1:] - by[:-1], bx[1:] - bx[:-1]
    d = dy.astype(acc)
    s = np.zeros((n, c, h, w), acc)
    # rows outer, columns inner, from 0: the kernel's order, so the float sums agree bit for bit
    for a in range(int(wy.max(initial=0))):
        rows = np.minimum(by[:-1] + a, oh - 1)
        for b in range(int(wx.max(initial=0))):
            cols = np.minimum(bx[:-1] + b, ow - 1)
            valid = (a < wy)[:, None] & (b < wx)[None, :]
            with np.errstate(invalid="ignore", over="ignore"):
                s = np.where(valid, s + d[:, :, rows[:, None], cols[None, :]], s)
    with np.errstate(over="ignore"):
        return s.astype(dt.BY_NAME[dtype].np)


# ---- helpers -----------------------------------------------------------------------------------

def view_at(a: np.ndarray, off: int):
    """A DeviceArray view of `a` that starts `off` rows into its buffer (misaligned for off > 0)."""
    pad = np.concatenate([np.zeros((off,) + a.shape[1:], a.dtype), a]) if off else a
    return pyew.asarray(pad)[off:]
