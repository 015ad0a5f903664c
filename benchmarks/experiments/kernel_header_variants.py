"""One-op formulas compiled against variants of libew's headers, against PyTorch in the same
process (2^26 elements, the bench's data, CUDA-synchronised batches, medians of 7 rounds of 20):
    python benchmarks/experiments/kernel_header_variants.py VARIANT
VARIANT: base (the headers as they are), floor (every map kernel's __launch_bounds__ with a floor
of 1024 resident threads an SM), rolled (`#pragma unroll 1` over a pack's elements and a trip's
packs). The variant's headers go first on NVRTC's include path; the library is not rebuilt."""
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

import pyew
from pyew import jit

variant = sys.argv[1] if len(sys.argv) > 1 else "base"
if variant != "base":
    libew = os.path.join(os.path.dirname(__file__), "..", "..", "libew")
    folder = tempfile.mkdtemp()
    for f in os.listdir(libew):
        if f.endswith((".cuh", ".h")):
            shutil.copy(os.path.join(libew, f), folder)
    for f in ("elementwise.cuh", "broadcast.cuh"):
        path = os.path.join(folder, f)
        text = open(path).read()
        if variant == "floor":
            text = text.replace("__launch_bounds__(Tn::kBlock)", "__launch_bounds__(Tn::kBlock, 1024 / Tn::kBlock)")
        elif variant == "rolled":
            loop = r"#pragma unroll\n(\s*for \(int (j|u) = 0; (j|u) < (N|U); (\+\+j|\+\+u)\) (out\.v|\{\n\s*Pack<Out))"
            text = re.sub(loop, r"#pragma unroll 1\n\1", text)
        open(path, "w").write(text)
    base = jit.include_dirs
    jit.include_dirs = lambda: [folder, *base()[1:]]

rng = np.random.default_rng(0)


def data(n, dtype):
    sign = rng.integers(0, 2, size=n, dtype=np.int8) * 2 - 1
    return torch.from_numpy((rng.random(n) * 3.9 + 0.1) * sign).to(dtype).cuda()


def ms(f, reps=20, rounds=7):
    f()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / reps * 1e3)
    return statistics.median(times)


PEERS = {"arctan": torch.atan, "arcsinh": torch.asinh, "arctanh": torch.atanh, "log1p": torch.log1p,
         "sinh": torch.sinh, "arcsin": torch.asin, "arccos": torch.acos, "erfc": torch.erfc, "cosh": torch.cosh,
         "tan": torch.tan, "arccosh": torch.acosh, "tanh": torch.tanh}
for dtype, ops in ((torch.float64, ["arctan", "arcsinh", "arctanh", "log1p", "sinh", "arcsin", "arccos", "erfc",
                                    "cosh", "tan", "arccosh"]),
                   (torch.float32, ["arctan", "erfc", "tanh", "arcsinh", "tan"])):
    x = data(1 << 26, dtype)
    o = torch.empty_like(x)
    copy = ms(lambda x=x, o=o: o.copy_(x))
    for op in ops:
        mine = ms(lambda op=op, x=x, o=o: pyew.evaluate(f"{op}(x)", local_dict={"x": x}, out=o))
        peer = ms(lambda op=op, x=x, o=o: PEERS[op](x, out=o))
        print(f"{variant} {op} {str(dtype)[6:]}: pyew {mine:.4f} ms ({copy / mine * 100:.1f}% of the copy), "
              f"PyTorch {peer:.4f} ms, {peer / mine:.3f}x", flush=True)
