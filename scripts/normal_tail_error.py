"""Float32 emulation of ew::lower_normal_tail_accurate (libew/ew_math.cuh), the float path of
gelu's normal CDF, against float64: every step rounded as the GPU rounds it (fmaf with one
rounding), rcp.approx and ex2.approx pushed by whole ulps either way to bound their error.
Prints the worst relative error of gelu(x) = x Phi(x) for x < 0 and x > 0 over a dense grid, and
how many values would fail the tests' float32 criterion (1e-6 relative plus 4 tiny).

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
    m = n.astype(np.int64) - 1
    m1 = m >> 1
    s1 = rnd(2.0 ** m1.astype(np.float64))
    s2 = rnd(2.0 ** (m - m1).astype(np.float64))
    assert np.all(s1 > 0) and np.all(s2 > 0) and np.all(s1 >= np.finfo(F).tiny), "a power of two left the normals"
    return rnd(rnd(rnd(t * e) * s1) * s2)


def errors(got, ref) -> tuple[float, int]:
    """(the worst relative error of float32 `got` against float64 `ref` where |ref| > 1e-30, how
    many values fail the tests' float32 criterion: 1e-6 relative plus 4 tiny)."""
    err = np.abs(got.astype(np.float64) - ref)
    fail = int((err > 1e-6 * np.abs(ref) + 4 * np.finfo(F).tiny).sum())
    big = np.abs(ref) > 1e-30
    return float((err[big] / np.abs(ref[big])).max()), fail


def main():
    x = np.concatenate([-np.linspace(0, 19, 600001), -(10 ** np.linspace(-7, 1.13, 100001))]).astype(F)
    a = -x
    ref = 0.5 * erfc(a.astype(np.float64) / np.sqrt(2))
    worst = 0.0
    for rc in (-1, 0, 1):
        for ex in (-2, 0, 2):
            h = tail(a, rc, ex)
            for g, r in ((rnd(x * h), x.astype(np.float64) * ref),                      # x < 0
                         (rnd(a * rnd(1 - h)), a.astype(np.float64) * (1 - ref))):     # x > 0
                rel, fail = errors(g, r)
                worst = max(worst, rel)
                print(f"rcp {rc:+d} ulp, ex2 {ex:+d} ulp: worst relative error {rel:.3g}, failing {fail}")
    print(f"worst over all: {worst:.3g}")


if __name__ == "__main__":
    main()
