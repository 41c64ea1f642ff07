#!/usr/bin/env python3
"""Times torch._scaled_mm (cuBLASLt's FP8 GEMM) on GemmFp8 problems, named as bench_problems names
them, on the same GPU: A M x K and B N x K of e4m3 (B passed transposed, as cuBLASLt wants it),
out bf16/fp16/fp32, per-tensor, row-wise or 128-block scales.

    python3 bench/torch_gemm_fp8_peers.py --json peers.json \\
        --problem "gemm_fp8 4096x4096x4096 fp8_e4m3->bf16 tensor" [--problem ...]

Block scales (1 x 128 for A, 128 x 128 for B) run where this torch's _scaled_mm takes them on the
GPU; elsewhere the case says why ("error"). Same method as bench_problems: CUDA events, warm-up, L2
flushed before each timed run, median.
"""
import torch

from torch_timing import run_problems, time_ms

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def time_problem(text, repeats):
    parts = text.split()
    m, n, k = (int(x) for x in parts[1].split("x")[-3:])
    out = DTYPES[parts[2].split("->")[1]]
    scaling = parts[3].split(",")[0] if len(parts) > 3 else "tensor"
    a = (torch.randn(m, k, device="cuda") * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 4).to(torch.float8_e4m3fn)
    if scaling == "row":
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    elif scaling == "block":
        # cuBLASLt's layout: A's 1 x 128 scales M-major, B's 128 x 128 ones as [N/128, K/128].
        sa = (torch.rand(k // 128, m, device="cuda") + 0.5).t()
        sb = (torch.rand(n // 128, k // 128, device="cuda") + 0.5).t()
    else:
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    row = {"problem": text}
    try:
        fn = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out)  # noqa: E731
        fn()
        row["scaled_mm_us"] = time_ms(fn, repeats) * 1e3
        row["tflops"] = 2.0 * m * n * k / (row["scaled_mm_us"] * 1e-6) / 1e12
    except RuntimeError as error:
        row["scaled_mm_us"] = None
        row["error"] = str(error).splitlines()[0][:200]
    return row


def main():
    run_problems(time_problem, "gemm_fp8 MxNxK fp8_e4m3->OUT [tensor|row|block]",
                 lambda row: f"{row['problem']:<50} " + (f"_scaled_mm {row['scaled_mm_us']:8.1f} us {row['tflops']:7.1f} TFLOP/s"
                                                         if row["scaled_mm_us"] else f"error: {row['error']}"))


if __name__ == "__main__":
    main()
