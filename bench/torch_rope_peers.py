#!/usr/bin/env python3
"""Times torch on the problems bench_problems times for Rope with the KV append (neox pairs, bf16,
a paged cache of 16-token pages), on the same GPU.

    python3 bench/torch_rope_peers.py --json torch_rope.json [--tokens 1,64,8192] [--heads 32/8/128]

The peer is what a PyTorch server runs: cos and sin gathered from a table by position, the
Hugging Face rotation (rotate_half, in the dtype), then the keys and values stored into the cache
by slot (vLLM's reshape_and_cache), eager and under torch.compile. Bytes are what the op must move:
q, k and v read, the rotated q and k written, and one cache row of keys and of values a token.
Same method as bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import argparse
import json

import torch

from torch_timing import time_ms


def rope_append(q, k, v, cos_sin, positions, slots, k_cache, v_cache):
    half = q.shape[-1] // 2
    cos, sin = cos_sin[positions].chunk(2, dim=-1)
    cos = torch.cat((cos, cos), -1)[:, None, :]
    sin = torch.cat((sin, sin), -1)[:, None, :]

    def rotate_half(x):
        return torch.cat((-x[..., half:], x[..., :half]), -1)

    q_out = q * cos + rotate_half(q) * sin
    k_out = k * cos + rotate_half(k) * sin
    k_cache.view(-1, *k.shape[1:]).index_copy_(0, slots, k_out)
    v_cache.view(-1, *v.shape[1:]).index_copy_(0, slots, v)
    return q_out, k_out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--tokens", default="1,8,64,256,2048,8192,16384")
    parser.add_argument("--heads", default="32/8/128", help="heads/kv_heads/head_dim")
    args = parser.parse_args()
    heads, kv_heads, dim = (int(x) for x in args.heads.split("/"))
    page = 16
    dtype = torch.bfloat16
    compiled = torch.compile(rope_append, dynamic=False)
    results = []
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, device="cuda", dtype=torch.float32) / dim))
    angles = torch.arange(131072, device="cuda", dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos_sin = torch.cat((angles.cos(), angles.sin()), -1).to(dtype)
    for tokens in (int(t) for t in args.tokens.split(",")):
        num_pages = tokens // page + 2
        q = torch.rand(tokens, heads, dim, device="cuda").to(dtype) * 4 - 2
        k = torch.rand(tokens, kv_heads, dim, device="cuda").to(dtype) * 4 - 2
        v = torch.rand(tokens, kv_heads, dim, device="cuda").to(dtype) * 4 - 2
        positions = (torch.arange(tokens, device="cuda") * 7919 + 13) % 8192
        slots = (torch.arange(tokens, device="cuda") * 7919 + 13) % (num_pages * page)
        k_cache = torch.empty(num_pages, page, kv_heads, dim, device="cuda", dtype=dtype)
        v_cache = torch.empty_like(k_cache)
        operands = (q, k, v, cos_sin, positions, slots, k_cache, v_cache)
        moved = 2 * (q.nbytes + k.nbytes) + 3 * v.nbytes
        row = {"problem": f"rope {tokens}x{heads}x{kv_heads}x{dim} bf16 [page{page}]", "tokens": tokens, "bytes": moved}
        with torch.no_grad():
            for name, fn in (("eager", rope_append), ("compile", compiled)):
                ms = time_ms(lambda: fn(*operands), args.repeats)
                row[f"{name}_us"] = ms * 1e3
                row[f"{name}_gbps"] = moved / (ms * 1e-3) / 1e9
        results.append(row)
        print(f"{row['problem']:<40} eager {row['eager_us']:8.1f} us {row['eager_gbps']:6.0f} GB/s   "
              f"compile {row['compile_us']:8.1f} us {row['compile_gbps']:6.0f} GB/s", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": results}, f,
                          indent=2)


if __name__ == "__main__":
    main()
