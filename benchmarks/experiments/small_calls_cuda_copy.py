"""One-off experiment (2026-11-27): one-shot numpy calls with every operand staged through the small
buffer against every C-ordered operand copied by CUDA from its own memory, 2^14 to 2^20 float32.
python benchmarks/experiments/small_calls_cuda_copy.py"""
import time, statistics
import numpy as np, torch, pyew
from pyew import transfer, pinned
from pyew import runtime as rt
new = transfer.one_shot
def direct(inputs, outputs, launch, stream, parts=False):
    views = [*inputs, *outputs]
    if sum(v.nbytes for v in views) > LIMIT:
        return new(inputs, outputs, launch, stream, parts)
    k = len(inputs)
    need = sum(transfer._round(v.nbytes) for v in views)
    dbase = rt.malloc(need, stream)
    try:
        ptrs = transfer._laid_out(dbase, views)
        transfer._move(views[:k], views[k:], ptrs, stream.cu, None, here=[True] * len(views),
                       launch=lambda p, n: launch(p[:k], p[k:], stream, n))
    finally:
        rt.free(dbase, stream, need)
    return True
rng = np.random.default_rng(0)
def block(fn, R=200):
    ts = []
    for _ in range(R):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
LIMIT = 1 << 30
for n in (1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20):
    x = rng.standard_normal(n).astype(np.float32); y = x.copy()
    res = {k: [] for k in ("staged sig", "direct sig", "staged add", "direct add", "torch sig")}
    for r in range(7):
        for name, impl in (("staged", new), ("direct", direct)):
            transfer.one_shot = impl
            res[f"{name} sig"].append(block(lambda: pyew.sigmoid(x)))
            res[f"{name} add"].append(block(lambda: pyew.add(x, y)))
        transfer.one_shot = new
        res["torch sig"].append(block(lambda: torch.sigmoid(torch.from_numpy(x).cuda()).cpu().numpy()))
    transfer.one_shot = direct
    ok = np.array_equal(pyew.add(x, y), x + y)
    transfer.one_shot = new
    print(f"n={n}: " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in res.items()) + f" us; direct right: {ok}")
