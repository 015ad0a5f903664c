"""One-off probe: streamed calls' staging copies through libew's copy on the worker's own thread
(streaming stores off and on) against np.copyto, the streamed path's own.

Swaps the default `copy` of transfer._move, which the streamed path's workers use (one-shot calls
pass theirs), for libew's copy on one thread; sigmoid and add float32 at 2^25, 2^26 and 2^27,
the variants alternating in one process (4 rounds, medians).

    python benchmarks/experiments/streaming_stores_streamed.py
"""
# ruff: noqa
import time, statistics, ctypes
import numpy as np, pyew
from pyew import transfer, library
lib = library.get()
sm = lib.cdll.ew_host_copy_streaming; sm.restype, sm.argtypes = ctypes.c_int, [ctypes.c_int]
rng = np.random.default_rng(0)
def alone(dst, src):
    """transfer._copy on this thread only"""
    if (dst.nbytes < 512 << 10 or dst.dtype != src.dtype or dst.shape != src.shape
            or not (dst.flags.c_contiguous and src.flags.c_contiguous)):
        np.copyto(dst, src)
    else:
        lib.host_copy(dst.ctypes.data, src.ctypes.data, dst.nbytes, 1)
defaults = list(transfer._move.__defaults__)
at = transfer._move.__code__.co_varnames[:transfer._move.__code__.co_argcount].index("copy") - (
    transfer._move.__code__.co_argcount - len(defaults))
def use(copy):
    d = list(defaults); d[at] = copy; transfer._move.__defaults__ = tuple(d)
variants = {"np.copyto": (np.copyto, 1), "ew plain": (alone, 0), "ew NT": (alone, 1)}
def run(f, R):
    ts = []
    for _ in range(R):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
for p, R in ((25, 7), (26, 5), (27, 3)):
    n = 1 << p
    x = rng.standard_normal(n).astype(np.float32); y = rng.standard_normal(n).astype(np.float32)
    fs = {"sigmoid": lambda: pyew.sigmoid(x), "add": lambda: pyew.add(x, y)}
    res = {}
    for f in fs.values(): f()
    for r in range(4):
        for v, (cp, mode) in variants.items():
            use(cp); sm(mode)
            for k, f in fs.items():
                res.setdefault((k, v), []).append(run(f, R))
    for k in fs:
        print(f"2^{p} {k}: " + " | ".join(f"{v} {statistics.median(res[(k, v)]):.2f} ms" for v in variants), flush=True)
    del x, y
use(np.copyto); sm(1)
