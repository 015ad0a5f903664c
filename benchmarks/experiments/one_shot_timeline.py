"""One-off probe: where a one-shot numpy call's time goes, on a timeline.

Wraps transfer's copies up and down, its staging copies, the kernel launch and the waits with host
stamps and CUDA events (recorded on the stream each piece is queued on), and prints the median
call of 30 for sigmoid and add, float32, at 2^20, 2^21 and 2^22: host time and GPU time of each
piece from the call's start. Then the wire alone: 2 and 4 MiB pinned copies up, down and both at
once, and a staging copy of that size. The events add tens of microseconds per call.

    python benchmarks/experiments/one_shot_timeline.py
"""
# ruff: noqa
import time, statistics, sys
import numpy as np, pyew
from pyew import transfer, streams
rt = transfer.rt
rng = np.random.default_rng(0)
log = []   # (kind, host_t, event|None, stream)
T0 = [0.0]
def ev(stream_cu):
    e = streams.Event(timing=True); e.record(stream_cu); return e
o_h, o_d, o_c, o_one, o_sync = rt.copy_htod, rt.copy_dtoh, transfer._copy, transfer.one_shot, rt.stream_synchronize
def htod(dst, src, n, st):
    a = ev(st); log.append(("up<", time.perf_counter(), a, n)); o_h(dst, src, n, st); log.append(("up>", time.perf_counter(), ev(st), n))
def dtoh(dst, src, n, st):
    a = ev(st); log.append(("dn<", time.perf_counter(), a, n)); o_d(dst, src, n, st); log.append(("dn>", time.perf_counter(), ev(st), n))
def cp(d, s):
    log.append(("stage<", time.perf_counter(), None, d.nbytes)); o_c(d, s); log.append(("stage>", time.perf_counter(), None, d.nbytes))
def sync(st):
    log.append(("sync<", time.perf_counter(), None, 0)); o_sync(st); log.append(("sync>", time.perf_counter(), None, 0))
def one(inputs, outputs, launch, stream, *a, **k):
    base = ev(stream.cu); log.append(("one<", time.perf_counter(), base, 0))
    def L(ins, outs, st, n):
        log.append(("k<", time.perf_counter(), ev(st.cu), n)); r = launch(ins, outs, st, n); log.append(("k>", time.perf_counter(), ev(st.cu), n)); return r
    r = o_one(inputs, outputs, L, stream, *a, **k)
    log.append(("one>", time.perf_counter(), None, 0)); return r
def patch(on):
    rt.copy_htod, rt.copy_dtoh, transfer._copy, transfer.one_shot, rt.stream_synchronize = (htod, dtoh, cp, one, sync) if on else (o_h, o_d, o_c, o_one, o_sync)
def med(f, R=200):
    for _ in range(20): f()
    ts = []
    for _ in range(R):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
for p in (20, 21, 22):
    n = 1 << p
    x = rng.standard_normal(n).astype(np.float32); y = rng.standard_normal(n).astype(np.float32)
    for name, f in (("sigmoid", lambda: pyew.sigmoid(x)), ("add", lambda: pyew.add(x, y))):
        plain = med(f)
        patch(True)
        for _ in range(10): f()
        tls = []
        for _ in range(30):
            log.clear(); t = time.perf_counter(); f(); t1 = time.perf_counter()
            base = next(e for k, h, e, _ in log if k == "one<")
            tls.append((t, t1, list(log), base))
        patch(False)
        tls.sort(key=lambda r: r[1] - r[0]); t, t1, lg, base = tls[len(tls) // 2]
        hb = next(h for k, h, e, _ in lg if k == "one<")
        print(f"2^{p} {name}: plain median {plain:.1f} us; probed median call {1e6*(t1-t):.1f} us, enter->one_shot {1e6*(hb-t):.1f}, one_shot>->return {1e6*(t1-lg[-1][1]):.1f}")
        for k, h, e, nb in lg:
            g = f"gpu {e.elapsed_ms(base)*1e3:7.1f}" if e is not None else " " * 11
            print(f"    {k:7s} host {1e6*(h-hb):7.1f}  {g}  {nb}")
    sys.stdout.flush()
# the wire alone: 4 MiB and 2 MiB pinned copies, up, down, and both at once
import ctypes
for mb in (2, 4):
    nb = mb << 20
    a = pyew.empty_pinned(nb // 4); b = pyew.empty_pinned(nb // 4)
    d1 = rt.malloc(nb, None) if False else None
    import torch
    da = torch.empty(nb // 4, device="cuda"); db = torch.empty(nb // 4, device="cuda")
    s1 = torch.cuda.Stream(); s2 = torch.cuda.Stream()
    def up(): o_h(da.data_ptr(), a.ctypes.data, nb, s1.cuda_stream); o_sync(s1.cuda_stream)
    def dn(): o_d(b.ctypes.data, db.data_ptr(), nb, s2.cuda_stream); o_sync(s2.cuda_stream)
    def both():
        o_h(da.data_ptr(), a.ctypes.data, nb, s1.cuda_stream); o_d(b.ctypes.data, db.data_ptr(), nb, s2.cuda_stream); o_sync(s1.cuda_stream); o_sync(s2.cuda_stream)
    print(f"wire {mb} MiB pinned: up {med(up):.1f} us, down {med(dn):.1f}, both at once {med(both):.1f}")
    xs = rng.standard_normal(nb // 4).astype(np.float32)
    print(f"  stage {mb} MiB pageable->pinned: {med(lambda: o_c(a, xs)):.1f} us; np.copyto {med(lambda: np.copyto(a, xs)):.1f}")
