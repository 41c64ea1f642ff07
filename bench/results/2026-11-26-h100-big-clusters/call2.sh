#!/usr/bin/env bash
# Row-op GPU tests with resident clusters of 8-16 in the search space, then the 1024 x 65536
# problems tuned with them.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpucarry:/usr/local/cuda/lib64
export TILEOPS_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu.txt
t0=$(date +%s)
./.gpucarry/tileops-tune warm --arch sm_90a --search-space --workload .gpucarry/tune_1024.json --cache-dir /tmp/kc -j 16 > $OUT/warm.log 2>&1
echo "warm rc=$? $(( $(date +%s) - t0 )) s"
timeout 280 ./.gpucarry/tileops_tests "[gpu][rmsnorm],[gpu][layernorm],[gpu][softmax]" > $OUT/test_rows.txt 2>&1
echo "test rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/test_rows.txt
left=$(( 575 - ($(date +%s) - t0) ))
timeout $left ./.gpucarry/tileops-tune tune --workload .gpucarry/tune_1024.json --budget 25 --repeats 20 -o $OUT/tuned_1024.json --json > $OUT/tune_1024.json 2> $OUT/tune_1024.log
echo "tune rc=$? $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $OUT/gpu.txt
python3 - <<'PY'
import json, os
try:
    d = json.load(open(os.environ['OUT'] + '/tuned_1024.json'))
    for e in d['entries']:
        print(e['op'], 'x'.join(map(str, e['shape'])), e['dtype'], round(e['median_us'], 1), e['candidates_tried'], e['config'])
except Exception as ex: print('no db', ex)
PY
