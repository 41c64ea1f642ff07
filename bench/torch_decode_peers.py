#!/usr/bin/env python3
"""Times torch scaled_dot_product_attention on the decode problems bench_decode_attention uses
(contiguous KV, one query token, bf16, D=128), on the same GPU.

    python3 bench/torch_decode_peers.py --json torch_decode.json [--quick]

torch's layout is [batch, heads, seq, dim]; the bytes of K and V are the same as in ours. Same
method as the C++ benchmark: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import argparse
import json

import torch
import torch.nn.functional as F

from torch_timing import time_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    batches = [1, 32] if args.quick else [1, 8, 32, 128]
    lens = [4096] if args.quick else [1024, 4096, 16384, 65536]
    results = []
    for heads, kv_heads in [(32, 8), (32, 32)]:
        for batch in batches:
            for kv_len in lens:
                kv_bytes = 2 * batch * kv_len * kv_heads * 128 * 2
                if kv_bytes > 24e9:
                    continue
                q = torch.randn(batch, heads, 1, 128, device="cuda", dtype=torch.bfloat16)
                k = torch.full((batch, kv_heads, kv_len, 128), 0.0115, device="cuda", dtype=torch.bfloat16)
                v = torch.full_like(k, 0.02)
                with torch.no_grad():
                    ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != heads),
                                 args.repeats)
                row = {"layout": "contiguous", "batch": batch, "heads": heads, "kv_heads": kv_heads, "kv_len": kv_len,
                       "kv_bytes": kv_bytes, "sdpa_us": ms * 1e3, "sdpa_gbps": kv_bytes / (ms * 1e-3) / 1e9}
                results.append(row)
                print(f"sdpa {batch:>4} x {heads}/{kv_heads} x {kv_len:>6}: {row['sdpa_us']:9.1f} us "
                      f"{row['sdpa_gbps']:7.0f} GB/s", flush=True)
                del q, k, v
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                   "cases": results}, f, indent=2)


if __name__ == "__main__":
    main()
