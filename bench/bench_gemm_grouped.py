#!/usr/bin/env python3
"""Grouped GEMMs of mixture-of-experts layers, ours (tileops_jit.gemm_grouped) against
torch._grouped_mm and a loop of cuBLAS calls (torch.mm per expert), on the same tensors in the
same run, with realistic uneven expert loads.

    PYTHONPATH=build/python python3 bench/bench_gemm_grouped.py [--seed 1] [--json grouped.json]
                                                                [--repeats 20] [--list]

Layers: Mixtral-8x7B (8 experts, top-2, hidden 4096, intermediate 14336), Qwen3-30B-A3B (128,
top-8, 2048, 768) and DeepSeek-V3 (256, top-8, 7168, 2048); for each, the gate+up projection
(N = 2 x intermediate, K = hidden) and the down projection (N = hidden, K = intermediate) at
{64, 512, 4096, 16384} tokens. Loads: each token's top-k of random router logits plus a seeded
per-expert bias (N(0, 0.5)): some experts get several times the average, some few or none.
Contiguous layout: the tokens' rows sorted by expert, int32 offsets; also in FP8 with
DeepSeek-V3's block scales (a quantized per 1 x 128 by tj.quantize), against our bf16. Masked decode (at most 64
tokens an expert): a [experts, capacity, K] with counts, against torch.bmm over the capacity;
reported as the bandwidth of reading the active experts' weights.

Timing as bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median
(torch_timing.py).

--problem "gemm_grouped GxRxNxK bf16" (repeatable) times those contiguous problems instead, ours
against torch._grouped_mm, for sweep_peers.py --family gemm_grouped: R rows over G experts, each
expert's share drawn from --seed and the text (a lognormal weight per expert: uneven, as a
router's).
"""
import argparse
import json
import math
import random

MODELS = {  # experts, top-k, hidden, intermediate
    "mixtral-8x7b": (8, 2, 4096, 14336),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "deepseek-v3": (256, 8, 7168, 2048),
}
TOKENS = [64, 512, 4096, 16384]
DECODE_TOKENS = [1, 8, 32]  # masked layout: a decode step's tokens


def cases():
    for model, (experts, top_k, hidden, inter) in MODELS.items():
        for tokens in TOKENS:
            for proj, n, k in (("up", 2 * inter, hidden), ("down", hidden, inter)):
                yield {"model": model, "proj": proj, "layout": "contiguous", "tokens": tokens, "experts": experts,
                       "top_k": top_k, "n": n, "k": k}
        for tokens in DECODE_TOKENS:
            yield {"model": model, "proj": "up", "layout": "masked", "tokens": tokens, "experts": experts,
                   "top_k": top_k, "n": 2 * inter, "k": hidden}


def expert_counts(torch, case, seed):
    """Rows per expert: each token's top-k of random logits plus a per-expert bias."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    bias = torch.randn(case["experts"], device="cuda", generator=gen) * 0.5
    logits = torch.randn(case["tokens"], case["experts"], device="cuda", generator=gen) + bias
    ids = logits.topk(case["top_k"], dim=1).indices.flatten()
    return torch.bincount(ids, minlength=case["experts"]).to(torch.int32)


def load_summary(counts_host):
    return {"max_rows": max(counts_host), "active": sum(1 for c in counts_host if c > 0)}


def contiguous_operands(torch, counts, n, k):
    """For rows per expert `counts` (int32, on the device): A [rows, K] sorted by expert, the
    experts' weights w [G, N, K] and b = w^T [G, K, N] (contiguous along K), the offsets (G + 1,
    from 0), each group's end, and D [rows, N]."""
    rows = int(counts.sum())
    w = torch.randn(len(counts), n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), ends])
    out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    return a, w, w.transpose(1, 2), offsets, ends, out


