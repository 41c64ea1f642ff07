#!/usr/bin/env bash
# Final table rows for the re-tuned ops: tileops (shipped database) and torch in the same call.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpucarry:/usr/local/cuda/lib64
export TILEOPS_CACHE_DIR=/tmp/kc
export TILEOPS_TUNING_DB=$PWD/tuning_db/h100-sxm.json
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu.txt
t0=$(date +%s)
./.gpucarry/bench_memory_ops --ops rmsnorm,softmax,log_softmax --json $OUT/bench.json > $OUT/bench.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"
timeout 400 python3 bench/torch_peers.py --ops rmsnorm,softmax,log_softmax --json $OUT/torch.json > $OUT/torch.txt 2>&1
echo "torch rc=$? $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $OUT/gpu.txt
python3 bench/compare_memory_ops.py $OUT/bench.json $OUT/torch.json > $OUT/table.md 2>&1
grep -E "262144|65536x|copy" $OUT/table.md | head -40
