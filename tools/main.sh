#!/usr/bin/env bash
# The main job. Sets up and builds the release preset, then:
#  - on a machine with a GPU: runs the GPU tests and the benchmarks (memory-bound ops, decode
#    attention, flash attention, GEMM against cuBLAS where cuBLAS was found) and reports;
#  - without one: compiles every kernel the shipped tuning databases and the example workloads
#    need into the kernel cache for ARCH (default sm_90a) with `tileops-tune warm`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_SETUP:-0}" = 1 ] || bash tools/setup.sh
cmake --preset release
cmake --build --preset release -j "$(nproc)"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ./build-release/tests/tileops_tests "[gpu]"
  ./build-release/bench/bench_memory_ops --json build-release/bench_memory_ops.json
  ./build-release/bench/bench_decode_attention --json build-release/bench_decode_attention.json
  ./build-release/bench/bench_flash_attention --json build-release/bench_flash_attention.json
  if [ -x ./build-release/bench/bench_gemm ]; then
    ./build-release/bench/bench_gemm --json build-release/bench_gemm.json
  fi
else
  ./build-release/tools/tileops-tune warm --arch "${ARCH:-sm_90a}" --workload tools/workloads/llama3-8b.json \
    --db tuning_db/h100-sxm.json
fi
