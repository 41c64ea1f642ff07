#!/usr/bin/env python3
"""Times torch's fp8 activation quantization on Quantize problems, named as bench_problems names
them, on the same GPU, eager and under torch.compile: amax (per row, per 1x128 block, or over the
tensor), scale = amax / 448 (at least 2^-126, as the op's), x / scale clamped to +-448 and
.to(torch.float8_e4m3fn) (which does not saturate by itself); with a static per-tensor scale the
division alone. Block scales come out block-major ([blocks, rows], as the op writes them).

    python3 bench/torch_quantize_peers.py --json torch_quantize.json \\
        --problem "quantize 4096x4096 bf16->fp8_e4m3 per_token" [--problem "quantize 16384x7168 bf16 block_1x128"]...

Same method as bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import torch
import torch.nn.functional as F

from torch_timing import run_problems, time_ms

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
E4M3_MAX = 448.0
MIN_SCALE = 2.0 ** -126
FP8 = torch.float8_e4m3fn


def per_token(x):
    scale = (x.abs().amax(dim=1, keepdim=True).float() / E4M3_MAX).clamp(min=MIN_SCALE)
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8), scale.squeeze(1)


def block_1x128(x):
    rows, cols = x.shape
    blocks = (cols + 127) // 128
    padded = x if cols == blocks * 128 else F.pad(x, (0, blocks * 128 - cols))
    grouped = padded.view(rows, blocks, 128)
    scale = (grouped.abs().amax(dim=2, keepdim=True).float() / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (grouped.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8).view(rows, blocks * 128)[:, :cols]
    return q, scale.view(rows, blocks).t().contiguous()


def per_tensor(x):
    scale = (x.abs().amax().float() / E4M3_MAX).clamp(min=MIN_SCALE)
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8), scale.reshape(1)


def per_tensor_static(x, scale):
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8)


def time_problem(text, repeats):
    parts = text.split()
    rows, cols = (int(v) for v in parts[1].split("x"))
    dtype = DTYPES[parts[2].split("->")[0]]
    scaling = parts[3]
    x = (torch.rand(rows, cols, device="cuda") * 4 - 2).to(dtype)  # as the op's operands: [-2, 2]
    if scaling == "per_tensor_static":
        scale = torch.full((1,), 2.0 / E4M3_MAX, device="cuda")
        fn = lambda: per_tensor_static(x, scale)  # noqa: E731
    else:
        quantize = {"per_token": per_token, "block_1x128": block_1x128, "per_tensor": per_tensor}[scaling]
        fn = lambda: quantize(x)  # noqa: E731
    with torch.no_grad():
        eager = time_ms(fn, repeats)
        compiled = torch.compile(fn)
        compile_ms = time_ms(compiled, repeats)
    return {"problem": text, "eager_us": eager * 1e3, "compile_us": compile_ms * 1e3,
            "best_us": min(eager, compile_ms) * 1e3}


def main():
    run_problems(time_problem, "quantize RxC DTYPE[->fp8_e4m3] per_token|block_1x128|per_tensor|per_tensor_static",
                 lambda row: f"{row['problem']:<56} eager {row['eager_us']:8.1f} us  compile {row['compile_us']:8.1f} us")


if __name__ == "__main__":
    main()
