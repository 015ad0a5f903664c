"""One-off experiment (2026-11-27): NVRTC options for formula kernels (-Ofc levels, ptxas -O1): first-call
compile times of new formulas in a fresh process and the kernels' GPU times at 2^26.
python benchmarks/experiments/nvrtc_options.py"""
import os, sys, subprocess, tempfile, json
CHILD = r'''
import os, sys, time, tempfile, statistics, json
os.environ["PYEW_CACHE_DIR"] = tempfile.mkdtemp()
import numpy as np, pyew, torch
from pyew import jit
extra = tuple(a for a in sys.argv[1:] if a)
base = jit.options
jit.options = lambda: base() + extra
n = 1 << 26
rng = np.random.default_rng(0)
x, w, b = (pyew.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(3))
h = [pyew.asarray(rng.standard_normal(n).astype(np.float16)) for _ in range(5)]
t1 = pyew.asarray(np.ones(1, np.float32))
comp = []
for i in range(4):
    t = time.perf_counter(); pyew.evaluate(f"gelu(x * w + b) * {i + 2}", local_dict=dict(x=t1, w=t1, b=t1)); comp.append(1e3 * (time.perf_counter() - t))
def gpu_ms(fn, reps=30):
    for _ in range(5): fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        pyew.synchronize(); s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
f32 = lambda: pyew.evaluate("gelu(x * w + b)", local_dict=dict(x=x, w=w, b=b))
f16 = lambda: pyew.evaluate("silu(x * w + b) * y + z * 0.5", local_dict=dict(x=h[0], w=h[1], b=h[2], y=h[3], z=h[4]))
r32, r16 = f32().get(), f16().get()
print(json.dumps(dict(opts=extra, compile=comp, gelu32=gpu_ms(f32), silu16=gpu_ms(f16),
                      sum32=float(np.nansum(r32.astype(np.float64))), sum16=float(np.nansum(r16.astype(np.float64))))))
'''
for extra in ([], ["-Ofc=min"], ["-Ofc=mid"], ["-Ofc=max"], ["--ptxas-options=-O1"], []):
    r = subprocess.run([sys.executable, "-c", CHILD, *extra], capture_output=True, text=True)
    print(r.stdout.strip() or r.stderr.strip()[-800:], flush=True)
