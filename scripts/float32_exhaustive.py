"""Every float32 input (all 2^32 bit patterns) through pyew's float32 transcendental ops on the
GPU, against float64 references computed by PyTorch on the same GPU, with the tests' criterion:
1e-6 relative plus 4 float32 tiny, NaN where the reference is NaN, the same infinities. The tests
sample; this covers the tails' exponent splits, clamps and subnormals completely. Needs a GPU and
PyTorch; takes seconds per op on an H100 or H200.

    python scripts/float32_exhaustive.py gelu gelu_tanh
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import pyew

TINY = 1.1754943508222875e-38
F32_MAX = 3.4028234663852886e38


def _gelu(x):
    return torch.where(x < -40, -0.0, x * 0.5 * torch.special.erfc(-x / 2 ** 0.5))


def _gelu_tanh(x):
    return torch.where(x < -800, -0.0, x * torch.sigmoid(1.5957691216057308 * (x + 0.044715 * x ** 3)))


REFERENCES = {
    "sigmoid": torch.sigmoid,
    "silu": lambda x: torch.where(x < -800, -0.0, x * torch.sigmoid(x)),
    "elu": lambda x: torch.where(x > 0, x, torch.expm1(x)),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
}


def check(name: str, chunk_bits: int = 28) -> int:
    """Failures of op `name` over every float32 input; prints the worst relative error."""
    fn, ref_fn = getattr(pyew, name), REFERENCES[name]
    bad = worst = 0
    step = 1 << chunk_bits
    for start in range(0, 1 << 32, step):
        bits = torch.arange(start, start + step, dtype=torch.int64, device="cuda").to(torch.int32)
        x = bits.view(torch.float32)
        got = torch.from_dlpack(fn(x)).double()
        ref = ref_fn(x.double())
        # a float64 value that float32 rounds to infinity
        ref = torch.where(ref.abs() > F32_MAX * (1 + 2 ** -25), ref * float("inf"), ref)
        nan_ref, nan_got = ref.isnan(), got.isnan()
        inf = ref.isinf() & ~nan_ref
        fin = ~nan_ref & ~inf
        err = (got - ref).abs()
        fail = (nan_ref != nan_got) | (inf & (got != ref)) | (fin & ~(err <= 1e-6 * ref.abs() + 4 * TINY))
        bad += int(fail.sum())
        big = fin & (ref.abs() > 1e-30)
        if big.any():
            worst = max(worst, float((err[big] / ref[big].abs()).max()))
    print(f"{name} float32: {bad} of 2^32 inputs fail; worst relative error {worst:.3g} (|ref| > 1e-30)",
          flush=True)
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="+", choices=sorted(REFERENCES))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    failed = sum(check(name) for name in args.ops)
    print(f"{time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
