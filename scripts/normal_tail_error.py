"""Float32 emulation of ew::lower_normal_tail_accurate (libew/ew_math.cuh), the float path of
gelu's normal CDF, against float64: every step rounded as the GPU rounds it (fmaf with one
rounding), rcp.approx and ex2.approx pushed by whole ulps either way to bound their error.
Prints the worst relative error of gelu(x) = x Phi(x) (ew::gelu) over a dense grid of both signs,
and how many values would fail the tests' float32 criterion (1e-6 relative plus 4 tiny).

    python scripts/normal_tail_error.py
"""
from __future__ import annotations

import math

import numpy as np

erfc = np.vectorize(math.erfc, otypes=[np.float64])

NR = [0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
      0.37409196, 1.00002368, -1.26551223]          # Numerical Recipes' erfcc, highest power first
LOG2E = 1.4426950408889634
F = np.float32


def rnd(v):
    return np.asarray(v, np.float64).astype(F)


def fma(a, b, c):
    """One rounding: a float32 product is exact in float64, and the sum's double rounding is rare
    and far below the errors bounded here."""
    return rnd(np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64))


def ulps(v, k):
    for _ in range(abs(k)):
        v = np.nextafter(v, F(np.inf) if k > 0 else F(-np.inf)).astype(F)
    return v


def tail(a, rcp_ulps=0, ex2_ulps=0):
    """Phi(-a) as the kernel computes it, for float32 a >= 0."""
    a = np.where(a > 18, F(18), a).astype(F)
    d = fma(F(0.35355339), a, F(1))
    t = ulps(rnd(1.0 / d.astype(np.float64)), rcp_ulps)       # rcp.approx
    p = np.full_like(a, F(NR[0]))
    for c in NR[1:]:
        p = fma(p, t, F(c))
    hi = rnd(a.astype(np.float64) * a)
    lo = fma(a, a, -hi)
    half_hi = F(0.5 * LOG2E)
    half_lo = F(0.5 * LOG2E - float(half_hi))
    k = fma(-half_hi, hi, F(12582912.0))
    n = rnd(k.astype(np.float64) - 12582912.0)
    f = fma(-half_hi, hi, -n)
    f = fma(-half_lo, hi, f)
    f = fma(fma(F(-0.5), lo, p), F(LOG2E), f)
    e = ulps(rnd(np.exp2(f.astype(np.float64))), ex2_ulps)   # ex2.approx
    p2 = rnd(2.0 ** (n.astype(np.float64) - 1 + 118))              # 2^(n-1+118), a normal float
    assert np.all(p2 >= np.finfo(F).tiny), "the power of two left the normals"
    return rnd(rnd(rnd(t * e) * p2) * 2.0 ** -118)


def gelu(x, rcp_ulps=0, ex2_ulps=0):
    """gelu(x) = fma(-a, Phi(-a), max(x, -0)), a = min(|x|, 18), as the kernel computes it."""
    x = x.astype(F)
    a = np.minimum(np.abs(x), F(18)).astype(F)
    return fma(-a, tail(a, rcp_ulps, ex2_ulps), np.maximum(x, F(-0.0)))


def errors(got, ref) -> tuple[float, int]:
    """(the worst relative error of float32 `got` against float64 `ref` where |ref| > 1e-30, how
    many values fail the tests' float32 criterion: 1e-6 relative plus 4 tiny)."""
    err = np.abs(got.astype(np.float64) - ref)
    fail = int((err > 1e-6 * np.abs(ref) + 4 * np.finfo(F).tiny).sum())
    big = np.abs(ref) > 1e-30
    return float((err[big] / np.abs(ref[big])).max()), fail


def main():
    a = np.concatenate([np.linspace(0, 19, 600001), 10 ** np.linspace(-7, 1.13, 100001)]).astype(F)
    x = np.concatenate([-a, a])
    with np.errstate(under="ignore"):
        ref = x.astype(np.float64) * 0.5 * erfc(-x.astype(np.float64) / np.sqrt(2))
    worst = 0.0
    for rc in (-1, 0, 1):
        for ex in (-2, 0, 2):
            rel, fail = errors(gelu(x, rc, ex), ref)
            worst = max(worst, rel)
            print(f"rcp {rc:+d} ulp, ex2 {ex:+d} ulp: worst relative error {rel:.3g}, failing {fail}")
    print(f"worst over all: {worst:.3g}")


if __name__ == "__main__":
    main()
