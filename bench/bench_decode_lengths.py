#!/usr/bin/env python3
"""Decode attention over batches whose sequences differ in length, against the copy bandwidth:
the bytes of keys and values the batch holds (each sequence's own length, not the longest) over
the time, as a fraction of what a device-to-device copy reaches in the same run.

    PYTHONPATH=build-gpu/python python3 bench/bench_decode_lengths.py [--seed 1] [--repeats 20] [--mla] [--json out.json]
    PYTHONPATH=build-gpu/python python3 bench/bench_decode_lengths.py --problem P [--problem P ...] --json F

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

--problem "decode_attention BxHxKVHxDxQxLONGEST bf16 [page16,kv_fp8] KIND" or "mla_decode
BxHxQxLONGEST bf16 [page64] KIND" (repeatable, KIND one of the four above, its lengths drawn from
--seed and the text) times those problems instead, for sweep_peers.py --family decode and mla.
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


def cache(*shape, dtype=torch.bfloat16):
    return (torch.rand(shape, device="cuda") * 4 - 2).to(dtype)


def run_case(lens, page, repeats, rng, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, q_len=1,
             dtype=torch.bfloat16, kv_fp8=False):
    """Times one batch (a contiguous cache where page is 0); returns (ms, bytes of KV it holds)."""
    batch, longest = len(lens), max(lens)
    kv_dtype = torch.float8_e4m3fn if kv_fp8 else dtype
    scales = {"k_scale": 0.5, "v_scale": 0.25} if kv_fp8 else {}
    q = torch.randn(batch, q_len, heads, head_dim, device="cuda", dtype=dtype)
    lengths = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if page:
        table, pages = page_table(lens, page, rng)
        k, v = (cache(pages, page, kv_heads, head_dim, dtype=dtype).to(kv_dtype) for _ in range(2))
        run = lambda: tj.decode_attention(q, k, v, lengths, page_table=table, max_kv_len=longest, **scales)
    else:
        shape = (batch, longest, kv_heads, head_dim)
        k = torch.empty(shape, device="cuda", dtype=kv_dtype)
        v = torch.empty_like(k)
        for b in range(batch):  # one sequence at a time: an fp32 intermediate of the whole cache may not fit
            k[b] = cache(*shape[1:], dtype=dtype).to(kv_dtype)
            v[b] = cache(*shape[1:], dtype=dtype).to(kv_dtype)
        run = lambda: tj.decode_attention(q, k, v, lengths, max_kv_len=longest, **scales)
    run()  # compiles, outside the timing
    ms = time_ms(run, repeats)
    return ms, sum(lens) * 2 * kv_heads * head_dim * k.element_size()


def run_mla_case(lens, repeats, rng, heads=MLA_HEADS, q_len=1, page=MLA_PAGE, dtype=torch.bfloat16):
    """Times one MLA batch (a contiguous latent cache where page is 0); returns (ms, bytes of the
    cache it holds)."""
    batch, longest = len(lens), max(lens)
    q = torch.randn(batch, q_len, heads, MLA_DIM, device="cuda", dtype=dtype)
    lengths = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if page:
        table, pages = page_table(lens, page, rng)
        kv = cache(pages, page, MLA_DIM, dtype=dtype)
        run = lambda: tj.mla_decode(q, kv, lengths, page_table=table, max_kv_len=longest)
    else:
        kv = torch.empty(batch, longest, MLA_DIM, device="cuda", dtype=dtype)
        for b in range(batch):
            kv[b] = cache(longest, MLA_DIM, dtype=dtype)
        run = lambda: tj.mla_decode(q, kv, lengths, max_kv_len=longest)
    run()  # compiles, outside the timing
    return time_ms(run, repeats), sum(lens) * MLA_TOKEN_BYTES


def report(rows, row, copy):
    rows.append(row)
    frac = row["fraction_of_copy"]
    target = "" if row["kv_bytes"] < 64e6 else ("  ok" if frac >= 0.85 else "  below 85%")
    print(f"{row['cache']:<10} {row['lengths']:<9} {row['batch']:>5} {row['longest']:>7} {row['kv_bytes'] / 1e6:>8.1f} "
          f"{row['us']:>8.1f} {row['gbps']:>6.0f} {100 * frac:>5.1f}%{target}", flush=True)


def target_summary(name, rows):
    big = [r for r in rows if r["kv_bytes"] >= 64e6]
    if big:
        worst = min(big, key=lambda r: r["fraction_of_copy"])
        print(f"{name}: cases with >= 64 MB of KV: {len(big)}, worst {100 * worst['fraction_of_copy']:.1f}% of copy "
              f"({worst['cache']} {worst['lengths']} batch {worst['batch']} longest {worst['longest']}), "
              f"{sum(r['fraction_of_copy'] >= 0.85 for r in big)} at >= 85%")


KINDS = ("uniform", "one_long", "long_tail", "ragged")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


PROBLEM_FORMS = {"decode_attention": "BxHxKVHxDxQxLONGEST", "mla_decode": "BxHxQxLONGEST"}


def run_problems(problems, seed, repeats, copy):
    """Times each "decode_attention SHAPE DTYPE [FLAGS] KIND" or "mla_decode SHAPE DTYPE [pageN]
    KIND" problem; its lengths are drawn from the seed and the problem's text, so a problem keeps
    its batch from run to run."""
    rows = []
    for text in problems:
        words = text.split()
        form = PROBLEM_FORMS.get(words[0], "") if words else ""
        dims = words[1].split("x") if len(words) > 1 else []
        if (not form or len(words) not in (4, 5) or words[-1] not in KINDS or words[2] not in DTYPES
                or len(dims) != len(form.split("x")) or not all(d.isdigit() and int(d) > 0 for d in dims)):
            raise ValueError(f"not 'decode_attention {PROBLEM_FORMS['decode_attention']} bf16|fp16 [FLAGS] KIND' or "
                             f"'mla_decode {PROBLEM_FORMS['mla_decode']} bf16|fp16 [pageN] KIND': {text!r}")
        flags = words[3].split(",") if len(words) == 5 else []
        page = next((int(f[4:]) for f in flags if f.startswith("page")), 0)
        rng = random.Random(f"{seed}:{text}")
        batch, longest = int(dims[0]), int(dims[-1])
        lens = lengths_of(words[-1], batch, longest, rng)
        if words[0] == "mla_decode":
            heads, q_len = int(dims[1]), int(dims[2])
            ms, kv_bytes = run_mla_case(lens, repeats, rng, heads, q_len, page, DTYPES[words[2]])
        else:
            heads, kv_heads, head_dim, q_len = (int(d) for d in dims[1:5])
            ms, kv_bytes = run_case(lens, page, repeats, rng, heads, kv_heads, head_dim, q_len, DTYPES[words[2]],
                                    "kv_fp8" in flags)
        gbps = kv_bytes / (ms * 1e-3) / 1e9
        rows.append({"problem": text, "lengths": lens, "kv_bytes": kv_bytes, "us": ms * 1e3, "gbps": gbps,
                     "fraction_of_copy": gbps / copy})
        print(f"{text:<64} {kv_bytes / 1e6:>9.1f} MB {ms * 1e3:>9.1f} us {100 * gbps / copy:>6.1f}% of copy", flush=True)
        torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default="")
    parser.add_argument("--mla", action="store_true", help="MLA decode too")
    parser.add_argument("--problem", action="append", default=[], help="times these problems only (repeatable)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    copy = copy_gbps(args.repeats)
    if args.problem:
        rows = run_problems(args.problem, args.seed, args.repeats, copy)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy, "seed": args.seed,
                           "results": rows}, f, indent=2)
        return
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s")
    print(f"{'cache':<10} {'lengths':<9} {'batch':>5} {'longest':>7} {'KV MB':>8} {'us':>8} {'GB/s':>6} {'% copy':>6}")
    rows, mla_rows = [], []
    for paged in (False, True):
        for kind in KINDS:
            for batch in (8, 32, 128):
                for longest in (16384, 65536):
                    lens = lengths_of(kind, batch, longest, rng)
                    if sum(lens) * TOKEN_BYTES > (24e9 if paged else 12e9) or batch * longest * TOKEN_BYTES > 24e9:
                        continue
                    ms, kv_bytes = run_case(lens, PAGE if paged else 0, args.repeats, rng)
                    gbps = kv_bytes / (ms * 1e-3) / 1e9
                    report(rows, {"op": "decode_attention", "cache": "paged16" if paged else "contiguous", "lengths": kind,
                                  "batch": batch, "longest": longest, "kv_bytes": kv_bytes, "us": ms * 1e3, "gbps": gbps,
                                  "fraction_of_copy": gbps / copy}, copy)
                    torch.cuda.empty_cache()
    if args.mla:
        for kind in KINDS:
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
    target_summary("decode_attention", rows)
    target_summary("mla_decode", mla_rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy, "seed": args.seed,
                       "cases": rows + mla_rows}, f, indent=2)


if __name__ == "__main__":
    main()
