"""One-off experiment (2026-11-28): the polynomial fits of float32 arccosh's log1p and erfc's erfcx
(libew/ew_numpy.cuh), near-minimax by Lawson's iteratively reweighted least squares against mpmath:
    python benchmarks/experiments/fit_float32_forms.py
log1p(f) = f - f^2/2 + f^3 P(f) over |f| <= 1/3, P's coefficients rounded to float one at a time
(the rest refitted by least squares), error relative to f; erfcx(a) = E(t), t = (a - 3) / (a + 3) over a in [0,
10.0546875], in double, relative error; and the float forms of E that were dropped (E, and E / (1 - t),
in float: the rounding of their coefficients)."""
import mpmath as mp
import numpy as np

mp.mp.prec = 120


def fit(target, lo, hi, degree, weight=lambda x: 1.0, n=4000, iters=200, refit_float=True, refit_minimax=True):
    # Chebyshev points, clustered at the ends
    k = np.arange(n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    y = np.array([float(target(mp.mpf(float(v)))) for v in x])
    w = np.array([weight(v) for v in x])
    V = np.vander(x, degree + 1, increasing=True)
    lw = np.ones(n) / n
    for _ in range(iters):
        sw = np.sqrt(lw) * w
        c, *_ = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)
        err = np.abs((V @ c - y) * w)
        lw = lw * err
        lw /= lw.sum()
    err = (V @ c - y) * w
    # round to float32 one coefficient at a time from the highest, refitting the rest
    cf = c.copy()
    if refit_float:
        fixed = {}
        for j in range(degree, -1, -1):
            free = [i for i in range(degree + 1) if i not in fixed and i != j]
            fixed[j] = float(np.float32(cf[j]))
            if not free:
                break
            resid = y - sum(V[:, i] * fixed[i] for i in fixed)
            lw2 = np.ones(n) / n
            for _ in range(iters // 2 if refit_minimax else 1):
                sw = np.sqrt(lw2) * w
                cc, *_ = np.linalg.lstsq(V[:, free] * sw[:, None], resid * sw, rcond=None)
                er = np.abs((V[:, free] @ cc - resid) * w)
                lw2 = lw2 * er
                lw2 /= lw2.sum()
            for i, v in zip(free, cc):
                cf[i] = v
        cf = np.array([fixed[i] for i in range(degree + 1)])
    errf = (V @ cf - y) * w
    return cf, np.max(np.abs(err)), np.max(np.abs(errf))


def main():
    def log1p_tail(f):
        return mp.mpf(1) / 3 if f == 0 else (mp.log1p(f) - f + f * f / 2) / f**3
    for d in (6, 7):
        c, e, ef = fit(log1p_tail, -1 / 3, 1 / 3, d, weight=lambda f: f * f, refit_minimax=False)
        print(f"log1p P degree {d}: 2^{np.log2(ef):.1f}", [float(np.float32(v)) for v in c[::-1]])
    top, k = 10.0546875, 3.0

    def erfcx_t(t):
        a = k * (1 + t) / (1 - t)
        return mp.erfc(a) * mp.exp(a * a)
    hi = (top - k) / (top + k) + 1e-3
    for d in (9, 10):
        c, e, _ = fit(erfcx_t, -1.0, hi, d, weight=lambda t: 1 / float(erfcx_t(mp.mpf(t))), n=3000, iters=150,
                      refit_float=False)
        print(f"erfcx double degree {d}: 2^{np.log2(e):.1f}", [float(v) for v in c[::-1]])
    for name, g in (("E", erfcx_t), ("E / (1 - t)", lambda t: erfcx_t(t) / (1 - t))):
        c, e, ef = fit(g, -1.0, hi, 10, weight=lambda t, g=g: 1 / float(g(mp.mpf(t))), n=2500, iters=120)
        print(f"erfcx as {name} in float, degree 10: 2^{np.log2(e):.1f}, float coefficients 2^{np.log2(ef):.1f}")


if __name__ == "__main__":
    main()
