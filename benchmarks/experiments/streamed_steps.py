"""One-off experiment (2026-11-27): every step of every worker of a streamed call timed (the copy in,
the queued copies, the launch, the wait), for sigmoid(x) and a row-bias mul(x, w), x (16384, 4096)
float32. python benchmarks/experiments/streamed_steps.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import sys, time, statistics, threading, collections
import numpy as np, pyew
from pyew import transfer
from pyew import runtime as rt
rng = np.random.default_rng(0)
x = rng.standard_normal((16384, 4096)).astype(np.float32)
w = rng.standard_normal(4096).astype(np.float32)
ev = []
lock = threading.Lock()
T0 = [0.0]
def rec(name, t0):
    t1 = time.perf_counter()
    with lock: ev.append((threading.get_ident(), name, t0 - T0[0], t1 - T0[0]))
def wrap(fn, name):
    def g(*a, **k):
        t = time.perf_counter()
        try: return fn(*a, **k)
        finally: rec(name, t)
    return g
orig = {n: getattr(rt, n) for n in ("copy_htod", "copy_dtoh")}
orig_move = transfer._move
def timed_move(ins, outs, ptrs, stream_cu, buf=None, start=0, here=None, launch=None, settle=None, copy=np.copyto, **kw):
    t = time.perf_counter()
    orig_move(ins, outs, ptrs, stream_cu, buf, start, here, wrap(launch, "launch") if launch else None,
              wrap(settle, "settle") if settle else None, wrap(copy, "copy"), **kw)
    rec("move", t)
orig_views = transfer._views
def run(name, f):
    f(); f()
    for n in orig: setattr(rt, n, wrap(orig[n], n))
    transfer._move = timed_move
    transfer._views = wrap(orig_views, "views")
    ev.clear(); T0[0] = time.perf_counter(); f(); total = time.perf_counter() - T0[0]
    for n in orig: setattr(rt, n, orig[n])
    transfer._move = orig_move; transfer._views = orig_views
    tids = {}
    print(f"== {name}: {total*1e3:.2f} ms, {len(ev)} events")
    agg = collections.defaultdict(float)
    for tid, nm, a, b in sorted(ev, key=lambda e: e[2]):
        agg[nm] += b - a
    print("   sum per phase (ms): " + "  ".join(f"{k}={v*1e3:.1f}" for k, v in agg.items()))
    for tid, nm, a, b in sorted(ev, key=lambda e: e[2]):
        i = tids.setdefault(tid, len(tids))
        if i < 3:
            print(f"   t{i:02d} {nm:10s} {a*1e3:8.3f} {b*1e3:8.3f}  ({(b-a)*1e3:.3f})")
run("sigmoid", lambda: pyew.sigmoid(x))
run("mul row", lambda: pyew.mul(x, w))
