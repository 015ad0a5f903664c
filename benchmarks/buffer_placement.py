"""relu at 2^28 elements, pyew's kernel and PyTorch's crossed with where the input and the output
were allocated (PyTorch's caching allocator or pyew's stream-ordered pool) and with two kinds of
data (torch.randn, and the bench's tiled block of +-[0.1, 4)). Every configuration runs for
SECONDS per round, rounds interleaved, so slow drifts (clocks under the power cap) hit all alike;
the ratio is against PyTorch's kernel on PyTorch's buffers with the same data.

    PYTHONPATH=. python benchmarks/buffer_placement.py [dtypes] [rounds] [seconds]
"""
from __future__ import annotations

import itertools
import sys
import time

import numpy as np
import torch

import pyew
from pyew.bench.data import random_host_n

N = 1 << 28
ALLOCATORS = ("torch", "pyew")


def buffer(alloc: str, dtype: str):
    if alloc == "torch":
        return torch.empty(N, dtype=getattr(torch, dtype), device="cuda")
    d = pyew.empty(N, dtype)
    return d, torch.from_dlpack(d)          # the DeviceArray is kept: it owns the memory


def main() -> None:
    dtypes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["bfloat16", "float32"]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.4
    rng = np.random.default_rng(1)
    configs, keep = [], []
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        sources = {"randn": torch.randn(N, dtype=tdt, device="cuda"),
                   "bench": torch.from_numpy(random_host_n(rng, "float32", N)).cuda().to(tdt)}
        for data, ina, outa in itertools.product(sources, ALLOCATORS, ALLOCATORS):
            x, y = buffer(ina, dtype), buffer(outa, dtype)
            keep += [x, y]
            x, y = (x[1] if isinstance(x, tuple) else x), (y[1] if isinstance(y, tuple) else y)
            x.copy_(sources[data])
            want = torch.relu(x)
            for kernel in ("pyew", "torch"):
                y.fill_(float("nan"))
                f = ((lambda x=x, y=y: pyew.relu(x, out=y)) if kernel == "pyew"
                     else (lambda x=x, y=y: torch.clamp_min(x, 0, out=y)))
                f()
                torch.cuda.synchronize()
                if not torch.equal(y, want):
                    raise SystemExit(f"{kernel} relu {dtype} gave wrong results")
                configs.append(((dtype, data, ina, outa, kernel), f, 2 * N * x.element_size()))
            del want
        del sources
    totals = {c: [0, 0.0] for c, _, _ in configs}
    for _ in range(rounds):
        for c, f, _ in configs:
            torch.cuda.synchronize()
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds:
                for _ in range(8):
                    f()
                k += 8
            torch.cuda.synchronize()
            totals[c][0] += k
            totals[c][1] += time.perf_counter() - t0
    gbps = {c: nbytes * totals[c][0] / totals[c][1] / 1e9 for c, _, nbytes in configs}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {rounds} rounds of {seconds} s")
    print("| dtype | data | input from | output from | kernel | GB/s | / PyTorch on PyTorch's buffers |")
    print("|---|---|---|---|---|---|---|")
    for c, g in gbps.items():
        base = gbps[(c[0], c[1], "torch", "torch", "torch")]
        print(f"| {' | '.join(c)} | {g:.1f} | {g / base:.4f} |")


if __name__ == "__main__":
    main()
