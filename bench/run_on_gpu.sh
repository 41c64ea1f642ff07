#!/usr/bin/env bash
# One call on the GPU machine: configure and build (release), then the steps named as arguments,
# writing logs and JSON under $OUT (default ./gpu-out); TARGETS="a b" builds only those targets. Steps:
#   tests   the [gpu] tests
#   bench   bench_memory_ops (all ops and shapes; BENCH_OPS=a,b only those ops)
#   row_tests the [gpu] tests of the row ops (rmsnorm, layernorm, softmax); elementwise_tests: of the elementwise ops
#   quick   bench_memory_ops --quick
#   torch   torch eager and torch.compile on the same shapes (bench/torch_peers.py)
#   warm    compile the search spaces of the benchmark shapes (tools/workloads/tune/tune_memory_ops.json) into the
#           kernel cache, so that tune's budget goes to timing; WARM_TIMEOUT (200)
#   warm_scaling  the cold-start warm (shipped database + llama3-8b) into empty caches on all cores, half
#           of them, and with a larger malloc top pad: $OUT/warm_scaling.txt (no GPU needed)
#   tune    tileops-tune tune of the benchmark shapes, in three parts by row length, merged with
#           every part already in TUNE_DIR ($OUT) into TUNE_DIR/tuned.json (later steps use it);
#           TUNE_BUDGET seconds a problem (12), TUNE_TIMEOUT a part (300), TUNE_PARTS="short mid
#           long" the parts to tune (cols <= 4096, <= 65536, longer; empty: only merge). A
#           TUNE_DIR and TILEOPS_CACHE_DIR inside the repo's ignored .cache/ survive between calls
#           on a warm machine, so a tune too long for one call can be split over several.
#   tune_act  tileops-tune tune of tools/workloads/tune/tune_activations.json into $OUT/act_tuned.json (not used later)
#   cli     tileops-tune on the GPU: a short tune, verify of the shipped database, explain
#   decode_fp8  bench_decode_attention --fp8-kv --quick (an fp8 e4m3 cache; no torch peer)
#   decode  bench_decode_attention and torch SDPA on the same problems, merged into a table;
#           decode_tests the [gpu][decode] tests; decode_tune: tileops-tune warm --search-space, then
#           tune, of tools/workloads/tune/tune_decode_attention.json into $OUT/decode_tuned.json (later steps use it)
#   flash   bench_flash_attention and torch SDPA (flash and cuDNN backends) on the same cases, merged
#           into a table with the targets; flash_quick: a subset
#   flash_tests the [gpu][flash] tests only
#   flash_tune  tileops-tune tune of the flash benchmark's problems into $OUT/flash_tuned.json (later
#               steps of the same call use it: TILEOPS_TUNING_DB)
#   gemm_tests  the [gpu][gemm] tests only
#   gemm_tune   tileops-tune tune of the GEMM benchmark's problems into $OUT/gemm_tuned.json (later
#               steps of the same call use it: TILEOPS_TUNING_DB)
#   mla     bench_mla_decode and torch on the same problems, merged into a table; mla_tests the [gpu][mla] tests;
#           mla_tune: tileops-tune tune of the benchmark's problems into $OUT/mla_tuned.json (later steps use it)
#   rest_tests  the [gpu] tests but flash and GEMM (runtime, memory-bound ops, decode, MLA)
#   gemm    bench_gemm (Gemm against cuBLAS, bf16 NT: squares and Llama-3 projections); gemm_quick: a subset
#   floor   bench_launch_floor: the harness's fixed cost, and streaming reads of 1 MB to 537 MB
#   decode_ncu  ncu (SpeedOfLight, launch stats) of one decode launch at NCU_ONLY (default 1x32x8x4096),
#               after 3 warm-up launches
#   baseline  bench/compare_baseline.py of the bench JSON this call wrote ($OUT/bench, decode, flash,
#             gemm, mla, floor .json) against BASELINE (bench/baselines/h100.json) into
#             $OUT/baseline.txt; a slowdown beyond BASELINE_TOL (0.05) fails the call
# Everything a step writes goes under $OUT (TUNE_DIR and TILEOPS_CACHE_DIR aside, when set elsewhere).
# PACK=1: everything written goes into $OUT/res.tgz, with the step summaries in $OUT/summary.txt
# (the device tool returns 8 files at most).
# The [gpu] tests that run every config of a search space compile a few hundred kernels. Compile
# them here first (no GPU needed; same NVRTC as the GPU machine, see ../shared/DEVICE.md):
#   ./build-dev/tools/tileops-tune warm --arch sm_90a --search-space \
#     --workload tests/data/gpu_tests_warm.json --cache-dir .gpucarry/cache
# then carry .gpucarry and set TILEOPS_CACHE_DIR=$PWD/.gpucarry/cache for the call (~22 MB).
# Test logs carry each test case's duration.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if [ "${PACK:-0}" = 1 ]; then  # run the steps into a scratch folder, then pack it
  scratch=$(mktemp -d)
  OUT=$scratch PACK=0 bash bench/run_on_gpu.sh "$@" 2>&1 | tee "$scratch/summary.txt"
  rc=${PIPESTATUS[0]}
  cp "$scratch/summary.txt" "$OUT/"; tar czf "$OUT/res.tgz" -C "$scratch" .
  exit "$rc"
