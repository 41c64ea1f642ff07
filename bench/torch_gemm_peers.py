#!/usr/bin/env python3
"""Times cuBLAS through torch's F.linear (x W^T, W as N x K) on GEMM problems named as
bench_problems names them, for sweep_peers.py --family gemm.

    python3 bench/torch_gemm_peers.py --json peers.json --problem "gemm 4097x50257x768 bf16 nt" [--problem ...]

Inputs uniform in [-2, 2), as OperandBuffers fills ours; same method as bench_problems (CUDA
events, warm-up, L2 flushed before each timed run, median). Each case records cublas_us.
"""
import torch
import torch.nn.functional as F

from torch_timing import run_problems, time_ms

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def time_problem(text, repeats):
    parts = text.split()
    flags = parts[3].split(",") if len(parts) > 3 else []
    if parts[0] != "gemm" or parts[2] not in DTYPES or flags != ["nt"]:
        raise ValueError(f"not a problem this peer times (gemm MxNxK bf16|fp16 nt): {text!r}")
    m, n, k = (int(x) for x in parts[1].split("x"))
    dtype = DTYPES[parts[2]]
    x = (torch.rand(m, k, device="cuda") * 4 - 2).to(dtype)
    w = (torch.rand(n, k, device="cuda") * 4 - 2).to(dtype)
    with torch.no_grad():
        us = time_ms(lambda: F.linear(x, w), repeats) * 1e3
    return {"problem": text, "cublas_us": us, "tflops": 2.0 * m * n * k / us / 1e6}


def main():
    run_problems(time_problem, "gemm MxNxK bf16|fp16 nt",
                 lambda row: f"{row['problem']:<40} cuBLAS {row['cublas_us']:9.1f} us {row['tflops']:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
