"""GPU time per call of a chain of dependent map calls queued back to back on one stream (each
call reads what the one before it wrote), pyew's and PyTorch's in the same process: the GPU is
held by a sleep kernel while the host queues the chain, so host time does not enter. Run it once
per library to compare them (PYEW_LIB=...).

    PYTHONPATH=. python benchmarks/back_to_back.py [label]
"""
from __future__ import annotations

import statistics
import sys

import torch

import pyew

SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28)
DTYPES = ("float32", "bfloat16")
REPEATS = 7


def chain_us(step, calls: int) -> float:
    """Median GPU µs per call of `calls` calls of step(i)."""
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(20_000_000)          # about 10 ms: the host queues everything meanwhile
        start.record()
        for i in range(calls):
            step(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "pyew"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, library {pyew.library.get().path}")
    print(f"| dtype | n | {label} µs/call | {label} GB/s | PyTorch µs/call | PyTorch GB/s | PyTorch / {label} |")
    print("|---|---|---|---|---|---|---|")
    for dtype in DTYPES:
        for n in SIZES:
            bufs = [torch.randn(n, device="cuda").to(getattr(torch, dtype)) for _ in range(2)]
            calls = max(8, min(400, (4 << 30) // (n * bufs[0].element_size() * 2)))
            ours = chain_us(lambda i, b=bufs: pyew.relu(b[i % 2], out=b[1 - i % 2]), calls)
            theirs = chain_us(lambda i, b=bufs: torch.clamp_min(b[i % 2], 0, out=b[1 - i % 2]), calls)
            nbytes = 2 * n * bufs[0].element_size()
            print(f"| {dtype} | 2^{n.bit_length() - 1} | {ours:.2f} | {nbytes / ours / 1e3:.0f} | {theirs:.2f} | "
                  f"{nbytes / theirs / 1e3:.0f} | {theirs / ours:.3f} |")
            del bufs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
