"""One-off experiment (2026-11-27): small numpy calls with 63901be's one_shot against the one-pass one,
blocks of 200 calls alternating. python benchmarks/experiments/small_calls_one_pass.py"""
import time, statistics
import numpy as np, torch, pyew
from pyew import transfer
new = transfer.one_shot
import subprocess
text = subprocess.run(["git", "show", "63901be:pyew/transfer.py"], capture_output=True, text=True, check=True).stdout
ns = dict(vars(transfer))
exec(text[text.index("def one_shot("):text.index("_SPLIT_COPY_BYTES = 512 << 10")], ns)     # 63901be's one_shot
old = ns["one_shot"]
rng = np.random.default_rng(0)
def block(fn, R=200):
    ts = []
    for _ in range(R):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
for n in (16, 1 << 16):
    x = rng.standard_normal(n).astype(np.float32); y = x.copy()
    res = {k: [] for k in ("old sig", "new sig", "old add", "new add", "torch sig")}
    for f in (lambda: pyew.sigmoid(x), lambda: pyew.add(x, y)):
        for _ in range(300): f()
    for r in range(15):
        for name, impl in (("old", old), ("new", new)):
            transfer.one_shot = impl
            res[f"{name} sig"].append(block(lambda: pyew.sigmoid(x)))
            res[f"{name} add"].append(block(lambda: pyew.add(x, y)))
        transfer.one_shot = new
        res["torch sig"].append(block(lambda: torch.sigmoid(torch.from_numpy(x).cuda()).cpu().numpy()))
    print(f"n={n}: " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in res.items()) + " us (medians of 15 alternating blocks)")
