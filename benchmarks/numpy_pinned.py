"""numpy in, numpy out at 2^26 float32: pageable arrays against pyew.empty_pinned ones, and
PyTorch's round trip through pinned tensors in the same run (wall clock, median of 7 after one).

    PYTHONPATH=. python benchmarks/numpy_pinned.py
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import pyew

N = 1 << 26


def _median_ms(f, k: int = 7) -> float:
    f()
    ts = []
    for _ in range(k):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def main() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    px, py, pout = pyew.empty_pinned(N), pyew.empty_pinned(N), pyew.empty_pinned(N)
    px[...], py[...] = x, y
    tx, ty = torch.from_numpy(x).pin_memory(), torch.from_numpy(y).pin_memory()
    tout = torch.empty(N).pin_memory()

    def torch_round_trip(fn, *ts):
        tout.copy_(fn(*(t.cuda(non_blocking=True) for t in ts)))
        torch.cuda.synchronize()

    cases = {
        "pyew.sigmoid(x), pageable x, new result": lambda: pyew.sigmoid(x),
        "pyew.sigmoid(x, out=), pinned x and out": lambda: pyew.sigmoid(px, out=pout),
        "torch.sigmoid, pinned in and out": lambda: torch_round_trip(torch.sigmoid, tx),
        "pyew.add(x, y), pageable, new result": lambda: pyew.add(x, y),
        "pyew.add(x, y, out=), pinned x, y and out": lambda: pyew.add(px, py, out=pout),
        "torch.add, pinned in and out": lambda: torch_round_trip(torch.add, tx, ty),
    }
    for name, f in cases.items():
        print(f"{name:45} {_median_ms(f):8.2f} ms", flush=True)
    np.testing.assert_array_equal(pyew.add(px, py, out=pout), x + y)


if __name__ == "__main__":
    main()
