#!/usr/bin/env python3
"""Times torch implementations of MoE routing on moe_topk / moe_permute / moe_unpermute problems,
named as bench_problems names them, on the same GPU, eager and under torch.compile:

  moe_topk: softmax or sigmoid over fp32 logits, torch.topk (DeepSeek-V3's grouped choice: the
    groups' top-2 sums, topk of the groups, the other groups masked to -inf, the bias added for
    choosing only), renormalize, the scaling factor;
  moe_permute: a stable argsort of the flattened ids, x's rows gathered in that order, bincount +
    cumsum for the offsets, row_map scattered back (capacityN: ranks within the expert, entries
    past the capacity dropped, rows put into [experts, capacity, hidden] with index_put_);
  moe_unpermute: y's rows gathered by row_map, weighted and summed over k in fp32 (rowsN: y's
    rows; accumulate: added to out).

The ids and row maps come from the top-k of random logits (uneven loads, as a router's).

    python3 bench/torch_moe_routing_peers.py --json torch_moe.json \\
        --problem "moe_permute 4096x7168x256x8 bf16" [--problem "moe_topk 4096x256x8 bf16 sigmoid,renorm,group8,topk_group4,bias"]...

    # The chain (top-k, permute, unpermute) of the three models with skewed logits (a few hot
    # experts), tileops_jit (PYTHONPATH=build-gpu/python) against the torch chain, same inputs:
    python3 bench/torch_moe_routing_peers.py --skewed [--json skewed.json]

Same method as bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import sys

import torch

from torch_timing import run_problems, save_results, time_ms

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


def topk_peer(logits, k, scoring, renormalize, scaling, n_group, topk_group, bias):
    x = logits.float()
    s = torch.softmax(x, -1) if scoring == "softmax" else torch.sigmoid(x)
    choice = s + bias if bias is not None else s
    if n_group > 1:
        groups = choice.view(x.shape[0], n_group, -1)
        kept = groups.topk(2, dim=-1).values.sum(-1).topk(topk_group, dim=-1).indices
        mask = torch.zeros(x.shape[0], n_group, device=x.device, dtype=torch.bool).scatter_(1, kept, True)
        choice = choice.masked_fill(~mask.repeat_interleave(x.shape[1] // n_group, 1), float("-inf"))
    ids = choice.topk(k, dim=-1).indices
    w = s.gather(1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * scaling, ids.int()


def permute_peer(x, ids, experts, capacity):
    k = ids.shape[1]
    flat = ids.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    row_map = torch.empty_like(flat)
    row_map[order] = torch.arange(flat.numel(), device=x.device)
    if not capacity:
        return x[order // k], offsets.int(), row_map.view(ids.shape).int()
    rank = row_map - offsets[flat]
    keep = rank < capacity
    out = x.new_empty(experts, capacity, x.shape[1])
    out.index_put_((flat[keep], rank[keep]), x[torch.arange(flat.numel(), device=x.device)[keep] // k])
    row_map = torch.where(keep, flat * capacity + rank, -1)
    return out, counts.clamp(max=capacity).int(), row_map.view(ids.shape).int()


def unpermute_peer(y, row_map, weights, out=None):
    rows = y.reshape(-1, y.shape[-1])
    flat = row_map.flatten().long()
    valid = (flat >= 0).float()
    gathered = rows[flat.clamp(min=0)].float().view(*row_map.shape, -1)
    total = (gathered * (weights * valid.view(row_map.shape)).unsqueeze(-1)).sum(1)
    return total.to(y.dtype) if out is None else (out.float() + total).to(y.dtype)


def router_ids(tokens, experts, k, skew=0.0):
    logits = torch.randn(tokens, experts, device="cuda")
    if skew:
        logits[:, ::7] += skew
    return logits.topk(k, dim=-1).indices.int()


def parse_flags(text):
    return [f for f in text.split(",") if f]


def number(flags, prefix, default=0):
    for f in flags:
        if f.startswith(prefix) and f[len(prefix):].isdigit():
            return int(f[len(prefix):])
    return default


def problem_fn(text):
    parts = text.split()
    op, shape, dtype = parts[0], [int(v) for v in parts[1].split("x")], DTYPES[parts[2]]
    flags = parse_flags(parts[3]) if len(parts) > 3 else []
    if op == "moe_topk":
        tokens, experts, k = shape
        logits = torch.randn(tokens, experts, device="cuda").to(dtype)
        scoring = "sigmoid" if "sigmoid" in flags else "softmax"
        bias = torch.randn(experts, device="cuda") * 0.1 if "bias" in flags else None
        n_group, topk_group = number(flags, "group", 1), number(flags, "topk_group", 1)
        return lambda: topk_peer(logits, k, scoring, "renorm" in flags, 1.0, n_group, topk_group, bias)
    if op == "moe_permute":
        tokens, hidden, experts, k = shape
        x = torch.randn(tokens, hidden, device="cuda").to(dtype)
        if dtype == torch.float8_e4m3fn:
            x = x.view(torch.uint8)  # the codes moved as bytes (torch does not index float8 tensors everywhere)
        ids = router_ids(tokens, experts, k)
        capacity = number(flags, "capacity")
        return lambda: permute_peer(x, ids, experts, capacity)
    if op == "moe_unpermute":
        tokens, hidden, k = shape
        y_rows = number(flags, "rows", tokens * k)
        y = torch.randn(y_rows, hidden, device="cuda").to(dtype)
        row_map = torch.randperm(y_rows, device="cuda")[:tokens * k].view(tokens, k).int() if y_rows >= tokens * k else \
            torch.randint(0, y_rows, (tokens, k), device="cuda", dtype=torch.int32)
        weights = torch.rand(tokens, k, device="cuda")
        out = torch.randn(tokens, hidden, device="cuda").to(dtype) if "accumulate" in flags else None
        return lambda: unpermute_peer(y, row_map, weights, out)
    raise ValueError(f"not a moe routing problem: {text}")


def time_problem(text, repeats):
    fn = problem_fn(text)
    with torch.no_grad():
        eager = time_ms(fn, repeats)
        try:
            compiled = time_ms(torch.compile(fn), repeats)
        except Exception as e:  # noqa: BLE001 (the compiler's failure is reported, eager still counts)
            print(f"{text}: torch.compile failed: {e}", file=sys.stderr)
            compiled = None
    best = eager if compiled is None else min(eager, compiled)
    return {"problem": text, "eager_us": eager * 1e3, "compile_us": None if compiled is None else compiled * 1e3,
            "best_us": best * 1e3}


# (name, experts, k, scoring, renormalize, scaling, n_group, topk_group, bias, hidden)
MODELS = [("mixtral", 8, 2, "softmax", True, 1.0, 1, 1, False, 4096),
          ("qwen3-30b-a3b", 128, 8, "softmax", True, 1.0, 1, 1, False, 2048),
          ("deepseek-v3", 256, 8, "sigmoid", True, 2.5, 8, 4, True, 7168)]


def skewed_chain(repeats):
    """The three models' chains on skewed logits: tileops_jit against torch, same inputs."""
    import tileops_jit as tj

    cases = []
    for name, experts, k, scoring, renorm, scaling, n_group, topk_group, has_bias, hidden in MODELS:
        for tokens in (16, 512, 4096):
            logits = torch.randn(tokens, experts, device="cuda")
            logits[:, ::7] += 3.0  # every seventh expert hot
            logits = logits.to(torch.bfloat16)
            x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
            bias = torch.randn(experts, device="cuda") * 0.1 if has_bias else None

            def ours():
                w, ids = tj.moe_topk(logits, k, scoring, renormalize=renorm, routed_scaling_factor=scaling,
                                     n_group=n_group, topk_group=topk_group, correction_bias=bias)
                y, _, row_map = tj.moe_permute(x, ids, experts)
                return tj.moe_unpermute(y, row_map, w)

            def peer():
                w, ids = topk_peer(logits, k, scoring, renorm, scaling, n_group, topk_group, bias)
                y, _, row_map = permute_peer(x, ids, experts, 0)
                return unpermute_peer(y, row_map, w)

            with torch.no_grad():
                ours_us, peer_us = time_ms(ours, repeats) * 1e3, time_ms(peer, repeats) * 1e3
            row = {"problem": f"{name} chain {tokens} tokens skewed", "ours_us": ours_us, "eager_us": peer_us,
                   "speedup": peer_us / ours_us}
            cases.append(row)
            print(f"{row['problem']:<44} ours {ours_us:8.1f} us  torch eager {peer_us:8.1f} us  "
                  f"{row['speedup']:5.2f}x", flush=True)
    return cases


def main():
    if "--skewed" in sys.argv:
        path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else ""
        save_results(path, skewed_chain(30))
        return
    run_problems(time_problem, "moe_topk TxExK DTYPE FLAGS | moe_permute TxHxExK DTYPE [capacityN] | "
                 "moe_unpermute TxHxK DTYPE [rowsN,accumulate]",
                 lambda row: f"{row['problem']:<72} eager {row['eager_us']:8.1f} us  best {row['best_us']:8.1f} us")


if __name__ == "__main__":
    main()
