#!/usr/bin/env bash
# One check of a machine with a GPU: environment, demo, the whole test suite, then compute-sanitizer
# (memcheck on every kernel family, racecheck on the special kernels). Logs go to the folder
# LOG_DIR names (default ./gpu-out). Usage: [LOG_DIR=dir] bash scripts/gpu_check.sh [pytest args]
set -uo pipefail
LOG_DIR=${LOG_DIR:-gpu-out}; mkdir -p "$LOG_DIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import sys, numpy, ml_dtypes, cuda.bindings; print(sys.version.split()[0], 'numpy', numpy.__version__, 'ml_dtypes', ml_dtypes.__version__, 'cuda-bindings', cuda.bindings.__version__)"
  python3 -m pyew info
} 2>&1 | tee "$LOG_DIR/env.log"
python3 examples/demo.py 2>&1 | tee "$LOG_DIR/demo.log"
python3 -m pytest -q -rs -p no:cacheprovider tests "$@" 2>&1 | tee "$LOG_DIR/tests.log" | tail -40
if command -v compute-sanitizer >/dev/null; then
  for s in sanitize_smoke sanitize_special; do
    compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/$s.py 2>&1 | tail -4
  done 2>&1 | tee "$LOG_DIR/sanitizer.log"
  compute-sanitizer --tool racecheck python3 scripts/sanitize_special.py 2>&1 | tail -3 | tee -a "$LOG_DIR/sanitizer.log"
fi
