"""One-off experiment (2026-11-27): a streamed numpy formula (2^26 float32, row biases) and the upload route, from the main thread, from another
thread, beside a thread spinning in Python and beside one ticking every 1 ms: python benchmarks/experiments/gil_threads.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import time, statistics, threading
import numpy as np, pyew
from pyew import fused
from pyew.pinned import pinned_or_empty
rng = np.random.default_rng(0)
c = rng.standard_normal((16384, 4096)).astype(np.float32)
w = rng.standard_normal(4096).astype(np.float32); b = rng.standard_normal(4096).astype(np.float32)
tree, names = fused.parse("gelu(x * w + b)")
def fz():
    return fused.run(tree, {"x": c, "w": w, "b": b}, "gelu(x * w + b)", out=pinned_or_empty(c.shape, np.float32))
def mb():
    d = pyew.asarray(c); r = pyew.evaluate("gelu(d * w + b)", local_dict={"d": d, "w": w, "b": b})
    return r.get(out=pinned_or_empty(r.shape, r.dtype))
def timed(f, n=7):
    f(); ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
def in_thread(f, busy=False, sleepy=False):
    out = {}
    stop = [False]
    th = threading.Thread(target=lambda: out.setdefault("t", timed(f)))
    th.start()
    if busy:
        while th.is_alive():
            sum(range(2000))
    elif sleepy:
        while th.is_alive():
            time.sleep(0.001); sum(range(20000))
    else:
        th.join()
    th.join()
    return out["t"]
for r in range(2):
    print(f"round {r}: fused main {timed(fz):.2f}  thread {in_thread(fz):.2f}  thread+busy main {in_thread(fz, busy=True):.2f}  thread+1ms-tick main {in_thread(fz, sleepy=True):.2f} | upload route main {timed(mb):.2f} thread {in_thread(mb):.2f} busy {in_thread(mb, busy=True):.2f} tick {in_thread(mb, sleepy=True):.2f}", flush=True)
