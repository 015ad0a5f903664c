"""One-off probe: one-shot staging copies with non-temporal stores against cached ones.

First the copy up (GPU events) of a 4 MiB pinned block in several states: not written lately,
just written by np.copyto, by libew's 8 copy threads (their workers still spinning), by one
thread, and 400 µs after the 8 threads wrote it, each with libew's streaming stores off and on.
Then whole numpy calls, sigmoid and add float32 from 2^17 to 2^24, the setting alternating in
one process (5 rounds, medians), with PyTorch's sigmoid round trip at 2^18, 2^20 and 2^22.

    python benchmarks/experiments/streaming_stores.py
"""
# ruff: noqa
import time, statistics, ctypes
import numpy as np, pyew, torch
from pyew import transfer, streams, library
rt = transfer.rt
lib = library.get()
sm = lib.cdll.ew_host_copy_streaming; sm.restype, sm.argtypes = ctypes.c_int, [ctypes.c_int]
rng = np.random.default_rng(0)
NB = 4 << 20
xs = rng.standard_normal(NB // 4).astype(np.float32)
a = pyew.empty_pinned(NB // 4); b = pyew.empty_pinned(NB // 4); a[:] = 1; b[:] = 1
dev = torch.empty(NB // 4, device="cuda"); s = torch.cuda.Stream(); S = s.cuda_stream
e0, e1 = streams.Event(True), streams.Event(True)
def busy(us):
    t = time.perf_counter() + us * 1e-6
    while time.perf_counter() < t: pass
def up(src):
    e0.record(S); rt.copy_htod(dev.data_ptr(), src.ctypes.data, NB, S); e1.record(S); e1.synchronize()
    return e1.elapsed_ms(e0) * 1e3
def hc(dst, src, th=8): lib.host_copy(dst.ctypes.data, src.ctypes.data, NB, th)
def timed(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e6
cases = {
    "up, pool cold": lambda: up(a),
    "up after np.copyto into it": lambda: (np.copyto(a, xs), up(a))[-1],
    "up after 8-thread copy into it": lambda: (hc(a, xs), up(a))[-1],
    "up after 8-thread copy, 400 us later": lambda: (hc(a, xs), busy(400), up(a))[-1],
    "up after 1-thread ew copy into it": lambda: (hc(a, xs, 1), up(a))[-1],
    "8-thread copy 4 MiB (host us)": lambda: timed(lambda: hc(a, xs)),
    "1-thread ew copy 4 MiB (host us)": lambda: timed(lambda: hc(a, xs, 1)),
}
for r in range(2):
    for mode in (0, 1):
        sm(mode)
        for k, f in cases.items():
            for _ in range(5): f()
            v = [f() for _ in range(41)]
            print(f"round {r} streaming={mode}: {k:40s} {statistics.median(v):7.1f} us (min {min(v):.1f})", flush=True)
def med(f, R):
    ts = []
    for _ in range(R):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
res = {}
for p in (17, 18, 19, 20, 21, 22, 23, 24):
    n = 1 << p
    x = rng.standard_normal(n).astype(np.float32); y = rng.standard_normal(n).astype(np.float32)
    R = 60 if p < 22 else 20
    fs = {"sigmoid": lambda: pyew.sigmoid(x), "add": lambda: pyew.add(x, y)}
    if p in (18, 20, 22):
        fs["torch sigmoid"] = lambda: torch.sigmoid(torch.from_numpy(x).cuda()).cpu().numpy()
    for name, f in fs.items():
        for _ in range(5): f()
    for r in range(5):
        for mode in (0, 1):
            sm(mode)
            for name, f in fs.items():
                if name.startswith("torch") and mode == 0: continue
                res.setdefault((p, name, mode), []).append(med(f, R))
    for name in fs:
        row = [f"{k[1]} {'NT' if k[2] else 'plain'} {statistics.median(v):8.1f}" for k, v in res.items() if k[0] == p and k[1] == name]
        print(f"2^{p}: " + " | ".join(row), flush=True)
sm(1)
