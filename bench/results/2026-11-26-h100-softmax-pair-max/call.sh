#!/usr/bin/env bash
# A/B: softmax_resident.cuh with 16-bit vector maxima compared two lanes at a time (vmax) against
# the shipped templates (base), by tuning the bf16 long-row softmax problems on each.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpucarry:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu.txt
t0=$(date +%s)
for v in base vmax; do
  TILEOPS_TEMPLATE_DIR=$PWD/.gpucarry/$v ./.gpucarry/tileops-tune warm --arch sm_90a --search-space --workload .gpucarry/tune_sm_bf16.json --cache-dir /tmp/kc_$v -j 16 > $OUT/warm_$v.log 2>&1 &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"
for v in base vmax; do
  TILEOPS_CACHE_DIR=/tmp/kc_$v TILEOPS_TEMPLATE_DIR=$PWD/.gpucarry/$v timeout 280 ./.gpucarry/tileops-tune tune --workload .gpucarry/tune_sm_bf16.json --budget 30 --repeats 20 -o $OUT/tuned_$v.json --json > $OUT/tune_$v.json 2> $OUT/tune_$v.log
  echo "tune $v rc=$? $(( $(date +%s) - t0 )) s"
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $OUT/gpu.txt
python3 - <<'PY'
import json, os
res = {}
for v in ('base', 'vmax'):
    try:
        d = json.load(open(os.environ['OUT'] + f'/tune_{v}.json'))
    except Exception as ex:
        print(v, 'no result', ex); continue
    for r in d['results']:
        for t in r['timed']:
            if t.get('median_us'): res.setdefault(r['problem'], {}).setdefault(json.dumps(t['config'], sort_keys=True), {})[v] = t['median_us']
        print(v, r['problem'], 'best', round(r['entry']['median_us'], 1), r['entry']['config'])
for p, cs in res.items():
    both = [(c['base'], c['vmax'], k) for k, c in cs.items() if 'base' in c and 'vmax' in c]
    both.sort()
    print(p, 'configs', len(both), 'median ratio vmax/base', round(sorted(b[1] / b[0] for b in both)[len(both) // 2], 4))
    for b in both[:5]: print('   %.1f -> %.1f %s' % b)
PY
