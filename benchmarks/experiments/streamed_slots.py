"""One-off experiment (2026-11-27, against 5d8123c^, the former block rule): sigmoid(x) and a row-bias
mul(x, w) with the ring's slots 1, 2 and 3 times as large, and the kernels alone on the GPU; run
once as it is and once with CUDA_DEVICE_MAX_CONNECTIONS=32. python benchmarks/experiments/streamed_slots.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import os, sys, time, statistics
import numpy as np, pyew
from pyew import transfer
rng = np.random.default_rng(0)
x = rng.standard_normal((16384, 4096)).astype(np.float32)
w = rng.standard_normal(4096).astype(np.float32)
def med(fn, R=7):
    fn(); fn()
    ts = []
    for _ in range(R):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
nb = [0]
orig_move = transfer._move
def counting(*a, **k):
    nb[0] += 1; return orig_move(*a, **k)
tag = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "default")
def show(name, f):
    m = med(f); transfer._move = counting; nb[0] = 0; f(); transfer._move = orig_move
    print(f"[conn {tag}] {name:34s} {m:8.2f} ms  blocks {nb[0]}", flush=True)
old = pyew.transfer_limits()
for scale in (1, 2, 3):
    pyew.set_transfer_limits(pinned_bytes=(old["pinned_bytes"] - old["small_bytes"]) * scale + old["small_bytes"])
    show(f"sigmoid, slots x{scale}", lambda: pyew.sigmoid(x))
    show(f"mul row, slots x{scale}", lambda: pyew.mul(x, w))
pyew.set_transfer_limits(**old)
if tag == "default":
    for rows in (315, 16384):
        d = pyew.asarray(x[:rows]); dw = pyew.asarray(w)
        def t(f, R=200):
            f(); pyew.synchronize()
            t0 = time.perf_counter()
            for _ in range(R): f()
            pyew.synchronize()
            return (time.perf_counter() - t0) / R * 1e6
        print(f"device rows={rows}: mul(d, dw) {t(lambda: pyew.mul(d, dw)):.1f} us  mul(d, d) {t(lambda: pyew.mul(d, d)):.1f} us  sigmoid {t(lambda: pyew.sigmoid(d)):.1f} us", flush=True)
