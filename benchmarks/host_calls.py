"""Host time per call (median of 3000 after 300) of pyew ops on small arrays of each kind (pyew's,
CuPy's, torch's) with another array, a Python number or a broadcast bias, beside CuPy's and
PyTorch's own calls in the same process.

    PYTHONPATH=. python benchmarks/host_calls.py
"""
from __future__ import annotations

import statistics
import time

import cupy
import numpy as np
import torch

import pyew


def _median_us(f, n: int = 3000) -> float:
    for _ in range(300):
        f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(ts)


def main() -> None:
    s, o = cupy.ones(1024, cupy.float32), cupy.empty(1024, cupy.float32)
    cm, cb, co = cupy.ones((16, 64), cupy.float32), cupy.ones(64, cupy.float32), cupy.empty((16, 64), cupy.float32)
    t, to = torch.ones(1024, device="cuda"), torch.empty(1024, device="cuda")
    tm, tb = torch.ones((16, 64), device="cuda"), torch.ones(64, device="cuda")
    d, do = pyew.asarray(np.ones(1024, np.float32)), pyew.empty(1024)
    dh = d.astype("bfloat16")
    dm, db = pyew.asarray(np.ones((16, 64), np.float32)), pyew.asarray(np.ones(64, np.float32))
    cases = {
        "pyew.add(d, d)": lambda: pyew.add(d, d),
        "pyew.add(d, 1.0, out=do)": lambda: pyew.add(d, 1.0, out=do),
        "pyew.mul(d, 0.5)": lambda: pyew.mul(d, 0.5),
        "pyew.mul(d_bfloat16, 3)": lambda: pyew.mul(dh, 3),
        "pyew.add(d_16x64, bias_64)": lambda: pyew.add(dm, db),
        "pyew.add(cupy, cupy)": lambda: pyew.add(s, s),
        "pyew.add(cupy, 1.0, out=cupy)": lambda: pyew.add(s, 1.0, out=o),
        "pyew.add(cupy_16x64, cupy_bias_64, out=cupy)": lambda: pyew.add(cm, cb, out=co),
        "pyew.add(torch, torch)": lambda: pyew.add(t, t),
        "pyew.mul(torch, 0.5)": lambda: pyew.mul(t, 0.5),
        "pyew.add(torch, 1.0, out=torch)": lambda: pyew.add(t, 1.0, out=to),
        "cupy.add(cupy, 1.0, out=cupy)": lambda: cupy.add(s, 1.0, out=o),
        "torch.mul(t, 0.5)": lambda: torch.mul(t, 0.5),
        "torch.add(t, 1.0, out=to)": lambda: torch.add(t, 1.0, out=to),
        "torch.add(t_16x64, bias_64)": lambda: torch.add(tm, tb),
    }
    for name, f in cases.items():
        print(f"{name:46} {_median_us(f):7.1f} us", flush=True)


if __name__ == "__main__":
    main()
