"""One-off experiment (2026-11-27): numpy calls in one shot with a Python number, a row, a column and
formulas against a one-input op, float32 x of (n / 4096, 4096), w and b rows of 4096, the calls in
turn, medians of 21-41 rounds (ms). Run once per tree in alternating processes, the former tree's
pyew on PYTHONPATH for "old": python benchmarks/experiments/numbers_and_rows.py new|old"""
# ruff: noqa  (a one-off script, kept as it ran)
import sys, time, statistics, json
import numpy as np, pyew
tag = sys.argv[1]
rng = np.random.default_rng(0)
w = rng.standard_normal(4096).astype(np.float32)
b = rng.standard_normal(4096).astype(np.float32)
out = {}
for p in (16, 20, 22, 24):
    x = rng.standard_normal((1 << p) // 4096 * 4096).astype(np.float32).reshape(-1, 4096)
    x2 = rng.standard_normal(x.shape).astype(np.float32)
    col = rng.standard_normal((x.shape[0], 1)).astype(np.float32)
    cases = {"sigmoid(x)": lambda: pyew.sigmoid(x), "mul(x, 2.0)": lambda: pyew.mul(x, 2.0),
             "mul(x, w)": lambda: pyew.mul(x, w), "mul(x, col)": lambda: pyew.mul(x, col), "add(x, x2)": lambda: pyew.add(x, x2),
             "gelu(x*w+b)": lambda: pyew.evaluate("gelu(x * w + b)"),
             "where(x>0,x,a*expm1(x))": lambda: pyew.evaluate("where(x > 0, x, a * expm1(x))", local_dict={"x": x, "a": 0.5})}
    res = {k: [] for k in cases}
    for f in cases.values(): f(); f()
    for r in range(41 if p < 22 else 21):
        for k, f in cases.items():
            t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
    out[p] = {k: statistics.median(v) * 1e3 for k, v in res.items()}
    print(tag, p, json.dumps(out[p]), flush=True)
