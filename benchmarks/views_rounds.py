"""Offset views, several builds of libew.so and PyTorch in one process: each op x dtype x offset
is timed for every build and for PyTorch in turn, round after round, so that slow drifts of the
GPU (clocks, temperature) fall on all of them alike; the median over rounds is reported, and the
median over rounds of each build's time ratio to PyTorch's. Every build writes the same output
buffer PyTorch writes (its `out=` form, as in the bench), and each build's result is checked against PyTorch's.

    PYTHONPATH=. python benchmarks/views_rounds.py [label=path/to/libew.so ...]
        [--ops sigmoid,relu,add] [--dtypes float32,float16,bfloat16] [--rounds 6]

Without builds it times the library pyew loads (PYEW_LIB or build/libew.so).
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from pyew import dtypes, library, runtime
from pyew.bench.peers import TORCH_INTO

N = 1 << 26
OFFSETS = range(8)
REPS = 25
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def median_ms(call, starts, ends) -> float:
    for _ in range(2):
        call()
    torch.cuda._sleep(3_000_000)          # the host queues every timed call while this runs
    for s, e in zip(starts, ends):
        s.record()
        call()
        e.record()
    ends[-1].synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def forward(lib: library.Library, op: str, dtype: str):
    kernel = lib.manifest.op(op).kernel(dtypes.BY_NAME[dtype])
    return kernel.entry("forward").fn


class Calls:
    """The calls of one op and dtype on the view base[off:off + N] (and other[:N] for two inputs),
    each writing `out`: PyTorch's, and each build's forward entry point."""

    def __init__(self, op, dtype, libs, base, other, out, dims):
        self.op, self.dtype, self.base, self.other, self.out, self.dims = op, dtype, base, other, out, dims
        self.fns = {label: forward(lib, op, dtype) for label, lib in libs.items()}
        self.torch_fn = TORCH_INTO[op](torch, {})
        self.two = len(next(iter(libs.values())).manifest.op(op).inputs) == 2
        self.nbytes = (3 if self.two else 2) * N * base.element_size()

    def _args(self, off):
        view = self.base[off:off + N]
        return (view, self.other[:N]) if self.two else (view,)

    def make(self, name, off):
        args = self._args(off)
        if name == "torch":
            return lambda: self.torch_fn(*args, out=self.out)
        fn, ptrs = self.fns[name], [t.data_ptr() for t in args]

        def run():
            err = fn(self.out.data_ptr(), *ptrs, N, 0, *self.dims)
            if err:
                raise RuntimeError(f"{name} {self.op} {self.dtype}: CUDA error {err}")
        return run

    def check(self, off):
        """Every build's output, poisoned first, against PyTorch's."""
        self.make("torch", off)()
        want = self.out.float()
        for name in self.fns:
            self.out.fill_(float("nan"))
            self.make(name, off)()
            if not torch.allclose(self.out.float(), want, rtol=1e-2, atol=1e-6, equal_nan=False):
                raise SystemExit(f"{name} {self.op} {self.dtype} +{off}: result differs from PyTorch's")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="*", help="label=path of a libew.so")
    ap.add_argument("--ops", default="sigmoid,relu,add")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    builds = dict(b.split("=", 1) for b in a.builds)
    libs = {label: library.Library(Path(path)) for label, path in builds.items()} or {"pyew": library.get()}
    sms, threads = runtime.device().dims
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.rounds} rounds, n = {N}")
    for label, lib in libs.items():
        print(f"  {label}: {lib.path}")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    names = ["torch", *libs]
    print("| op | dtype | offset | " + " | ".join(f"{n} GB/s" for n in names) + " | "
          + " | ".join(f"PyTorch / {n}" for n in libs) + " |")
    for dtype in a.dtypes.split(","):
        td = TORCH_DTYPES[dtype]
        base = (torch.randn(N + 64, device="cuda", generator=gen) * 4).to(td)
        other = torch.randn(N + 64, device="cuda", generator=gen).to(td)
        out = torch.empty(N, device="cuda", dtype=td)
        for op in a.ops.split(","):
            calls = Calls(op, dtype, libs, base, other, out, (sms, threads))
            times = {}
            for off in OFFSETS:
                calls.check(off)
            for _ in range(a.rounds):
                for off in OFFSETS:
                    for name in names:
                        times.setdefault((off, name), []).append(median_ms(calls.make(name, off), starts, ends))
            for off in OFFSETS:
                gbs = [calls.nbytes / statistics.median(times[(off, n)]) / 1e6 for n in names]
                ratios = [statistics.median(t / s for t, s in zip(times[(off, "torch")], times[(off, n)]))
                          for n in libs]
                print(f"| {op} | {dtype} | +{off} | " + " | ".join(f"{g:.0f}" for g in gbs) + " | "
                      + " | ".join(f"{r:.4f}x" for r in ratios) + " |", flush=True)
        del base, other, out


if __name__ == "__main__":
    main()
