#!/usr/bin/env bash
# scratch: small-M re-tune with deep rings, bench tuned + heuristic
set -uo pipefail
export TILEOPS_CACHE_DIR=/tmp/tileops-cache
cmake -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/build.log 2>&1 && cmake --build build-gpu -j16 >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build done $(date +%T)"
W=bench/results/2026-11-25-h100-gemm-widths/tune_small_m.json
timeout 100 ./build-gpu/tools/tileops-tune warm --arch sm_90a --workload $W --search-space > $OUT/warm.log 2>&1
./build-gpu/tools/tileops-tune tune --workload $W --db $OUT/small_tuned.json --budget 6 --repeats 10 > $OUT/small_tune.log 2> $OUT/small_tune_err.log
cut -c1-190 $OUT/small_tune.log
./build-gpu/tools/tileops-tune merge -o tuning_db/h100-sxm.json tuning_db/h100-sxm.json $OUT/small_tuned.json 2>&1 | tail -1
echo "tune done $(date +%T)"
timeout 200 ./build-gpu/bench/bench_gemm --json $OUT/gemm.json > $OUT/gemm.log 2>&1; tail -62 $OUT/gemm.log | cut -c1-100
echo "bench done $(date +%T)"
cp -r kernel_templates /tmp/tplh && echo "// heuristic only" >> /tmp/tplh/gemm.cuh
TILEOPS_TEMPLATE_DIR=/tmp/tplh TILEOPS_LOG_LEVEL=error timeout 200 ./build-gpu/bench/bench_gemm --json $OUT/gemm_heuristic.json > $OUT/gemm_heuristic.log 2>&1
echo "heuristic bench done $(date +%T)"
