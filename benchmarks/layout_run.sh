#!/bin/bash
# The GPU run behind the "Misaligned views, broadcasts and gelu_tanh" section of RESULTS.md, from the
# repo root: layout_bench (checks, accuracy, timings), torch's gelu tanh right after it, the
# launch-shape sweep with the previous and the current headers, compute-sanitizer memcheck on
# layout_bench --check, the GPU test suite, memcheck on the library through Python. Needs
# build/libew.so (with build/manifest.json), build/layout_bench, build/template_sweep and
# build/template_sweep_old (build commands in RESULTS.md), and the Python packages of pyproject.toml
# (as wheels in .whl/, installed to /tmp/site, where the machine has no package index). Logs go
# to $OUT. Steps share 285 s.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
left() { local l=$(( ${1} < 285 - SECONDS ? ${1} : 285 - SECONDS )); echo $(( l > 5 ? l : 5 )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; nvcc --version | tail -2; } > "$OUT/env.log" 2>&1
echo "== bench"; timeout $(left 120) ./build/layout_bench > "$OUT/bench.log" 2>&1; echo "bench rc=$? at ${SECONDS}s"
echo "== torch"; timeout $(left 25) python3 - > "$OUT/torch.log" 2>&1 <<'PY'
import torch, time
x = torch.empty(1 << 28, device="cuda").uniform_(-6, 6); y = torch.empty_like(x)
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
def med(fn, runs=61):
    t = []
    for _ in range(runs):
        e0.record(); fn(); e1.record(); e1.synchronize(); t.append(e0.elapsed_time(e1))
    return sorted(t)[len(t) // 2]
g = lambda: torch.ops.aten.gelu.out(x, approximate="tanh", out=y)
t0 = time.time()
while time.time() - t0 < 2: g()
torch.cuda.synchronize()
tg = med(g); tc = med(lambda: y.copy_(x)); tr = med(lambda: torch.clamp_min(x, 0, out=y))
print(f"torch {torch.__version__} gelu tanh f32 2^28: {8 * 2**28 / tg / 1e6:.0f} GB/s; relu {8 * 2**28 / tr / 1e6:.0f} GB/s; copy {8 * 2**28 / tc / 1e6:.0f} GB/s; gelu {100 * tc / tg:.1f}% of copy")
PY
echo "torch rc=$? at ${SECONDS}s"; tail -2 "$OUT/torch.log"
echo "== sweeps"; { echo "### before (base commit's headers)"; timeout $(left 30) ./build/template_sweep_old 28; echo "### after"; timeout $(left 30) ./build/template_sweep 28; } > "$OUT/sweep.log" 2>&1; echo "sweeps at ${SECONDS}s"
echo "== memcheck"; timeout $(left 60) compute-sanitizer --tool memcheck --print-limit 20 ./build/layout_bench --check > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? at ${SECONDS}s"; tail -4 "$OUT/memcheck.log"
echo "== tests"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/tests.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
timeout $(left 90) python3 -m pytest -q -rfs -p no:cacheprovider tests >> "$OUT/tests.log" 2>&1; echo "tests rc=$? at ${SECONDS}s"; tail -5 "$OUT/tests.log"
echo "== smoke"; timeout $(left 60) compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/sanitize_smoke.py > "$OUT/smoke.log" 2>&1; echo "smoke rc=$? at ${SECONDS}s"; tail -2 "$OUT/smoke.log"
echo "== summary"; grep -E "^checks|^gelu_tanh f32 accuracy|FAIL" "$OUT/bench.log" | head -12; sed -n '/^## Summary/,$p' "$OUT/bench.log"
