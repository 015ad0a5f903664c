"""The double-precision paths of float32 logaddexp and arctan2 (libew/ew_numpy.cuh:
logaddexp_for_float, arctan2_via_series), emulated in float64 and
compared with float64 references over random bit patterns, the functions' working ranges, pairs
whose logaddexp cancels towards 0 and pairs at arctan2's octant boundaries.
Also fits the polynomial of atan the kernel evaluates, and prints its coefficients
(`--coefficients`).

    python scripts/float32_via_double_error.py [--coefficients] [--n 20000000]
"""
from __future__ import annotations

import argparse
import math

import numpy as np

LN2 = 0.69314718055994530942
RNG = np.random.default_rng(7)


ATAN_TOP, ATAN_DEGREE = 0.41421356237309503, 7        # |u| <= tan(pi/8); P of degree 7 in u^2


def atan_coefficients() -> np.ndarray:
    """atan u = u + u^3 P(u^2): P by least squares on Chebyshev nodes of u^2 over [0, tan(pi/8)^2],
    highest power first (the kernel's order)."""
    top = ATAN_TOP ** 2 * 1.0001
    nodes = np.cos(np.pi * (np.arange(3000) + 0.5) / 3000)
    s = (nodes + 1) / 2 * top
    u = np.sqrt(s)
    # (atan u - u) / u^3 by its series where u is small, from arctan elsewhere
    series = sum((-1) ** k * s ** (k - 1) / (2 * k + 1) for k in range(1, 30))
    f = np.where(u < 0.05, series, (np.arctan(u) - u) / np.where(u > 0, u ** 3, 1))
    c = np.polynomial.chebyshev.chebfit(nodes, f, ATAN_DEGREE)
    return np.polynomial.Chebyshev(c, domain=[0, top]).convert(kind=np.polynomial.Polynomial).coef[::-1]


def recip(d, steps=2):
    """1 / d as the kernel's recip: the GPU's estimate (modelled as 1 / d off by up to 2^-20) and
    Newton steps in double."""
    r = (1.0 / d) * (1.0 + RNG.uniform(-1, 1, np.shape(d)) * 2.0 ** -20)
    for _ in range(steps):
        r = r + r * (1.0 - d * r)
    return r


def exp_in_range(t):
    """e^t by the kernel's Taylor series to r^10."""
    j = np.rint(t * 1.4426950408889634)
    r = t - j * LN2
    terms = [1 / math.factorial(k) for k in range(10, -1, -1)]
    p = terms[0]
    for c in terms[1:]:
        p = p * r + c
    return p * np.exp2(j)


def exp_for_float(t):
    return exp_in_range(np.clip(t, -150.0, 150.0))


def atanh_series(s):
    s2 = s * s
    return s + s * s2 * (1 / 3 + s2 * (1 / 5 + s2 * (1 / 7 + s2 * (1 / 9 + s2 * (1 / 11 + s2 * (1 / 13))))))


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


def arctan2_via_series(y32, x32, coef):
    ax, ay = np.abs(x32), np.abs(y32)
    mn, mx = np.minimum(ax, ay).astype(np.float64), np.maximum(ax, ay).astype(np.float64)
    wide = np.minimum(ax, ay) > np.float32(0.41421356) * np.maximum(ax, ay)
    u = np.where(wide, mn - mx, mn) * recip(np.where(wide, mn + mx, mx))
    s = u * u
    p = np.full_like(s, coef[0])
    for c in coef[1:]:
        p = p * s + c
    a = u + u * s * p + np.where(wide, np.pi / 4, 0.0)
    a = np.where(ay > ax, np.pi / 2 - a, a)
    a = np.where(x32 < 0, np.pi - a, a)
    a = np.copysign(a, y32.astype(np.float64))
    special = ~((ax > 0) & (ay > 0) & np.isfinite(ax) & np.isfinite(ay))
    return np.where(special, np.arctan2(y32.astype(np.float64), x32.astype(np.float64)), a).astype(np.float32)


def ulps(got32, ref64):
    """|got - ref| in ulps of the correctly rounded float32 result."""
    sp = np.spacing(np.abs(ref64.astype(np.float32))).astype(np.float64)
    sp = np.where(sp == 0, float(np.spacing(np.float32(0))), sp)
    both_nan = np.isnan(got32) & np.isnan(ref64)
    same_inf = np.isinf(ref64) & (got32.astype(np.float64) == ref64)
    return np.where(both_nan | same_inf, 0.0, np.abs(got32.astype(np.float64) - ref64) / sp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coefficients", action="store_true", help="print atan's coefficients as C++")
    ap.add_argument("--n", type=int, default=20_000_000, help="inputs of each kind")
    args = ap.parse_args()
    atan = atan_coefficients()
    if args.coefficients:
        print("atan:", ", ".join(repr(float(c)) for c in atan))
    rng = np.random.default_rng(1)
    bits = lambda: rng.integers(0, 2**32, args.n, dtype=np.uint64).astype(np.uint32).view(np.float32)  # noqa: E731
    with np.errstate(all="ignore"):
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
        x = np.concatenate([bits(), rng.normal(0, 3, args.n), rng.uniform(-10, 10, args.n)]).astype(np.float32)
        edge = rng.choice([1.0, -1.0, 0.41421356237309503, -0.41421356237309503, 2.414213562373095, 1e-30], args.n)
        y = np.concatenate([bits(), rng.normal(0, 3, args.n),
                            x[-args.n:] * edge * (1 + rng.normal(0, 1e-6, args.n))]).astype(np.float32)
        y = np.concatenate([y, np.repeat(specials, specials.size)])
        x = np.concatenate([x, np.tile(specials, specials.size)])
        u = ulps(arctan2_via_series(y, x, atan), np.arctan2(y.astype(np.float64), x.astype(np.float64)))
        print(f"arctan2: worst {u.max():.4f} ulp at ({y[u.argmax()]!r}, {x[u.argmax()]!r}); over 1 ulp: "
              f"{int((u > 1).sum())} of {y.size}")


if __name__ == "__main__":
    main()
