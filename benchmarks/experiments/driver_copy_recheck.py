"""One-off probe: where a one-shot numpy call's host time goes before its transfers (the call with
transfer.one_shot a no-op, and pinned.for_result alone, at 2^4 to 2^20 float32; a cProfile of
sigmoid at 2^20), and CUDA's own copy from pageable memory against staging by size: sigmoid and
add float32 at 2^15 to 2^18 with transfer._DRIVER_COPY_BYTES at 0, 512 KiB and 2 MiB, in one
process, 5 rounds alternating; PyTorch's sigmoid round trip at 2^16 and 2^18.

    python benchmarks/experiments/driver_copy_recheck.py
"""
# ruff: noqa
import time, statistics, cProfile, pstats, io
import numpy as np, pyew, torch
from pyew import transfer, pinned
rng = np.random.default_rng(0)
def med(f, R=300):
    for _ in range(30): f()
    ts = []
    for _ in range(R):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
orig = transfer.one_shot
xs = {p: rng.standard_normal(1 << p).astype(np.float32) for p in (4, 15, 16, 17, 18, 20)}
ys = {p: rng.standard_normal(1 << p).astype(np.float32) for p in xs}
for p in (4, 16, 18, 20):
    x = xs[p]
    full = med(lambda: pyew.sigmoid(x))
    transfer.one_shot = lambda inputs, outputs, launch, stream, *a, **k: True
    noop = med(lambda: pyew.sigmoid(x))
    transfer.one_shot = orig
    fr = med(lambda: pinned.for_result((1 << p,), np.dtype(np.float32)))
    print(f"2^{p} sigmoid: whole call {full:.1f} us, with one_shot a no-op {noop:.1f}, for_result {fr:.1f}, np.empty {med(lambda: np.empty(1 << p, np.float32)):.2f}", flush=True)
x = xs[20]
pr = cProfile.Profile(); pr.enable()
for _ in range(300): pyew.sigmoid(x)
pr.disable(); st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(25); print(st.getvalue()[:6000], flush=True)
# CUDA's own copy from pageable memory against staging, by size
res = {}
limits = (0, 512 << 10, 2 << 20)
for r in range(5):
    for lim in limits:
        transfer._DRIVER_COPY_BYTES = lim
        for p in (15, 16, 17, 18):
            x, y = xs[p], ys[p]
            res.setdefault((p, "sigmoid", lim), []).append(med(lambda: pyew.sigmoid(x), 100))
            res.setdefault((p, "add", lim), []).append(med(lambda: pyew.add(x, y), 100))
transfer._DRIVER_COPY_BYTES = 512 << 10
for p in (15, 16, 17, 18):
    for op in ("sigmoid", "add"):
        print(f"2^{p} {op}: " + " | ".join(f"cuda copies up to {lim >> 10} KiB: {statistics.median(res[(p, op, lim)]):.1f} us" for lim in limits), flush=True)
for p in (16, 18):
    x = xs[p]
    print(f"2^{p} torch sigmoid round trip {med(lambda: torch.sigmoid(torch.from_numpy(x).cuda()).cpu().numpy()):.1f} us")