fi
TUNE_DIR=${TUNE_DIR:-$OUT}; mkdir -p "$TUNE_DIR"
export TILEOPS_CACHE_DIR=${TILEOPS_CACHE_DIR:-/tmp/tileops-cache}
cmake -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/build.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" ${TARGETS:+--target $TARGETS} >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUT/gpu.csv"
status=0
# The [gpu] tests matching FILTER into $OUT/NAME.log; prints the failures and the summary.
run_tests() {  # NAME FILTER TIMEOUT
  timeout "$3" ./build-gpu/tests/tileops_tests "$2" --reporter compact --durations yes 2>&1 | grep -v '^\[20' > "$OUT/$1.log"
  grep -E 'failed|FAILED|SIG|error' "$OUT/$1.log" | head -40; tail -2 "$OUT/$1.log"
  grep -q '^All tests passed' "$OUT/$1.log" || status=1
}
# tileops-tune tune of WORKLOAD into $OUT/NAME_tuned.json; later steps of the call use it.
run_tune() {  # NAME WORKLOAD BUDGET LINES
  ./build-gpu/tools/tileops-tune tune --workload "$2" --db "$OUT/$1_tuned.json" --budget "$3" --repeats 10 \
    > "$OUT/$1_tune.log" 2> "$OUT/$1_tune_err.log" || status=1
  export TILEOPS_TUNING_DB="$OUT/$1_tuned.json"
  tail -"$4" "$OUT/$1_tune.log" | cut -c1-200
}
for step in "$@"; do
  case $step in
    tests) run_tests gpu_tests "[gpu]" 540 ;;
    bench) timeout 400 ./build-gpu/bench/bench_memory_ops ${BENCH_OPS:+--ops "$BENCH_OPS"} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1 || status=1
      tail -n +1 "$OUT/bench.log" | awk '{print}' | tail -140 ;;
    quick) timeout 200 ./build-gpu/bench/bench_memory_ops --quick --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
    torch) PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-560} python3 bench/torch_peers.py --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1 || status=1
      tail -5 "$OUT/torch.log" ;;
    tune)  # in three parts by row length (a part cut by TUNE_TIMEOUT loses only itself), merged
      python3 - "$OUT" <<'PY'
import json, sys
w = json.load(open("tools/workloads/tune/tune_memory_ops.json"))
for name, keep in (("short", lambda c: c <= 4096), ("mid", lambda c: 4096 < c <= 65536), ("long", lambda c: c > 65536)):
    json.dump({"problems": [p for p in w["problems"] if keep(p["shape"][-1])]}, open(f"{sys.argv[1]}/tune_{name}.json", "w"))
