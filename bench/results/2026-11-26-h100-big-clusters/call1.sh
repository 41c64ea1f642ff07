#!/usr/bin/env bash
# Resident clusters of 8-16 (two CTAs an SM where registers and shared memory allow): the
# 256 x 262144 problems tuned with them in the search space.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpucarry:/usr/local/cuda/lib64
export TILEOPS_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu.txt
t0=$(date +%s)
./.gpucarry/tileops-tune warm --arch sm_90a --search-space --workload .gpucarry/tune_256.json --cache-dir /tmp/kc -j 16 > $OUT/warm.log 2>&1
echo "warm rc=$? $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left ./.gpucarry/tileops-tune tune --workload .gpucarry/tune_256.json --budget 50 --repeats 20 -o $OUT/tuned_256.json --json > $OUT/tune_256.json 2> $OUT/tune_256.log
echo "tune rc=$? $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $OUT/gpu.txt
python3 - <<'PY'
import json, os
try:
    d = json.load(open(os.environ['OUT'] + '/tuned_256.json'))
    for e in d['entries']:
        print(e['op'], 'x'.join(map(str, e['shape'])), e['dtype'], round(e['median_us'], 1), e['candidates_tried'], e['config'])
        for r in e.get('runners_up', []): print('    ', round(r['median_us'], 1), r['config'])
except Exception as ex: print('no db', ex)
PY
