#!/usr/bin/env python3
"""Decode attention over batches whose sequences differ in length, against the copy bandwidth:
the bytes of keys and values the batch holds (each sequence's own length, not the longest) over
the time, as a fraction of what a device-to-device copy reaches in the same run.

    PYTHONPATH=build-gpu/python python3 bench/bench_decode_lengths.py [--seed 1] [--repeats 20] [--json out.json]

GQA 32/8, head dim 128, bf16, one query token; contiguous and paged (pages of 16, shuffled over the
pool) caches; batches of 8, 32 and 128 with their longest sequence at 16k or 64k tokens, lengths:
  uniform   every sequence at the longest (the tuned problems' case)
  one_long  one sequence at the longest, the others 1-256 tokens (chat turns beside a long document)
  long_tail lengths log-uniform between 16 and the longest, one at the longest
  ragged    lengths uniform between 1 and the longest, one at the longest
Seeded (--seed). The target (issue: every case with >= 64 MB of KV at >= 85% of copy) is shown
per case.
"""
import argparse
import json
import math
import random

import torch

import tileops_jit as tj
from torch_timing import time_ms

HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
TOKEN_BYTES = 2 * KV_HEADS * HEAD_DIM * 2  # keys and values of one token, bf16


def lengths_of(kind, batch, longest, rng):
    if kind == "uniform":
        return [longest] * batch
    if kind == "one_long":
        lens = [rng.randint(1, 256) for _ in range(batch)]
    elif kind == "long_tail":
        lens = [int(math.exp(rng.uniform(math.log(16), math.log(longest)))) for _ in range(batch)]
    else:
        lens = [rng.randint(1, longest) for _ in range(batch)]
    lens[rng.randrange(batch)] = longest
    return lens


def copy_gbps(repeats):
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def run_case(lens, paged, repeats, rng):
    batch, longest = len(lens), max(lens)
    q = torch.randn(batch, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    lengths = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if paged:
        pages_of = [(n + PAGE - 1) // PAGE for n in lens]
        pool = list(range(sum(pages_of)))
        rng.shuffle(pool)
        max_pages = (longest + PAGE - 1) // PAGE
        table = torch.full((batch, max_pages), -1, dtype=torch.int32)
        at = 0
        for b, n in enumerate(pages_of):
            table[b, :n] = torch.tensor(pool[at:at + n], dtype=torch.int32)
            at += n
        shape = (len(pool), PAGE, KV_HEADS, HEAD_DIM)
        k = (torch.rand(shape, device="cuda") * 4 - 2).to(torch.bfloat16)
        v = (torch.rand(shape, device="cuda") * 4 - 2).to(torch.bfloat16)
        table = table.cuda()
        run = lambda: tj.decode_attention(q, k, v, lengths, page_table=table, max_kv_len=longest)
    else:
        shape = (batch, longest, KV_HEADS, HEAD_DIM)
        k = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        v = torch.empty_like(k)
        for b in range(batch):  # one sequence at a time: an fp32 intermediate of the whole cache may not fit
            k[b] = (torch.rand(shape[1:], device="cuda") * 4 - 2).to(torch.bfloat16)
            v[b] = (torch.rand(shape[1:], device="cuda") * 4 - 2).to(torch.bfloat16)
        run = lambda: tj.decode_attention(q, k, v, lengths, max_kv_len=longest)
    run()  # compiles, outside the timing
    ms = time_ms(run, repeats)
    return ms, sum(lens) * TOKEN_BYTES


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    copy = copy_gbps(args.repeats)
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s")
    print(f"{'cache':<10} {'lengths':<9} {'batch':>5} {'longest':>7} {'KV MB':>8} {'us':>8} {'GB/s':>6} {'% copy':>6}")
    rows = []
    for paged in (False, True):
        for kind in ("uniform", "one_long", "long_tail", "ragged"):
            for batch in (8, 32, 128):
                for longest in (16384, 65536):
                    lens = lengths_of(kind, batch, longest, rng)
                    if sum(lens) * TOKEN_BYTES > (24e9 if paged else 12e9) or batch * longest * TOKEN_BYTES > 24e9:
                        continue
                    ms, kv_bytes = run_case(lens, paged, args.repeats, rng)
                    gbps = kv_bytes / (ms * 1e-3) / 1e9
                    row = {"cache": "paged16" if paged else "contiguous", "lengths": kind, "batch": batch,
                           "longest": longest, "kv_bytes": kv_bytes, "us": ms * 1e3, "gbps": gbps,
                           "fraction_of_copy": gbps / copy}
                    rows.append(row)
                    target = "" if kv_bytes < 64e6 else ("  ok" if gbps / copy >= 0.85 else "  below 85%")
                    print(f"{row['cache']:<10} {kind:<9} {batch:>5} {longest:>7} {kv_bytes / 1e6:>8.1f} "
                          f"{row['us']:>8.1f} {gbps:>6.0f} {100 * gbps / copy:>5.1f}%{target}", flush=True)
                    torch.cuda.empty_cache()
    big = [r for r in rows if r["kv_bytes"] >= 64e6]
    if big:
        worst = min(big, key=lambda r: r["fraction_of_copy"])
        print(f"cases with >= 64 MB of KV: {len(big)}, worst {100 * worst['fraction_of_copy']:.1f}% of copy "
              f"({worst['cache']} {worst['lengths']} batch {worst['batch']} longest {worst['longest']}), "
              f"{sum(r['fraction_of_copy'] >= 0.85 for r in big)} at >= 85%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy, "seed": args.seed, "cases": rows},
                      f, indent=2)


if __name__ == "__main__":
    main()
