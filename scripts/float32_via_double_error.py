"""The double-precision paths of float32 erfc and logaddexp (libew/ew_numpy.cuh:
erfc_for_float, logaddexp_for_float), emulated in float64 and compared with float64 references
over random bit patterns, the functions' working ranges and (for logaddexp) pairs whose result
cancels towards 0. Also fits erfcx, the polynomial erfc_for_float evaluates, and prints its
coefficients as C++ (`--coefficients`). Needs scipy.

    python scripts/float32_via_double_error.py [--coefficients] [--n 20000000]
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from scipy.special import erfc, erfcx

LN2 = 0.69314718055994530942
ERFC_K, ERFC_TOP, ERFC_DEGREE = 3.0, 10.1, 12      # t = (|x| - K) / (|x| + K); past TOP the float result is 0


def erfcx_coefficients() -> np.ndarray:
    """Least squares on Chebyshev nodes of t over |x| in [0, TOP], as a power series in t."""
    t0, t1 = -1.0, (ERFC_TOP - ERFC_K) / (ERFC_TOP + ERFC_K)
    nodes = np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    t = (nodes + 1) / 2 * (t1 - t0) + t0
    c = np.polynomial.chebyshev.chebfit(nodes, erfcx(ERFC_K * (1 + t) / (1 - t)), ERFC_DEGREE)
    return np.polynomial.Chebyshev(c, domain=[t0, t1]).convert(kind=np.polynomial.Polynomial).coef


RNG = np.random.default_rng(7)


def recip(d, steps=2):
    """1 / d as the kernel's recip: the GPU's estimate (modelled as 1 / d off by up to 2^-20) and
    Newton steps in double."""
    r = (1.0 / d) * (1.0 + RNG.uniform(-1, 1, np.shape(d)) * 2.0 ** -20)
    for _ in range(steps):
        r = r + r * (1.0 - d * r)
    return r


def exp_in_range(t, degree=10):
    """e^t by the kernel's Taylor series to r^degree."""
    j = np.rint(t * 1.4426950408889634)
    r = t - j * LN2
    terms = [1 / math.factorial(k) for k in range(degree, -1, -1)]
    p = terms[0]
    for c in terms[1:]:
        p = p * r + c
    return p * np.exp2(j)


def exp_for_float(t):
    return exp_in_range(np.clip(t, -150.0, 150.0))


def atanh_series(s):
    s2 = s * s
    return s + s * s2 * (1 / 3 + s2 * (1 / 5 + s2 * (1 / 7 + s2 * (1 / 9 + s2 * (1 / 11 + s2 * (1 / 13))))))


def erfc_for_float(x32, coef):
    top = np.float32(ERFC_TOP)
    a = np.minimum(np.abs(x32), top).astype(np.float64)
    t = (a - ERFC_K) * recip(a + ERFC_K, steps=1)
    p = np.full_like(t, coef[-1])
    for c in coef[-2::-1]:
        p = p * t + c
    v = exp_in_range(-a * a, degree=9) * p
    r = np.where(x32 < 0, 2.0 - v, v).astype(np.float32)
    return np.where(np.abs(x32) < top, r, np.where(np.isnan(x32), x32, np.where(x32 < 0, 2.0, 0.0))).astype(np.float32)


def logaddexp_for_float(a32, b32):
    """(result, whether the exact fallback ran)."""
    x, y = a32.astype(np.float64), b32.astype(np.float64)
    d = x - y
    e = exp_for_float(-np.abs(d))
    apart = e < 0.4
    s = np.where(apart, e, e - 1.0) * recip(np.where(apart, 2.0 + e, e + 3.0))
    m = np.where(x > y, x, y)
    r = m + np.where(apart, 0.0, LN2) + 2.0 * atanh_series(s)
    fallback = (m < 0) & (np.abs(r) < 1e-4)
    r = np.where(fallback, np.logaddexp(x, y), r)
    r = np.where(np.isnan(d), d, r)
    r = np.where(x == y, x + LN2, r)
    return r.astype(np.float32), fallback


def ulps(got32, ref64):
    """|got - ref| in ulps of the correctly rounded float32 result."""
    sp = np.spacing(np.abs(ref64.astype(np.float32))).astype(np.float64)
    sp = np.where(sp == 0, float(np.spacing(np.float32(0))), sp)
    both_nan = np.isnan(got32) & np.isnan(ref64)
    same_inf = np.isinf(ref64) & (got32.astype(np.float64) == ref64)
    return np.where(both_nan | same_inf, 0.0, np.abs(got32.astype(np.float64) - ref64) / sp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coefficients", action="store_true", help="print erfcx's coefficients as C++")
    ap.add_argument("--n", type=int, default=20_000_000, help="inputs of each kind")
    args = ap.parse_args()
    coef = erfcx_coefficients()
    if args.coefficients:
        print(",\n".join(f"    {c!r}" for c in coef))
    rng = np.random.default_rng(1)
    bits = lambda: rng.integers(0, 2**32, args.n, dtype=np.uint64).astype(np.uint32).view(np.float32)  # noqa: E731
    with np.errstate(all="ignore"):
        x = np.concatenate([bits(), rng.uniform(-5, 11, args.n).astype(np.float32),
                            np.array([0, -0.0, np.inf, -np.inf, np.nan, 10.0546, 10.1, 9.2, 1e-30], np.float32)])
        u = ulps(erfc_for_float(x, coef), erfc(x.astype(np.float64)))
        print(f"erfc: worst {u.max():.4f} ulp at x = {x[u.argmax()]!r}; over 1 ulp: {int((u > 1).sum())} of {x.size}")
        a = np.concatenate([bits(), rng.normal(0, 3, args.n), rng.uniform(-0.8, 0.1, args.n)]).astype(np.float32)
        near_zero = np.log1p(-np.exp(a[-args.n:].astype(np.float64))) + rng.normal(0, 1e-6, args.n)
        b = np.concatenate([bits(), rng.normal(0, 3, args.n), np.nan_to_num(near_zero)]).astype(np.float32)
        specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0], np.float32)
        a = np.concatenate([a, np.repeat(specials, specials.size)])
        b = np.concatenate([b, np.tile(specials, specials.size)])
        got, fallback = logaddexp_for_float(a, b)
        u = ulps(got, np.logaddexp(a.astype(np.float64), b.astype(np.float64)))
        print(f"logaddexp: worst {u.max():.4f} ulp at ({a[u.argmax()]!r}, {b[u.argmax()]!r}); over 1 ulp: "
              f"{int((u > 1).sum())} of {a.size}; exact fallback taken by {fallback.mean():.2%} "
              f"({fallback[args.n:2 * args.n].mean():.4%} of the normal(0, 3) pairs)")


if __name__ == "__main__":
    main()
