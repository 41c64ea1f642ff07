#!/usr/bin/env bash
# A/B of kernel template variants in one GPU call: the same benchmark run with each variant's
# templates (TILEOPS_TEMPLATE_DIR), the variants interleaved over several passes so that drift of
# the machine shows as spread within a variant rather than as a difference between variants.
#
#   bench/ab_templates.sh [--passes N] VARIANT... -- BENCH [ARGS...]
#   e.g. bench/ab_templates.sh exp/base exp/new -- bench_mla_decode --repeats 30 --only 128x128x4096x64
#
# A VARIANT is a directory holding a whole copy of kernel_templates/ (edited), or `embedded` for
# the library's own templates. A variant's templates have another hash than the embedded ones, so
# the shipped tuning entries do not apply to it and it runs the heuristic configs: compare against
# a baseline copy (the unchanged templates with one comment line added to the op's template), not
# against `embedded`, when the tuned configs differ from the heuristic. Variant directories must
# reach the GPU machine: keep them untracked but not ignored by git, or name them in the device
# tool's `carry`. Prints each run's result lines prefixed with the pass and the variant.
set -uo pipefail
cd "$(dirname "$0")/.."
passes=2
variants=()
while [ $# -gt 0 ]; do
  case $1 in
    --passes) passes=$2; shift 2 ;;
    --) shift; break ;;
    *) variants+=("$1"); shift ;;
  esac
done
if [ ${#variants[@]} -eq 0 ] || [ $# -eq 0 ]; then
  echo "usage: bench/ab_templates.sh [--passes N] VARIANT... -- BENCH [ARGS...]" >&2
  exit 2
fi
bench=$1; shift
for v in "${variants[@]}"; do
  if [ "$v" != embedded ] && [ ! -d "$v" ]; then echo "ab_templates: no template directory '$v'" >&2; exit 2; fi
done
export TILEOPS_CACHE_DIR=${TILEOPS_CACHE_DIR:-/tmp/tileops-ab-cache}
cmake -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /tmp/ab_build.log 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target "$bench" >> /tmp/ab_build.log 2>&1 || { tail -30 /tmp/ab_build.log; exit 1; }
for pass in $(seq 1 "$passes"); do
  for v in "${variants[@]}"; do
    if [ "$v" = embedded ]; then
      env -u TILEOPS_TEMPLATE_DIR "./build-gpu/bench/$bench" "$@"
    else
      TILEOPS_TEMPLATE_DIR="$v" "./build-gpu/bench/$bench" "$@"
    fi 2>&1 | grep -v -e '^\[20' -e '^device:' -e '^layout' -e '^shape' | sed "s|^|pass $pass $v: |"
  done
done
