"""One-off experiment (2026-11-27): host time of calls with numpy scalars against the same calls with
Python numbers, one tree per process (`old` or `new`, named in the output). On the GPU host, for the
former tree: `git archive <rev> pyew | tar -x -C /tmp/old`, its C extension built from that rev's
pyew/_ewcall.c into /tmp/old/build beside links to this checkout's build/ files, then
`PYTHONPATH=/tmp/old python benchmarks/experiments/numpy_scalars.py old`, and
`python benchmarks/experiments/numpy_scalars.py new` here, alternating."""
# ruff: noqa
import sys, time, statistics
import numpy as np
import pyew
tag = sys.argv[1]
try:
    import torch
except Exception:
    torch = None
k32, kpy = np.float32(0.5), 0.5
d1 = pyew.asarray(np.ones(1, np.float32))
b1 = pyew.asarray(np.ones(1, np.float32))
x16 = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32)
x20 = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
sync = pyew.synchronize if hasattr(pyew, "synchronize") else (lambda: d1.get())
calls = {
    "mul(d, 0.5)": lambda: pyew.mul(d1, kpy),
    "mul(d, np.float32(0.5))": lambda: pyew.mul(d1, k32),
    "d * np.float32(0.5)": lambda: d1 * k32,
    "evaluate x*a+b, a=0.5": lambda: pyew.evaluate("x * a + b", local_dict={"x": d1, "a": kpy, "b": b1}),
    "evaluate x*a+b, a=np.float32": lambda: pyew.evaluate("x * a + b", local_dict={"x": d1, "a": k32, "b": b1}),
}
big = {
    "numpy 2^16 mul(x, 0.5)": lambda: pyew.mul(x16, kpy),
    "numpy 2^16 mul(x, np.float32(0.5))": lambda: pyew.mul(x16, k32),
    "numpy 2^20 mul(x, 0.5)": lambda: pyew.mul(x20, kpy),
    "numpy 2^20 mul(x, np.float32(0.5))": lambda: pyew.mul(x20, k32),
}
if torch is not None and tag == "new":
    t1 = torch.ones(1, device="cuda")
    calls["torch.mul(t, 0.5)"] = lambda: torch.mul(t1, 0.5)
    calls["t * np.float32(0.5)"] = lambda: t1 * k32
for f in list(calls.values()) + list(big.values()):
    for _ in range(50):
        f()
d1.get()
res = {}
for rnd in range(9):
    for name, f in calls.items():
        t0 = time.perf_counter()
        for _ in range(2000):
            f()
        t = (time.perf_counter() - t0) / 2000 * 1e6
        d1.get()
        if torch is not None: torch.cuda.synchronize()
        res.setdefault(name, []).append(t)
    for name, f in big.items():
        m = 100 if "16" in name else 20
        t0 = time.perf_counter()
        for _ in range(m):
            f()
        res.setdefault(name, []).append((time.perf_counter() - t0) / m * 1e6)
for name, v in res.items():
    print(f"{tag}\t{name}\t{statistics.median(v):.2f} us")
