"""One-off experiment (2026-11-27): numpy calls with out= and formulas with rows or a column, x of (n / 4096, 4096) float32, the calls in turn,
medians of 21-41 rounds (ms); alternating processes as numbers_and_rows.py: python benchmarks/experiments/out_and_formulas.py new|old"""
# ruff: noqa  (a one-off script, kept as it ran)
import sys, time, statistics, json
import numpy as np, pyew
tag = sys.argv[1]
rng = np.random.default_rng(0)
w = rng.standard_normal(4096).astype(np.float32)
b = rng.standard_normal(4096).astype(np.float32)
for p in (16, 20, 22, 24):
    x = rng.standard_normal((1 << p) // 4096 * 4096).astype(np.float32).reshape(-1, 4096)
    o = np.empty_like(x)
    col = rng.standard_normal((x.shape[0], 1)).astype(np.float32)
    cases = {"sigmoid(x)": lambda: pyew.sigmoid(x),
             "sigmoid(x, out=o)": lambda: pyew.sigmoid(x, out=o),
             "mul(x, 2.0, out=o)": lambda: pyew.mul(x, 2.0, out=o),
             "gelu(x*w+b)": lambda: pyew.evaluate("gelu(x * w + b)"),
             "gelu(x*w+b), out=o": lambda: pyew.evaluate("gelu(x * w + b)", out=o),
             "x*col+b": lambda: pyew.evaluate("x * col + b")}
    res = {k: [] for k in cases}
    for f in cases.values(): f(); f()
    for r in range(41 if p < 22 else 21):
        for k, f in cases.items():
            t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
    print(tag, p, json.dumps({k: statistics.median(v) * 1e3 for k, v in res.items()}), flush=True)