def time_grouped_mm(torch, time_ms, a, b, ends, repeats, row):
    """torch._grouped_mm on the same operands into row["grouped_mm_us"] (None and row["error"] where
    it refuses them)."""
    try:
        peer = lambda: torch._grouped_mm(a, b, offs=ends)  # noqa: E731
        peer()
        row["grouped_mm_us"] = time_ms(peer, repeats) * 1e3
    except RuntimeError as error:
        row["grouped_mm_us"] = None
        row["error"] = str(error).splitlines()[0][:200]


def run_case(torch, tj, time_ms, case, seed, repeats):
    g, n, k = case["experts"], case["n"], case["k"]
    counts = expert_counts(torch, case, seed)
    counts_host = counts.tolist()
    row = dict(case, **load_summary(counts_host))
    if case["layout"] == "contiguous":
        a, w, b, offsets, ends, out = contiguous_operands(torch, counts, n, k)
        rows = a.shape[0]
        ours = lambda: tj.gemm_grouped(a, b, offsets=offsets, out=out)  # noqa: E731
        ref = torch.cat([a[s:e] @ w[i].t() for i, (s, e) in enumerate(zip(offsets[:-1].tolist(), ends.tolist()))])
        ours()
        row["max_error"] = float((out.float() - ref.float()).abs().max())
        row["ours_us"] = time_ms(ours, repeats) * 1e3
        bounds = list(zip(offsets[:-1].tolist(), ends.tolist()))
        loop = lambda: [torch.mm(a[s:e], w[i].t(), out=out[s:e]) for i, (s, e) in enumerate(bounds) if e > s]  # noqa: E731
        row["cublas_loop_us"] = time_ms(loop, repeats) * 1e3
        time_grouped_mm(torch, time_ms, a, b, ends, repeats, row)
        row["tflops"] = 2.0 * rows * n * k / (row["ours_us"] * 1e-6) / 1e12
        # FP8 with DeepSeek-V3's block scales: a quantized per 1 x 128 (tj.quantize), e4m3 weights per 128 x 128.
        a8, sa = tj.quantize(a, "block_1x128")
        w8 = (w * 2000).clamp(-448, 448).to(torch.float8_e4m3fn)
        sw = torch.rand(g, (n + 127) // 128, (k + 127) // 128, device="cuda") * 1e-3 + 1e-4
        fp8 = lambda: tj.gemm_grouped(a8, w8.transpose(1, 2), offsets=offsets, scales_a=sa, scales_b=sw,  # noqa: E731
                                      scaling="block", out=out)
        row["fp8_us"] = time_ms(fp8, repeats) * 1e3
        row["fp8_speedup"] = row["ours_us"] / row["fp8_us"]
    else:
        capacity = max(max(counts_host), 1)
        b = (torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16) * 0.02).transpose(1, 2)
        a = torch.randn(g, capacity, k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(g, capacity, n, device="cuda", dtype=torch.bfloat16)
        ours = lambda: tj.gemm_grouped(a, b, counts=counts, out=out)  # noqa: E731
        ours()
        mask = torch.arange(capacity, device="cuda")[None, :] < counts[:, None]
        # Rows past the counts are not written (out is uninitialized there): compared within them.
        diff = (out.float() - torch.bmm(a, b).float()).abs()
        row["max_error"] = float(torch.where(mask[..., None], diff, torch.zeros_like(diff)).max())
        row["ours_us"] = time_ms(ours, repeats) * 1e3
        row["bmm_us"] = time_ms(lambda: torch.bmm(a, b, out=out), repeats) * 1e3
        weight_bytes = row["active"] * n * k * 2
        row["weights_tb_s"] = weight_bytes / (row["ours_us"] * 1e-6) / 1e12
    return row


def problem_counts(text, seed):
    """(G, R, N, K) of "gemm_grouped GxRxNxK bf16" and its R rows spread over the G experts: each
    expert's weight lognormal (sigma 1), so some take several times the average and some none;
    drawn from the seed and the text, so a problem keeps its loads from run to run."""
    words = text.split()
    dims = words[1].split("x") if len(words) == 3 and words[0] == "gemm_grouped" and words[2] == "bf16" else []
    if len(dims) != 4 or not all(d.isdigit() and int(d) > 0 for d in dims):
        raise ValueError(f"not 'gemm_grouped GxRxNxK bf16' (the contiguous layout): {text!r}")
    g, r, n, k = (int(d) for d in dims)
    rng = random.Random(f"{seed}:{text}")
    weights = [math.exp(rng.gauss(0.0, 1.0)) for _ in range(g)]
    counts = [0] * g
    for expert in rng.choices(range(g), weights=weights, k=r):
        counts[expert] += 1
    return (g, r, n, k), counts


def run_problem(torch, tj, time_ms, text, seed, repeats):
    """Ours and torch._grouped_mm on one sweep problem's uneven loads."""
    (_, _, n, k), counts_host = problem_counts(text, seed)
    counts = torch.tensor(counts_host, dtype=torch.int32, device="cuda")
    a, _, b, offsets, ends, out = contiguous_operands(torch, counts, n, k)
    ours = lambda: tj.gemm_grouped(a, b, offsets=offsets, out=out)  # noqa: E731
    ours()  # compiles, outside the timing
    row = {"problem": text, "us": time_ms(ours, repeats) * 1e3, **load_summary(counts_host)}
    time_grouped_mm(torch, time_ms, a, b, ends, repeats, row)
    return row


def line(row):
    text = f"{row['model']:<14} {row['proj']:<4} {row['layout']:<10} {row['tokens']:>6} tok  max rows {row['max_rows']:>5}  "
    text += f"ours {row['ours_us']:8.1f} us"
    if row["layout"] == "contiguous":
        peer = row.get("grouped_mm_us")
        text += f"  _grouped_mm {peer:8.1f} us ({peer / row['ours_us']:.2f}x)" if peer else f"  _grouped_mm: {row['error']}"
        text += f"  cuBLAS loop {row['cublas_loop_us']:8.1f} us  {row['tflops']:6.1f} TFLOP/s"
        text += f"  fp8 block {row['fp8_us']:8.1f} us ({row['fp8_speedup']:.2f}x ours bf16)"
    else:
        text += f"  bmm {row['bmm_us']:8.1f} us  weights {row['weights_tb_s']:.2f} TB/s"
    return text + f"  max err {row['max_error']:.3g}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default="")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--problem", action="append", default=[], help="times these problems only (repeatable)")
    args = parser.parse_args()
    if args.list:
        for case in cases():
            print(case)
        return
    for text in args.problem:
        problem_counts(text, args.seed)  # refuses a malformed problem before any GPU work
    import torch
    import tileops_jit as tj
    from torch_timing import time_ms

    if args.problem:
        results = []
        for text in args.problem:
            results.append(run_problem(torch, tj, time_ms, text, args.seed, args.repeats))
            peer = results[-1]["grouped_mm_us"]
            print(f"{text:<44} ours {results[-1]['us']:9.1f} us  _grouped_mm "
                  + (f"{peer:9.1f} us ({peer / results[-1]['us']:.2f}x)" if peer else results[-1]["error"]), flush=True)
            torch.cuda.empty_cache()
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seed": args.seed,
                               "results": results}, f, indent=2)
        return

    rows = []
    for case in cases():
        rows.append(run_case(torch, tj, time_ms, case, args.seed, args.repeats))
        print(line(rows[-1]), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seed": args.seed,
                           "rows": rows}, f, indent=2)
    ratios = [r["grouped_mm_us"] / r["ours_us"] for r in rows if r.get("grouped_mm_us")]
    if ratios:
        geomean = 1.0
        for r in ratios:
            geomean *= r ** (1.0 / len(ratios))
        print(f"contiguous: geomean {geomean:.2f}x torch._grouped_mm, min {min(ratios):.2f}x over {len(ratios)} problems")
    fp8 = [r["fp8_speedup"] for r in rows if r.get("fp8_speedup") and r["tokens"] >= 4096]
    if fp8:
        print(f"fp8 block-scaled at >= 4096 tokens: {min(fp8):.2f}x to {max(fp8):.2f}x our bf16")


if __name__ == "__main__":
    main()
