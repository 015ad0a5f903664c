#!/usr/bin/env bash
# The GPU test suite under compute-sanitizer, one run per tool (memcheck, racecheck, initcheck,
# synccheck by default), each into $LOG_DIR/sanitize-<tool>.log, then one summary line per tool: the
# sanitizer's error count and pytest's result. With a GPU per tool (all GPUs, or those in GPUS,
# e.g. GPUS="2 3") the tools run at once, one GPU each (CUDA_VISIBLE_DEVICES), else one after
# another. For source lines in the reports, build the library with `make all LINEINFO=1` first.
#
#   bash scripts/sanitize_suite.sh [tool ...]   # env: LOG_DIR (default gpu-out), LIMIT_S (seconds per
#                                               # tool, default 1800), MARK (default "gpu and not slow")
#
# CUDA API errors are not counted (--report-api-errors no): the suite provokes some on purpose
# (out-of-memory, bad handles) and checks pyew's message for them. Tests that start their own
# worker processes (Dask clusters) are deselected: the tools follow one process tree. So are the
# three that check when memory is reused and exports are released: under compute-sanitizer an
# op's result holds one more reference than in a plain run (sys.getrefcount shows it), so it is
# freed later; they run in the plain suite.
set -uo pipefail
LOG_DIR=${LOG_DIR:-gpu-out}; mkdir -p "$LOG_DIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
tools=("$@"); [ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
limit=${LIMIT_S:-1800}
read -ra gpus <<< "${GPUS:-$(seq -s ' ' 0 $(( $(nvidia-smi -L 2>/dev/null | wc -l) - 1 )))}"
mark=${MARK:-gpu and not slow}
skip="not test_pool_reuses_memory and not test_small_buffers_are_reused_on_the_default_stream and not test_exported_array_outlives_the_device_array"

run_tool() {   # tool gpu
  local tool=$1 gpu=$2 extra=()
  case $tool in
    memcheck) extra=(--leak-check no --report-api-errors no) ;;
    *) extra=(--report-api-errors no) ;;
  esac
  local env=()
  [ -n "$gpu" ] && env=(CUDA_VISIBLE_DEVICES=$gpu)
  env "${env[@]}" timeout "$limit" compute-sanitizer --tool "$tool" "${extra[@]}" --print-limit 50 \
    --error-exitcode 0 python3 -m pytest -q -p no:cacheprovider -m "$mark" -k "$skip" tests > "$LOG_DIR/sanitize-$tool.log" 2>&1
  echo "exit status $?" >> "$LOG_DIR/sanitize-$tool.log"
}

if [ "${#gpus[@]}" -ge "${#tools[@]}" ] && [ "${#tools[@]}" -gt 1 ]; then
  i=0
  for t in "${tools[@]}"; do run_tool "$t" "${gpus[$i]}" & i=$((i + 1)); done
  wait
else
  for t in "${tools[@]}"; do run_tool "$t" ""; done
fi

for t in "${tools[@]}"; do
  log=$LOG_DIR/sanitize-$t.log
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1)
  result=$(grep -E "^[0-9]+ (passed|failed)|passed|failed" "$log" | grep -E " in [0-9.]+s" | tail -1)
  rc=$(tail -1 "$log" | awk '{print $3}')
  [ "$rc" = 124 ] && result="stopped after ${limit}s: $result"
  echo "$t: ${summary:-no summary} | pytest: ${result:-no result (rc $rc)}"
done | tee "$LOG_DIR/sanitize-summary.txt"
