#!/usr/bin/env python3
"""Times torch on the contiguous MLA decode problems of bench_mla_decode (bf16, one query token),
on the same GPU, and prints them beside ours when given bench_mla_decode's JSON.

    python3 bench/torch_mla_peers.py --json torch_mla.json [--ours mla.json]

Two torch forms of the same math, each with the heads as the query rows of one shared KV head:
scaled_dot_product_attention (q [b, 1, heads, 576], k [b, 1, len, 576], v = k[..., :512]; torch
picks the backend) and the eager composition (bmm, softmax in fp32, bmm). Same method as the C++
benchmark: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import argparse
import json

from torch_timing import time_ms

CASES = [(b, 128, n) for b in (64, 128) for n in (4096, 8192)] + [(64, h, 4096) for h in (16, 32, 64)] + \
        [(b, 128, 4096) for b in (1, 8)] + [(1, 16, 32768)]


def main():
    import torch
    import torch.nn.functional as F

    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--ours", default="")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    results = []
    for batch, heads, kv_len in CASES:
        q = torch.randn(batch, 1, heads, 576, device="cuda", dtype=torch.bfloat16)
        kv = torch.randn(batch, 1, kv_len, 576, device="cuda", dtype=torch.bfloat16)
        v = kv[..., :512]
        scale = 576 ** -0.5

        def eager():
            s = torch.matmul(q[:, 0], kv[:, 0].transpose(1, 2)).float() * scale
            return torch.matmul(torch.softmax(s, dim=-1).to(torch.bfloat16), v[:, 0])

        with torch.no_grad():
            sdpa_ms = time_ms(lambda: F.scaled_dot_product_attention(q, kv, v, scale=scale), args.repeats)
            eager_ms = time_ms(eager, args.repeats)
        flops = 2.0 * batch * heads * kv_len * (576 + 512)
        row = {"layout": "contiguous", "batch": batch, "heads": heads, "kv_len": kv_len, "sdpa_us": sdpa_ms * 1e3,
               "sdpa_tflops": flops / (sdpa_ms * 1e-3) / 1e12, "eager_us": eager_ms * 1e3,
               "eager_tflops": flops / (eager_ms * 1e-3) / 1e12}
        print(json.dumps(row), flush=True)
        results.append(row)
        del q, kv, v
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": results}, f, indent=2)
    if args.ours:
        ours = json.load(open(args.ours))["cases"]
        # torch has no paged MLA: every row's peer runs the same problem over a contiguous cache,
        # which costs it nothing extra, so paged rows of ours are compared with a simpler layout.
        print("| layout (ours) | batch | heads | KV len | ours us | ours TFLOP/s | SDPA TFLOP/s (contiguous) | "
              "eager TFLOP/s (contiguous) | ours / best torch |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for o in ours:
            peer = next((r for r in results if (r["batch"], r["heads"], r["kv_len"]) == (o["batch"], o["heads"], o["kv_len"])), None)
            best = max(peer["sdpa_tflops"], peer["eager_tflops"]) if peer else None
            print(f"| {o['layout']} | {o['batch']} | {o['heads']} | {o['kv_len']} | {o['median_us']:.1f} | {o['tflops']:.1f} | "
                  + (f"{peer['sdpa_tflops']:.1f} | {peer['eager_tflops']:.1f} | {o['tflops'] / best:.2f}x |" if peer else "- | - | - |"))


if __name__ == "__main__":
    main()
