"""One-off experiment (2026-11-27): where a numpy mul(x, 2.0) spends its time against sigmoid(x) (one_shot timed
within the call, the launches counted, the GPU time on DeviceArrays, cProfile): python benchmarks/experiments/one_shot_phases.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import time, statistics, cProfile, pstats, io
import numpy as np, pyew
from pyew import transfer, library
rng = np.random.default_rng(0)
w = rng.standard_normal(4096).astype(np.float32)
stamps = {}
orig_one = transfer.one_shot
def one_shot(inputs, outputs, launch, stream, parts=False):
    t0 = time.perf_counter()
    r = orig_one(inputs, outputs, launch, stream, parts)
    stamps.setdefault("one_shot", []).append((t0, time.perf_counter(), parts))
    return r
transfer.one_shot = one_shot
orig_launch = library.launch
count = [0]
def launch(entry, args, s):
    count[0] += 1
    stamps.setdefault("entries", set()).add(getattr(entry, "symbol", str(entry)))
    return orig_launch(entry, args, s)
library.launch = launch
for p in (22, 24):
    x = rng.standard_normal((1 << p) // 4096 * 4096).astype(np.float32).reshape(-1, 4096)
    cases = {"sigmoid": lambda: pyew.sigmoid(x), "mul2": lambda: pyew.mul(x, 2.0), "mulw": lambda: pyew.mul(x, w)}
    for f in cases.values(): f(); f()
    res = {k: [] for k in cases}; inner = {k: [] for k in cases}; launches = {k: 0 for k in cases}; ents = {}
    for r in range(15):
        for k, f in cases.items():
            stamps.clear(); count[0] = 0
            t = time.perf_counter(); f(); t1 = time.perf_counter()
            res[k].append(t1 - t)
            o = stamps.get("one_shot", [])
            inner[k].append(sum(b - a for a, b, _ in o))
            launches[k] = (count[0], [pp for _, _, pp in o]); ents[k] = stamps.get("entries")
    print(f"2^{p}: " + "  ".join(f"{k} {statistics.median(v)*1e3:.3f} (one_shot {statistics.median(inner[k])*1e3:.3f}, launches {launches[k]}, {ents[k]})" for k, v in res.items()), flush=True)
    d = pyew.asarray(x)
    for name, f in (("sigmoid", lambda: pyew.sigmoid(d)), ("mul2", lambda: pyew.mul(d, 2.0)), ("mulw", lambda: pyew.mul(d, w))):
        for _ in range(5): f()
        pyew.synchronize() if hasattr(pyew, "synchronize") else d.get()
        ts = []
        for _ in range(9):
            t = time.perf_counter()
            for _ in range(20): r_ = f()
            r_.get()[:1] if False else None
            pyew.synchronize() if hasattr(pyew, "synchronize") else r_.get()
            ts.append((time.perf_counter() - t) / 20)
        print(f"   GPU {name}: {statistics.median(ts)*1e3:.4f} ms per call", flush=True)
x = rng.standard_normal((1 << 24) // 4096 * 4096).astype(np.float32).reshape(-1, 4096)
for name, f in (("sigmoid", lambda: pyew.sigmoid(x)), ("mul2", lambda: pyew.mul(x, 2.0))):
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20): f()
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); print(name, s.getvalue()[:3500])
