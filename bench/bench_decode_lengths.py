#!/usr/bin/env python3
"""Decode attention over batches whose sequences differ in length, against the copy bandwidth:
the bytes of keys and values the batch holds (each sequence's own length, not the longest) over
the time, as a fraction of what a device-to-device copy reaches in the same run.

    PYTHONPATH=build-gpu/python python3 bench/bench_decode_lengths.py [--seed 1] [--repeats 20] [--mla] [--json out.json]

Decode attention: GQA 32/8, head dim 128, bf16, one query token; contiguous and paged (pages of 16,
shuffled over the pool) caches; batches of 8, 32 and 128 with their longest sequence at 16k or 64k
tokens. MLA decode (--mla also): DeepSeek-V3's 128 heads over the 576-dim latent cache, pages of 64,
batches of 32 and 128, longest 16k or 64k. Lengths:
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
MLA_HEADS, MLA_DIM, MLA_PAGE = 128, 576, 64
MLA_TOKEN_BYTES = MLA_DIM * 2


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


def page_table(lens, page, rng):
    """Each sequence's pages, shuffled over a pool that holds exactly the batch's pages."""
    pages_of = [(n + page - 1) // page for n in lens]
    pool = list(range(sum(pages_of)))
    rng.shuffle(pool)
    table = torch.full((len(lens), (max(lens) + page - 1) // page), -1, dtype=torch.int32)
    at = 0
    for b, n in enumerate(pages_of):
        table[b, :n] = torch.tensor(pool[at:at + n], dtype=torch.int32)
        at += n
    return table.cuda(), len(pool)


def cache(*shape):
    return (torch.rand(shape, device="cuda") * 4 - 2).to(torch.bfloat16)


def run_case(lens, paged, repeats, rng):
    batch, longest = len(lens), max(lens)
    q = torch.randn(batch, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    lengths = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if paged:
        table, pages = page_table(lens, PAGE, rng)
        k, v = cache(pages, PAGE, KV_HEADS, HEAD_DIM), cache(pages, PAGE, KV_HEADS, HEAD_DIM)
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


def run_mla_case(lens, repeats, rng):
    q = torch.randn(len(lens), MLA_HEADS, MLA_DIM, device="cuda", dtype=torch.bfloat16)
    lengths = torch.tensor(lens, dtype=torch.int32, device="cuda")
    table, pages = page_table(lens, MLA_PAGE, rng)
    kv = cache(pages, MLA_PAGE, MLA_DIM)
    run = lambda: tj.mla_decode(q, kv, lengths, page_table=table, max_kv_len=max(lens))
    run()
    return time_ms(run, repeats), sum(lens) * MLA_TOKEN_BYTES


def report(rows, row, copy):
    rows.append(row)
    frac = row["fraction_of_copy"]
    target = "" if row["kv_bytes"] < 64e6 else ("  ok" if frac >= 0.85 else "  below 85%")
    print(f"{row['cache']:<10} {row['lengths']:<9} {row['batch']:>5} {row['longest']:>7} {row['kv_bytes'] / 1e6:>8.1f} "
          f"{row['us']:>8.1f} {row['gbps']:>6.0f} {100 * frac:>5.1f}%{target}", flush=True)


def summary(name, rows):
    big = [r for r in rows if r["kv_bytes"] >= 64e6]
    if big:
        worst = min(big, key=lambda r: r["fraction_of_copy"])
        print(f"{name}: cases with >= 64 MB of KV: {len(big)}, worst {100 * worst['fraction_of_copy']:.1f}% of copy "
              f"({worst['cache']} {worst['lengths']} batch {worst['batch']} longest {worst['longest']}), "
              f"{sum(r['fraction_of_copy'] >= 0.85 for r in big)} at >= 85%")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default="")
    parser.add_argument("--mla", action="store_true", help="MLA decode too")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    copy = copy_gbps(args.repeats)
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s")
    print(f"{'cache':<10} {'lengths':<9} {'batch':>5} {'longest':>7} {'KV MB':>8} {'us':>8} {'GB/s':>6} {'% copy':>6}")
    kinds = ("uniform", "one_long", "long_tail", "ragged")
    rows, mla_rows = [], []
    for paged in (False, True):
        for kind in kinds:
            for batch in (8, 32, 128):
                for longest in (16384, 65536):
                    lens = lengths_of(kind, batch, longest, rng)
                    if sum(lens) * TOKEN_BYTES > (24e9 if paged else 12e9) or batch * longest * TOKEN_BYTES > 24e9:
                        continue
                    ms, kv_bytes = run_case(lens, paged, args.repeats, rng)
                    gbps = kv_bytes / (ms * 1e-3) / 1e9
                    report(rows, {"op": "decode_attention", "cache": "paged16" if paged else "contiguous", "lengths": kind,
                                  "batch": batch, "longest": longest, "kv_bytes": kv_bytes, "us": ms * 1e3, "gbps": gbps,
                                  "fraction_of_copy": gbps / copy}, copy)
                    torch.cuda.empty_cache()
    if args.mla:
        for kind in kinds:
            for batch in (32, 128):
                for longest in (16384, 65536):
                    lens = lengths_of(kind, batch, longest, rng)
                    if sum(lens) * MLA_TOKEN_BYTES > 24e9:
                        continue
                    ms, kv_bytes = run_mla_case(lens, args.repeats, rng)
                    gbps = kv_bytes / (ms * 1e-3) / 1e9
                    report(mla_rows, {"op": "mla_decode", "cache": "mla_page64", "lengths": kind, "batch": batch,
                                      "longest": longest, "kv_bytes": kv_bytes, "us": ms * 1e3, "gbps": gbps,
                                      "fraction_of_copy": gbps / copy}, copy)
                    torch.cuda.empty_cache()
    summary("decode_attention", rows)
    summary("mla_decode", mla_rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy, "seed": args.seed,
                       "cases": rows + mla_rows}, f, indent=2)


if __name__ == "__main__":
    main()
