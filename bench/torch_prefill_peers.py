#!/usr/bin/env python3
"""Times torch SDPA's cuDNN and flash (FlashAttention-2) backends on flash_attention problems
named as bench_problems names them, for sweep_peers.py --family prefill.

    python3 bench/torch_prefill_peers.py --json peers.json \\
        --problem "flash_attention 2x32x8x128x8192x8192 bf16 causal" [--problem ...]

Shape batch x heads x kv_heads x head_dim x seqlen_q x seqlen_k; flags causal and dvN (a value head
dim of N). Layout, GQA and the ways tried when a backend refuses a call as in
torch_flash_peers.py; a backend that refuses every way gets null and its reasons. Each case
records cudnn_us and flash_us.
"""
import torch
from torch.nn.attention import SDPBackend

from torch_flash_peers import time_backend
from torch_timing import run_problems

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def time_problem(text, repeats):
    parts = text.split()
    flags = parts[3].split(",") if len(parts) > 3 else []
    batch, heads, kv_heads, head_dim, seqlen_q, seqlen_k = (int(x) for x in parts[1].split("x"))
    head_dim_v = next((int(f[2:]) for f in flags if f.startswith("dv")), head_dim)
    if parts[0] != "flash_attention" or parts[2] not in DTYPES or seqlen_q != seqlen_k or \
            any(f != "causal" and not f.startswith("dv") for f in flags):
        raise ValueError(f"not a problem this peer times: {text!r}")
    dtype = DTYPES[parts[2]]

    def tensor(h, d):
        return (torch.rand(batch, seqlen_q, h, d, device="cuda") * 4 - 2).to(dtype)

    q, k, v = tensor(heads, head_dim), tensor(kv_heads, head_dim), tensor(kv_heads, head_dim_v)
    case = {"batch": batch, "heads": heads, "seqlen": seqlen_q, "head_dim": head_dim, "causal": "causal" in flags}
    row = {"problem": text}
    with torch.no_grad():
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            result = time_backend(backend, case, q, k, v, repeats)
            row[f"{name}_us"] = result["median_us"]
            if result["error"]:
                row[f"{name}_error"] = result["error"]
    row["error"] = row.get("cudnn_error", "")
    return row


def line(row):
    cells = [f"{name} {row[f'{name}_us']:9.1f} us" if row[f"{name}_us"] else f"{name} refused"
             for name in ("cudnn", "flash")]
    return f"{row['problem']:<56} " + "  ".join(cells)


def main():
    run_problems(time_problem, "flash_attention BxHxKVHxDxSQxSK bf16|fp16 [causal,dvN]", line)


if __name__ == "__main__":
    main()
