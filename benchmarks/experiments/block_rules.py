"""One-off experiment (2026-11-27, against 5d8123c, where transfer._block_elems took (n, most,
per_elem, align)): block rules for streamed numpy calls in one process, sides alternating (6
rounds, medians, ms, blocks in brackets): former, staged bytes only with one block per worker
(new), and whole rounds of the workers with at least 1, 2 or 3 rounds (even1 is the rule kept).
python benchmarks/experiments/block_rules.py"""
# ruff: noqa  (a one-off script, kept as it ran)
import time, statistics
import numpy as np, pyew
from pyew import transfer
rng = np.random.default_rng(0)
x = rng.standard_normal((16384, 4096)).astype(np.float32)
x2 = rng.standard_normal((16384, 4096)).astype(np.float32)
big = rng.standard_normal((65536, 4096)).astype(np.float32)
mid = big[:24576]
w = rng.standard_normal(4096).astype(np.float32); b = rng.standard_normal(4096).astype(np.float32)
slot_new, blocks_new = transfer._slot_elems, transfer._block_elems
def slot_old(slot, arrays, scales, full, direct):
    pe = sum(a.dtype.itemsize / s for a, s in zip(arrays, scales))
    return int((slot - transfer._ALIGN * (len(arrays) + 1)) / pe)
def even(rounds):
    def f(n, most, per_elem, align):
        T = transfer._limits.threads
        k = max(-(-n // most), rounds * T)
        k = -(-k // T) * T
        per = max(-(-n // k), int(transfer._MIN_BLOCK_BYTES / per_elem))
        per = -(-per // align) * align
        return max(align, min(most // align * align, per))
    return f
policies = {"old": (slot_old, blocks_new), "new": (slot_new, blocks_new), "even1": (slot_new, even(1)),
            "even2": (slot_new, even(2)), "even3": (slot_new, even(3))}
nb = [0]
orig_move = transfer._move
def counting(*a, **k):
    nb[0] += 1; return orig_move(*a, **k)
cases = {
    "sigmoid 2^26": lambda: pyew.sigmoid(x),
    "add 2^26": lambda: pyew.add(x, x2),
    "mul row 2^26": lambda: pyew.mul(x, w),
    "gelu(x*w+b) rows 2^26": lambda: pyew.evaluate("gelu(x * w + b)", local_dict=dict(x=x, w=w, b=b)),
    "sigmoid 1.5*2^26": lambda: pyew.sigmoid(mid),
    "sigmoid 2^28": lambda: pyew.sigmoid(big),
}
def use(p):
    transfer._slot_elems, transfer._block_elems = policies[p]
for k, f in cases.items():
    res = {p: [] for p in policies}
    blocks = {}
    for p in policies:
        use(p); f(); transfer._move = counting; nb[0] = 0; f(); transfer._move = orig_move; blocks[p] = nb[0]
    for r in range(6):
        order = list(policies) if r % 2 == 0 else list(policies)[::-1]
        for p in order:
            use(p); t = time.perf_counter(); f(); res[p].append(time.perf_counter() - t)
    print(f"{k:24s} " + "  ".join(f"{p} {statistics.median(v)*1e3:7.2f} ({blocks[p]})" for p, v in res.items()), flush=True)
use("new")
