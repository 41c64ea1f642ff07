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


def uniform(*shape):
    """bf16 values uniform in [-2, 2), made one slice of the leading dimension at a time (the fp32
    intermediate of a whole 8 GB cache would not fit beside it)."""
    out = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
    for i in range(shape[0]):
        out[i] = (torch.rand(shape[1:], device="cuda") * 4 - 2).to(torch.bfloat16)
    return out


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
                # Uniform in [-2, 2), as bench_decode_attention fills its operands: a constant cache
                # runs at another speed than a real one (ours measured up to 15% apart).
                q = uniform(batch, heads, 1, 128)
                k = uniform(batch, kv_heads, kv_len, 128)
                v = uniform(batch, kv_heads, kv_len, 128)
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