PY
      for part in ${TUNE_PARTS-short mid long}; do
        timeout "${TUNE_TIMEOUT:-300}" ./build-gpu/tools/tileops-tune tune --workload "$OUT/tune_$part.json" \
          --db "$TUNE_DIR/tuned_$part.json" --budget "${TUNE_BUDGET:-12}" --repeats 10 \
          > "$OUT/tune_$part.txt" 2> "$OUT/tune_${part}_err.log" || status=1
        tail -12 "$OUT/tune_$part.txt" | cut -c1-200
      done
      rm -f "$TUNE_DIR/tuned.json"  # rebuilt from the parts (merge never overwrites a file it was not given)
      ./build-gpu/tools/tileops-tune merge -o "$TUNE_DIR/tuned.json" "$TUNE_DIR"/tuned_*.json > /dev/null || status=1
      [ "$TUNE_DIR" = "$OUT" ] || cp "$TUNE_DIR"/tuned*.json "$OUT/"
      export TILEOPS_TUNING_DB="$TUNE_DIR/tuned.json" ;;
    warm) timeout "${WARM_TIMEOUT:-200}" ./build-gpu/tools/tileops-tune warm --arch sm_90a \
        --workload tools/workloads/tune/tune_memory_ops.json --search-space > "$OUT/warm.log" 2>&1; echo "warm: rc $?" ;;
    warm_scaling)  # the cold-start warm (shipped database + llama3-8b) into empty caches: on every
      # core, on half of them, and on every core with the allocator's heap grown 256 MB at a time
      # (docs/perf/compile.md: NVRTC's page faults); wall, CPU and faults of each
      cores=$(nproc)
      for variant in "$cores" "$((cores / 2))" "$cores glibc.malloc.top_pad=268435456"; do
        read -r jobs tunables <<< "$variant"
        cache=$(mktemp -d)
        GLIBC_TUNABLES=${tunables:-} /usr/bin/time -f "jobs $jobs ${tunables:-default allocator}: wall %e s, user %U s, sys %S s, %P CPU, %R minor faults" \
          timeout 300 ./build-gpu/tools/tileops-tune warm --arch sm_90a --jobs "$jobs" --db tuning_db/h100-sxm.json \
          --workload tools/workloads/llama3-8b.json --cache-dir "$cache" > /dev/null 2>> "$OUT/warm_scaling.txt" || status=1
        rm -rf "$cache"
      done
      grep '^jobs' "$OUT/warm_scaling.txt" ;;
    tune_act)
      timeout "${TUNE_TIMEOUT:-300}" ./build-gpu/tools/tileops-tune tune --workload tools/workloads/tune/tune_activations.json \
        --db "$OUT/act_tuned.json" --budget "${TUNE_BUDGET:-12}" --repeats 10 > "$OUT/act_tune.txt" 2> "$OUT/act_tune_err.log" \
        || status=1
      cut -c1-150 "$OUT/act_tune.txt" ;;
    cli)
      T=./build-gpu/tools/tileops-tune
      $T tune --op rmsnorm --shape 3000x5000 --dtype bf16 --db "$OUT/cli.json" --budget 8 --repeats 5 > "$OUT/cli.log" 2>&1 || status=1
      $T tune --workload tools/workloads/llama3-8b.json --max-candidates 4 --budget 4 --repeats 3 --db "$OUT/cli.json" \
        >> "$OUT/cli.log" 2>&1 || status=1
      $T verify tuning_db/h100-sxm.json --max-drift 0.15 >> "$OUT/cli.log" 2>&1 || status=1
      $T explain --op rmsnorm --shape 3000x5000 --dtype bf16 --db "$OUT/cli.json" >> "$OUT/cli.log" 2>&1 || status=1
      $T list "$OUT/cli.json" | head -5 >> "$OUT/cli.log"
      tail -60 "$OUT/cli.log" ;;
    decode)
      timeout 300 ./build-gpu/bench/bench_decode_attention --json "$OUT/decode.json" > "$OUT/decode.log" 2>&1 || status=1
      PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_decode_peers.py --json "$OUT/torch_decode.json" \
        > "$OUT/torch_decode.log" 2>&1 || status=1
      python3 bench/compare_decode_attention.py "$OUT/decode.json" "$OUT/torch_decode.json" | tee "$OUT/decode.md" ;;
    decode_fp8)
      timeout 200 ./build-gpu/bench/bench_decode_attention --fp8-kv --quick --json "$OUT/decode_fp8.json" 2>&1 |
        tee "$OUT/decode_fp8.log" | cut -c1-150 || status=1 ;;
    flash|flash_quick)
      extra=""; [ "$step" = flash_quick ] && extra="--quick"
      timeout ${FLASH_TIMEOUT:-180} ./build-gpu/bench/bench_flash_attention $extra --json "$OUT/flash.json" \
        > "$OUT/flash.log" 2>&1 || status=1
      PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_flash_peers.py $extra --json "$OUT/torch_flash.json" \
        > "$OUT/torch_flash.log" 2>&1 || status=1
      python3 bench/compare_flash_attention.py "$OUT/flash.json" "$OUT/torch_flash.json" | tee "$OUT/flash.md" ;;
    flash_tune) run_tune flash tools/workloads/tune/tune_flash_attention.json 8 45 ;;
    flash_tests) run_tests flash_tests "[gpu][flash]" "${FLASH_TESTS_TIMEOUT:-300}" ;;
    gemm_tune) run_tune gemm tools/workloads/tune/tune_gemm.json "${GEMM_TUNE_BUDGET:-5}" 62 ;;
    gemm_tests) run_tests gemm_tests "[gpu][gemm]" 540 ;;  # a cold kernel cache takes > 300 s
    mla_tests) run_tests mla_tests "[gpu][mla]" 300 ;;
    decode_tests) run_tests decode_tests "[gpu][decode]" "${DECODE_TESTS_TIMEOUT:-300}" ;;
    decode_tune)  # both kernels' search spaces compiled first: with a cold cache, compiling (at
      # most half of a problem's budget) leaves many MHA candidates untimed
      timeout "${WARM_TIMEOUT:-200}" ./build-gpu/tools/tileops-tune warm --arch sm_90a \
        --workload tools/workloads/tune/tune_decode_attention.json --search-space > "$OUT/decode_warm.log" 2>&1; echo "warm: rc $?"
      run_tune decode tools/workloads/tune/tune_decode_attention.json "${DECODE_TUNE_BUDGET:-8}" 24 ;;
    mla_tune) run_tune mla tools/workloads/tune/tune_mla_decode.json "${MLA_TUNE_BUDGET:-6}" 20 ;;
    elementwise_tests) run_tests elementwise_tests "[elementwise]" "${ELEMENTWISE_TESTS_TIMEOUT:-200}" ;;
    row_tests) run_tests row_tests "[rmsnorm],[layernorm],[softmax]" "${ROW_TESTS_TIMEOUT:-200}" ;;
    rest_tests) run_tests rest_tests "[gpu]~[flash]~[gemm]" "${REST_TESTS_TIMEOUT:-400}" ;;
    mla)
      timeout ${MLA_TIMEOUT:-200} ./build-gpu/bench/bench_mla_decode --json "$OUT/mla.json" > "$OUT/mla.log" 2>&1 || status=1
      cat "$OUT/mla.log"
      PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_mla_peers.py --json "$OUT/torch_mla.json" --ours "$OUT/mla.json" \
        > "$OUT/torch_mla.log" 2>&1 || status=1
      grep '^|' "$OUT/torch_mla.log" | tee "$OUT/mla.md"; grep -v '^[|{]' "$OUT/torch_mla.log" | tail -3 ;;
    gemm|gemm_quick)
      extra=""; [ "$step" = gemm_quick ] && extra="--quick"
      timeout ${GEMM_TIMEOUT:-400} ./build-gpu/bench/bench_gemm $extra --json "$OUT/gemm.json" > "$OUT/gemm.log" 2>&1 || status=1
      cat "$OUT/gemm.log" ;;
    floor) timeout 120 ./build-gpu/bench/bench_launch_floor --json "$OUT/floor.json" 2>&1 | tee "$OUT/floor.log" ;;
    decode_ncu)
      timeout 200 ncu --clock-control none --kernel-name regex:decode_attention --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
        ./build-gpu/bench/bench_decode_attention --only "${NCU_ONLY:-1x32x8x4096}" --repeats 5 > "$OUT/decode_ncu.log" 2>&1
      grep -E "Duration|DRAM Throughput|Memory Throughput|Grid Size|Registers|Achieved Occupancy|decode_attention" "$OUT/decode_ncu.log" | head -40 ;;
    baseline)
      files=()
      for name in bench decode flash gemm mla floor; do [ -f "$OUT/$name.json" ] && files+=("$OUT/$name.json"); done
      if [ ${#files[@]} -eq 0 ]; then
        echo "baseline: no bench JSON in $OUT (run a bench step first)"; status=1
      else
        python3 bench/compare_baseline.py --baseline "${BASELINE:-bench/baselines/h100.json}" --tol "${BASELINE_TOL:-0.05}" \
          "${files[@]}" > "$OUT/baseline.txt" 2>&1 || status=1
        grep -v '^  ' "$OUT/baseline.txt" | tail -40
      fi ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
