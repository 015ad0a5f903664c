"""One-off experiment (2026-11-27): numpy calls over a (16384, 4096) float32 x with row-broadcast w and
b against same-shaped and scalar forms. python benchmarks/experiments/broadcast_calls.py"""
import time, statistics
import numpy as np, pyew
rng = np.random.default_rng(0)
x = rng.standard_normal((16384, 4096)).astype(np.float32)
w = rng.standard_normal(4096).astype(np.float32); b = rng.standard_normal(4096).astype(np.float32)
W = np.broadcast_to(w, x.shape).copy(); B = np.broadcast_to(b, x.shape).copy()
def med(fn, R=5):
    fn()
    ts = []
    for _ in range(R):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
def mb():
    d = pyew.asarray(x)
    return pyew.gelu(pyew.add(pyew.mul(d, w), b)).get()
cases = {
    "evaluate gelu(x*w+b), w b rows": lambda: pyew.evaluate("gelu(x * w + b)", local_dict=dict(x=x, w=w, b=b)),
    "evaluate, w b full": lambda: pyew.evaluate("gelu(x * w + b)", local_dict=dict(x=x, w=W, b=B)),
    "evaluate gelu(x*0.5+0.1)": lambda: pyew.evaluate("gelu(x * 0.5 + 0.1)", local_dict=dict(x=x)),
    "sigmoid(x)": lambda: pyew.sigmoid(x),
    "mul(x, w) (numpy, row bcast)": lambda: pyew.mul(x, w),
    "asarray + 3 ops + get": mb,
}
for k, f in cases.items():
    print(f"{k:34s} {med(f):8.2f} ms", flush=True)
