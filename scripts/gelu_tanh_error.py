"""Float32 emulation of float32 gelu_tanh (ew::gelu_tanh and ew::gelu_tanh_exp in
libew/ew_math.cuh) against float64: every step rounded as the GPU rounds it (fmaf with one
rounding), ex2.approx and rcp.approx pushed by whole ulps either way to bound their error. Prints
the worst relative error over a dense grid and how many values would fail the tests' float32
criterion (1e-6 relative plus 4 tiny).

    python scripts/gelu_tanh_error.py
"""
from __future__ import annotations

import numpy as np
from normal_tail_error import F, errors, fma, rnd, ulps

LOG2E = 1.4426950408889634
C1 = 1.5957691216057308                     # 2 sqrt(2/pi)
A = C1 * LOG2E
B = A * 0.044715
AH, BH = F(A), F(B)
AL, BL = F(A - float(AH)), F(B - float(BH))
ROUND = F(12582912.0)


def gelu_tanh(x, ex2_ulps=0, rcp_ulps=0):
    """gelu_tanh as the kernel computes it, for float32 x."""
    x = x.astype(F)
    ax = np.minimum(np.abs(x), F(12)).astype(F)
    p = rnd(ax.astype(np.float64) * ax)
    pe = fma(ax, ax, -p)
    th = rnd(np.float64(BH) * p)
    tl = fma(BH, p, -th)
    gh = rnd(np.float64(AH) + th)
    ge = rnd(np.minimum(AH, th).astype(np.float64) - rnd(gh.astype(np.float64) - np.maximum(AH, th)))
    gl = fma(BH, pe, fma(BL, p, rnd(tl.astype(np.float64) + rnd(ge.astype(np.float64) + AL))))
    k = fma(ax, gh, ROUND)
    n = rnd(k.astype(np.float64) - ROUND)
    f = fma(-ax, gl, fma(-ax, gh, n))
    e = ulps(rnd(np.exp2(f.astype(np.float64))), ex2_ulps)          # ex2.approx
    p2 = rnd(2.0 ** (100 - n.astype(np.float64)))                  # 2^(100-n), a normal float
    assert np.all(p2 >= np.finfo(F).tiny), "the power of two left the normals"
    es = rnd(e * p2)
    r = ulps(rnd(1.0 / fma(es, 2.0 ** -100, F(1)).astype(np.float64)), rcp_ulps)   # rcp.approx
    r = rnd(r * 2.0 ** -100)
    return fma(-ax, rnd(es.astype(np.float64) * r), np.maximum(x, F(-0.0)))


def reference(x):
    x = x.astype(np.float64)
    v = C1 * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-np.abs(v))
        s = np.where(v >= 0, 1 / (1 + e), e / (1 + e))
    return np.where(x < -800, -0.0, x * s)


def main():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-15, 15, 600001), -(10 ** np.linspace(-7, 3, 200001)),
                        10 ** np.linspace(-7, 3, 100001), 3 * rng.standard_normal(200000)]).astype(F)
    ref = reference(x)
    worst = 0.0
    for ex in (-2, 0, 2):
        for rc in (-1, 0, 1):
            rel, fail = errors(gelu_tanh(x, ex, rc), ref)
            worst = max(worst, rel)
            print(f"ex2 {ex:+d} ulp, rcp {rc:+d} ulp: worst relative error {rel:.3g}, failing {fail}")
    print(f"worst over all: {worst:.3g}")


if __name__ == "__main__":
    main()
