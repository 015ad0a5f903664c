"""One-off probe: NVRTC compile time of six formulas in one process (the first builds the
precompiled header). "A" compiles the sources as pyew renders them; "B" adds ew_numpy.cuh to their
precompiled prefix by hand. Run at the tree before b6c6a80 (whose prefix lacked it), alternating
`python benchmarks/experiments/pch_prefix.py A|B`; no GPU needed. Results: docs/tuning.md."""
# ruff: noqa
import sys, time, os, statistics
sys.path.insert(0, "/work/main")
variant = sys.argv[1]
from pyew import fused, jit, formula
from pyew import dtypes as dt
f32 = dt.BY_NAME["float32"]
args = tuple(fused.Arg(c, True, f32) for c in "xwb")
inc = [jit.cuda_include(), *jit.include_dirs()]
NE = "ew::map_kernel<ew::Tuning<256, 2, 32, false, 0>, 4, int, ew_jit::fn, float, float, float, float>"
times = []
for i, text in enumerate(["sigmoid(x) * w + b", "gelu(x * w + b) * 3", "tanh(x) + exp(w) * b", "gelu(x * w + b) * 5",
                          "where(x > 0, x, w * expm1(x)) + b", "log1p(x * x) - w / b"]):
    src = fused.Program(fused.parse(text)[0], args, text).source
    if variant == "B":
        src = src.replace('#include "ew_math.cuh"\n', '#include "ew_math.cuh"\n#include "ew_numpy.cuh"\n', 1)
    t = time.perf_counter()
    jit.compile_cubin(src, NE, "sm_90", inc, text)
    times.append(1e3 * (time.perf_counter() - t))
print(variant, " ".join(f"{t:.0f}" for t in times), "later median %.0f" % statistics.median(times[1:]))
