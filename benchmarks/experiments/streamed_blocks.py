"""One-off experiment (2026-11-27): how a streamed numpy call is cut into blocks, the former rule
against the current one, in one process with the sides alternating (7 rounds, medians, ms; the
block count in brackets). Former: every operand counted per element in a slot, the pooled result
and a broadcast w included, and at most one block per worker. Current: transfer._slot_elems and
transfer._block_elems. python benchmarks/experiments/streamed_blocks.py"""
import statistics
import time

import numpy as np

import pyew
from pyew import transfer

rng = np.random.default_rng(0)
x = rng.standard_normal((16384, 4096)).astype(np.float32)
x2 = rng.standard_normal((16384, 4096)).astype(np.float32)
big = rng.standard_normal((65536, 4096)).astype(np.float32)
h = rng.standard_normal((32768, 4096)).astype(np.float16)
w = rng.standard_normal(4096).astype(np.float32)
b = rng.standard_normal(4096).astype(np.float32)
col = rng.standard_normal((16384, 1)).astype(np.float32)
W, B = np.broadcast_to(w, x.shape).copy(), np.broadcast_to(b, x.shape).copy()


def former_slot(slot, arrays, scales, full, direct):
    per_elem = sum(a.dtype.itemsize / s for a, s in zip(arrays, scales))
    return int((slot - transfer._ALIGN * (len(arrays) + 1)) / per_elem)


def former_blocks(n, most, per_elem, align):
    spread = max(int(transfer._MIN_BLOCK_BYTES / per_elem), -(-n // transfer.transfer_limits()["threads"]))
    return max(align, min(most, spread) // align * align)


rules = {"former": (former_slot, former_blocks), "current": (transfer._slot_elems, transfer._block_elems)}
cases = {
    "sigmoid 2^26": lambda: pyew.sigmoid(x),
    "add 2^26": lambda: pyew.add(x, x2),
    "mul(x, w) row 2^26": lambda: pyew.mul(x, w),
    "mul(x, col) 2^26": lambda: pyew.mul(x, col),
    "gelu(x*w+b) rows 2^26": lambda: pyew.evaluate("gelu(x * w + b)", local_dict=dict(x=x, w=w, b=b)),
    "gelu(x*w+b) full 2^26": lambda: pyew.evaluate("gelu(x * w + b)", local_dict=dict(x=x, w=W, b=B)),
    "sigmoid float16 2^27": lambda: pyew.sigmoid(h),
    "sigmoid 2^28": lambda: pyew.sigmoid(big),
    "add(x, w) row 2^28": lambda: pyew.add(big, w),
}
moves = [0]
move = transfer._move


def counted(*a, **k):
    moves[0] += 1
    return move(*a, **k)


def use(rule):
    transfer._slot_elems, transfer._block_elems = rules[rule]


for name, f in cases.items():
    times, blocks, results = {r: [] for r in rules}, {}, {}
    for r in rules:
        use(r)
        results[r] = f()
        transfer._move, moves[0] = counted, 0
        f()
        transfer._move, blocks[r] = move, moves[0]
    assert np.array_equal(results["former"], results["current"]), name
    for i in range(7):
        for r in (list(rules) if i % 2 == 0 else list(rules)[::-1]):
            use(r)
            t = time.perf_counter()
            f()
            times[r].append(time.perf_counter() - t)
    print(f"{name:24s} " + "  ".join(f"{r} {statistics.median(v) * 1e3:7.2f} ({blocks[r]})" for r, v in times.items()),
          flush=True)
use("current")
