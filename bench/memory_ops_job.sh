#!/usr/bin/env bash
# Device calls for the memory-bound ops (row ops and elementwise), each sized to fit one call
# (10 minutes), all outputs packed into $OUT/res.tgz (a call returns at most 8 files) with the
# summary in $OUT/summary.txt.
# Steps, in order given:
#   tests      build, then the row-op [gpu] tests (bench/run_on_gpu.sh row_tests)
#   warm       compile the search spaces of every benchmark problem (bench/tune_memory_ops.json)
#   tune:P     tileops-tune tune of part P (short: cols <= 4096, mid: <= 65536, long: longer) into
#              .cache/rows/tuned_P.json (kept on a warm machine between calls); budget TUNE_BUDGET (10)
#   bench_shipped  bench_memory_ops with the shipped database
#   bench      bench_memory_ops with the parts tuned so far merged into one database
#   tune_act   tileops-tune tune of the activations (bench/tune_activations.json) into .cache/rows/tuned_act.json
#   rest_tests / elementwise_tests   the [gpu] tests but flash and GEMM / of the elementwise ops
#   torch      torch eager and torch.compile on the same shapes (bench/torch_peers.py)
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL_OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$FINAL_OUT"
W=$PWD/.cache/rows; mkdir -p "$W"
export OUT=$W/out; rm -rf "$OUT"; mkdir -p "$OUT"
export TILEOPS_CACHE_DIR=$W/kernels
export TARGETS="tileops-tune tileops_tests bench_memory_ops"
T=./build-gpu/tools/tileops-tune
start=$(date +%s)
say() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$OUT/summary.txt"; }
pack() { cp "$OUT/summary.txt" "$FINAL_OUT/" 2>/dev/null; tar czf "$FINAL_OUT/res.tgz" -C "$OUT" .; }
python3 - "$W" <<'PY'
import json, sys
w = json.load(open("bench/tune_memory_ops.json"))
json.dump(w, open(f"{sys.argv[1]}/all.json", "w"))
for name, keep in (("short", lambda c: c <= 4096), ("mid", lambda c: 4096 < c <= 65536), ("long", lambda c: c > 65536)):
    json.dump({"problems": [p for p in w["problems"] if keep(p["shape"][-1])]}, open(f"{sys.argv[1]}/part_{name}.json", "w"))
PY
for step in "$@"; do
  case $step in
    tests) bash bench/run_on_gpu.sh row_tests > "$OUT/tests_step.log" 2>&1
      say "tests: $(grep -E '^(All tests|test cases)' "$OUT/row_tests.log")"; grep -E 'FAILED|failed' "$OUT/row_tests.log" | head -5 | tee -a "$OUT/summary.txt" ;;
    warm) [ -x $T ] || bash bench/run_on_gpu.sh > "$OUT/build_step.log" 2>&1
      timeout "${WARM_TIMEOUT:-200}" $T warm --arch sm_90a --workload "$W/all.json" --search-space > "$OUT/warm.log" 2>&1
      say "warm: rc $?" ;;
    tune:*) part=${step#tune:}
      timeout "${TUNE_TIMEOUT:-300}" $T tune --workload "$W/part_$part.json" --db "$W/tuned_$part.json" \
        --budget "${TUNE_BUDGET:-10}" --repeats 10 > "$OUT/tune_$part.txt" 2> "$OUT/tune_${part}_err.log"
      say "tune $part: rc $?"; cut -c1-170 "$OUT/tune_$part.txt" | tee -a "$OUT/summary.txt"; cp "$W/tuned_$part.json" "$OUT/" ;;
    bench_shipped) [ -x $T ] || bash bench/run_on_gpu.sh > "$OUT/build_step.log" 2>&1
      timeout "${BENCH_TIMEOUT:-300}" ./build-gpu/bench/bench_memory_ops --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
      say "bench (shipped database): rc $?"; grep -E '%|copy|launch' "$OUT/bench.log" | tail -80 >> "$OUT/summary.txt" ;;
    bench) $T merge -o "$W/tuned.json" "$W"/tuned_*.json > /dev/null
      TILEOPS_TUNING_DB="$W/tuned.json" timeout "${BENCH_TIMEOUT:-300}" ./build-gpu/bench/bench_memory_ops --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
      say "bench: rc $?"; cp "$W/tuned.json" "$OUT/"; grep -E '%|copy|launch' "$OUT/bench.log" | tail -80 >> "$OUT/summary.txt" ;;
    tune_act) [ -x $T ] || bash bench/run_on_gpu.sh > "$OUT/build_step.log" 2>&1
      timeout "${TUNE_TIMEOUT:-300}" $T tune --workload bench/tune_activations.json --db "$W/tuned_act.json" \
        --budget "${TUNE_BUDGET:-10}" --repeats 10 > "$OUT/tune_act.txt" 2> "$OUT/tune_act_err.log"
      say "tune activations: rc $?"; cut -c1-150 "$OUT/tune_act.txt" | tee -a "$OUT/summary.txt"; cp "$W/tuned_act.json" "$OUT/" ;;
    rest_tests) bash bench/run_on_gpu.sh rest_tests > "$OUT/rest_tests_step.log" 2>&1
      say "rest tests: $(grep -E '^(All tests|test cases)' "$OUT/rest_tests.log")"; grep -E 'FAILED|failed' "$OUT/rest_tests.log" | head -5 | tee -a "$OUT/summary.txt" ;;
    elementwise_tests) bash bench/run_on_gpu.sh elementwise_tests > "$OUT/elementwise_tests_step.log" 2>&1
      say "elementwise tests: $(grep -E '^(All tests|test cases)' "$OUT/elementwise_tests.log")" ;;
    torch) PYTHONUNBUFFERED=1 timeout "${TORCH_TIMEOUT:-500}" python3 bench/torch_peers.py --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1
      say "torch: rc $?" ;;
    *) say "unknown step $step" ;;
  esac
  pack
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> "$OUT/summary.txt"
pack
tail -60 "$OUT/summary.txt"
