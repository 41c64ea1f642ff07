#!/usr/bin/env bash
# The main job. Sets up and builds the release preset, then:
#  - on a machine with a GPU: runs the GPU tests and the benchmarks (memory-bound ops, decode
#    attention, flash attention, GEMM against cuBLAS where cuBLAS was found) and reports;
#  - without one: builds tileops-tune alone (tests, benchmarks, examples and the Python module
#    would never run there) and compiles into the kernel cache, for ARCH (default sm_90a), every
#    kernel of WORKLOAD (default tools/workloads/llama3-8b.json) and of the entries of DB (one
#    or more files; default every shipped database, tuning_db/*.json, one per GPU model) for that
#    arch: what a serving process of that workload needs, with the configs it will pick on any of
#    those GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_SETUP:-0}" = 1 ] || bash tools/setup.sh
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  cmake --preset release
  cmake --build --preset release -j "$(nproc)"
  ./build-release/tests/tileops_tests "[gpu]"
  ./build-release/bench/bench_memory_ops --json build-release/bench_memory_ops.json
  ./build-release/bench/bench_decode_attention --json build-release/bench_decode_attention.json
  ./build-release/bench/bench_flash_attention --json build-release/bench_flash_attention.json
  if [ -x ./build-release/bench/bench_gemm ]; then
    ./build-release/bench/bench_gemm --json build-release/bench_gemm.json
  fi
else
  cmake --preset release -DTILEOPS_BUILD_TESTS=OFF -DTILEOPS_BUILD_BENCH=OFF -DTILEOPS_BUILD_EXAMPLES=OFF \
    -DTILEOPS_BUILD_PYTHON=OFF
  cmake --build --preset release -j "$(nproc)" --target tileops-tune
  arch=${ARCH:-sm_90a}
  workload=${WORKLOAD:-tools/workloads/llama3-8b.json}
  dbs=${DB:-$(echo tuning_db/*.json)}
  db_args=()
  for db in $dbs; do db_args+=(--db "$db"); done
  echo "main: no GPU; warming the kernel cache for $arch with $workload and the $arch entries of $dbs" >&2
  ./build-release/tools/tileops-tune warm --arch "$arch" --workload "$workload" "${db_args[@]}"
fi
