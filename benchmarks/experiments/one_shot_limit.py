"""One shot up to small_bytes = 384 MiB against the former 192 MiB (the small buffer then capped at
half of pinned_bytes): numpy calls in one process, the two settings alternating in rounds, medians
of 5 calls per round, ms. Usage: python benchmarks/experiments/one_shot_limit.py [rounds]"""
import statistics
import sys
import time

import numexpr as ne
import numpy as np

import pyew
from pyew import transfer

MiB = 1 << 20
new_cap = transfer._small_buffer_bytes
def old_cap():
    L = transfer._limits
    return max(transfer._MIN_SMALL_PINNED, min(L.small_bytes, L.pinned_bytes // 2) + 16 * transfer._ALIGN)
base = pyew.transfer_limits()
CFG = {"before (192/432, half)": (dict(base, small_bytes=192 * MiB, pinned_bytes=432 * MiB), old_cap),
       "defaults now": (dict(base), new_cap)}
print("defaults", base, flush=True)
rng = np.random.default_rng(0)
def med(f, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
cases, checks = [], []
ne.set_num_threads(16)
for p in (24, 25, 26):
    n = 1 << p
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    cases += [(f"sigmoid 2^{p}", lambda x=x: pyew.sigmoid(x)),
              (f"add 2^{p}", lambda x=x, y=y: pyew.add(x, y))]
    if p == 24:
        w = rng.standard_normal(n).astype(np.float32)
        cases.append((f"x*w+y 2^{p}",
                      lambda x=x, w=w, y=y: pyew.evaluate("x * w + y", local_dict=dict(x=x, w=w, y=y))))
    if p >= 25:
        cases.append((f"numexpr add 2^{p}", lambda x=x, y=y: ne.evaluate("x + y")))
    checks.append((x, y))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
res = {(c, k): [] for c, _ in cases for k in CFG}
for r in range(rounds):
    for k, (lim, cap) in CFG.items():
        transfer._small_buffer_bytes = cap
        pyew.set_transfer_limits(**lim)
        if r == 0:
            for xx, yy in checks:
                np.testing.assert_array_equal(pyew.add(xx, yy), xx + yy)
                np.testing.assert_allclose(pyew.sigmoid(xx), 1 / (1 + np.exp(-xx.astype(np.float64))), rtol=1e-6)
        for c, f in cases:
            if c.startswith("numexpr") and k != "defaults now":
                continue
            f()
            f()
            res[(c, k)].append(med(f, 5))
print("ring slot MiB now", transfer._ring_slot_bytes() / MiB, "small cap MiB", transfer._small_buffer_bytes() / MiB)
for c, _ in cases:
    got = [f"{k}: {statistics.median(v):7.2f} ms" for (cc, k), v in res.items() if cc == c and v]
    print(f"{c:20s} " + "  ".join(got), flush=True)
