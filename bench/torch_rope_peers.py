#!/usr/bin/env python3
"""Times torch on Rope problems, named as bench_problems names them, on the same GPU.

    python3 bench/torch_rope_peers.py --json torch_rope.json \
        --problem "rope 8192x32x8x128 bf16 page16" [--problem "rope 512x16x16x256 fp16 rot64,gptj"]...

The peer is what a PyTorch server runs: cos and sin gathered from a table by position, the
Hugging Face rotation in the dtype (rotate_half for neox pairs, the interleaved form for gptj;
elements past rotary_dim unchanged), then, with pageN, the keys and values stored into the cache by
slot (vLLM's reshape_and_cache; kv_fp8 stores e4m3 codes), eager and under torch.compile. Bytes are
what the op must move: q, k (and v) read, the rotated q and k written, a cache row of keys and of
values a token. Positions and slots are filled as bench_problems fills them. Same method as
bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median.
"""

import torch

from torch_timing import run_problems, time_ms

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def parse_problem(text):
    """'rope 8192x32x8x128 bf16 page16,kv_fp8' -> a dict of the problem."""
    parts = text.split()
    tokens, heads, kv_heads, dim = (int(x) for x in parts[1].split("x"))
    p = {"text": text, "tokens": tokens, "heads": heads, "kv_heads": kv_heads, "dim": dim, "dtype": parts[2],
         "rot": dim, "gptj": False, "page": 0, "fp8": False}
    for flag in (parts[3].split(",") if len(parts) > 3 else []):
        if flag == "gptj":
            p["gptj"] = True
        elif flag == "kv_fp8":
            p["fp8"] = True
        elif flag.startswith("rot"):
            p["rot"] = int(flag[3:])
        elif flag.startswith("page"):
            p["page"] = int(flag[4:])
    return p


def make_rope(rot, gptj, append, fp8):
    def rotate(x, cos, sin):
        r = x[..., :rot]
        if gptj:
            pairs = r.unflatten(-1, (-1, 2))
            turned = torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)
            c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        else:
            turned = torch.cat((-r[..., rot // 2:], r[..., :rot // 2]), -1)
            c, s = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rotated = r * c + turned * s
        return rotated if rot == x.shape[-1] else torch.cat((rotated, x[..., rot:]), -1)

    def rope(q, k, v, cos_sin, positions, slots, k_cache, v_cache):
        cos, sin = cos_sin[positions].chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        q_out, k_out = rotate(q, cos, sin), rotate(k, cos, sin)
        if append:  # fp8 codes are copied as bytes (index_copy_ has no float8 kernel)
            for cache, rows in ((k_cache, k_out), (v_cache, v)):
                if fp8:
                    cache, rows = cache.view(torch.uint8), rows.to(torch.float8_e4m3fn).view(torch.uint8)
                cache.view(-1, *rows.shape[1:]).index_copy_(0, slots, rows)
        return q_out, k_out

    return rope


def time_problem(p, repeats):
    dtype = DTYPES[p["dtype"]]
    tokens, heads, kv_heads, dim, rot = p["tokens"], p["heads"], p["kv_heads"], p["dim"], p["rot"]
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, rot, 2, device="cuda", dtype=torch.float32) / rot))
    angles = torch.arange(8192, device="cuda", dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos_sin = torch.cat((angles.cos(), angles.sin()), -1).to(dtype)
    q = (torch.rand(tokens, heads, dim, device="cuda") * 4 - 2).to(dtype)
    k = (torch.rand(tokens, kv_heads, dim, device="cuda") * 4 - 2).to(dtype)
    v = (torch.rand(tokens, kv_heads, dim, device="cuda") * 4 - 2).to(dtype)
    index = torch.arange(tokens, device="cuda") * 7919 + 13
    positions = index % 8192
    append = p["page"] > 0
    num_pages = tokens // max(p["page"], 1) + 2
    slots = index % (num_pages * max(p["page"], 1))
    cache_dtype = torch.float8_e4m3fn if p["fp8"] else dtype
    k_cache = torch.empty(num_pages, max(p["page"], 1), kv_heads, dim, device="cuda", dtype=cache_dtype)
    v_cache = torch.empty_like(k_cache)
    operands = (q, k, v, cos_sin, positions, slots, k_cache, v_cache)
    moved = 2 * (q.nbytes + k.nbytes)
    if append:
        moved += v.nbytes + 2 * tokens * kv_heads * dim * k_cache.element_size()
    fn = make_rope(rot, p["gptj"], append, p["fp8"])
    compiled = torch.compile(fn, dynamic=False)
    row = {"problem": p["text"], "bytes": moved}
    with torch.no_grad():
        for name, f in (("eager", fn), ("compile", compiled)):
            ms = time_ms(lambda: f(*operands), repeats)
            row[f"{name}_us"] = ms * 1e3
            row[f"{name}_gbps"] = moved / (ms * 1e-3) / 1e9
    return row


def main():
    torch._dynamo.config.cache_size_limit = 256  # one compile a problem
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 256
    run_problems(lambda text, repeats: time_problem(parse_problem(text), repeats), "rope TxHxKxD DTYPE [FLAGS]",
                 lambda row: f"{row['problem']:<44} eager {row['eager_us']:8.1f} us   compile {row['compile_us']:8.1f} us")


if __name__ == "__main__":
    main()
