"""One-off experiment (2026-11-27): numpy calls that go in one shot, a one-input op against a number,
a row and a same-shaped operand, float32 x of (n / 4096, 4096), the calls in turn, medians of 15
rounds (ms). python benchmarks/experiments/one_shot_operands.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import time, statistics
import numpy as np, pyew
rng = np.random.default_rng(0)
w = rng.standard_normal(4096).astype(np.float32)
for p in (20, 22, 24):
    x = rng.standard_normal((1 << p) // 4096 * 4096).astype(np.float32).reshape(-1, 4096)
    x2 = rng.standard_normal(x.shape).astype(np.float32)
    W = np.broadcast_to(w, x.shape).copy()
    cases = {"sigmoid(x)": lambda: pyew.sigmoid(x), "mul(x, 2.0)": lambda: pyew.mul(x, 2.0),
             "mul(x, w) row": lambda: pyew.mul(x, w), "mul(x, W) full": lambda: pyew.mul(x, W),
             "add(x, x2)": lambda: pyew.add(x, x2)}
    res = {k: [] for k in cases}
    for f in cases.values(): f(); f()
    for r in range(15):
        for k, f in cases.items():
            t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
    print(f"2^{p}: " + "  ".join(f"{k} {statistics.median(v)*1e3:.3f}" for k, v in res.items()), flush=True)
