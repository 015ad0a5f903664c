"""One-off probe: where a new formula's first call goes on a GPU host, by phase (NVRTC's `--time`)
and by pyew's steps, in a fresh cache folder each time, after three formulas have warmed the process.
Run it in several processes, with the NVRTC to compare first on the path
(`PYTHONPATH=<folder of the nvidia-cuda-nvrtc wheel>:$PYTHONPATH`). Results: benchmarks/RESULTS.md,
"Fused formulas"; docs/tuning.md."""
# ruff: noqa
import os, sys, time, tempfile, functools, subprocess
import numpy as np
import pyew
from pyew import jit, fused, library
import torch
T = {}
def timed(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            T[name] = T.get(name, 0) + 1e3 * (time.perf_counter() - t)
    setattr(mod, name, w)
for n in ("compile_cubin", "toolchain", "key_of", "include_dirs", "headers_digest", "cubin", "kernel"):
    timed(jit, n)
timed(fused, "Program")
print("nvrtc", jit.nvrtc_version(), flush=True)
x1 = pyew.asarray(np.ones(1, np.float32))
base = jit.options
for i in range(3):
    T.clear(); t = time.perf_counter()
    pyew.evaluate(f"gelu(x * w + b) * {i + 2}", local_dict=dict(x=x1, w=x1, b=x1)); pyew.synchronize()
    print(f"warm formula {i}: {1e3*(time.perf_counter()-t):.1f} ms", {k: round(v, 1) for k, v in T.items()}, flush=True)
for r in range(3):
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PYEW_CACHE_DIR"] = cache
        jit.options = lambda: base() + (f"--time={cache}/t.csv",)
        T.clear(); t = time.perf_counter()
        pyew.evaluate(f"gelu(x * w + b) * {r + 11}", local_dict=dict(x=x1, w=x1, b=x1)); pyew.synchronize()
        tot = 1e3 * (time.perf_counter() - t)
        phases = open(f"{cache}/t.csv").read().replace("pyew_formula.cu, ", "").splitlines()[1:]
        print(f"new cache dir, formula {r}: {tot:.1f} ms", {k: round(v, 1) for k, v in T.items()}, phases, flush=True)
        jit.options = base
print(open("/proc/loadavg").read().strip(), os.cpu_count())
print(subprocess.run("lscpu | grep -E 'Model name|MHz'", shell=True, capture_output=True, text=True).stdout)
