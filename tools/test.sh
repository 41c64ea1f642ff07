#!/usr/bin/env bash
# Sets up, builds and runs the test suite. GPU tests ([gpu]) SKIP where no device is found.
#   tools/test.sh            # dev preset: warnings as errors
#   PRESET=asan tools/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_SETUP:-0}" = 1 ] || bash tools/setup.sh
preset=${PRESET:-dev}
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" -j "$(nproc)" --output-on-failure
