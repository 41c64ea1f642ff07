#!/usr/bin/env python3
"""Times torch eager and torch.compile on the shapes bench_memory_ops uses, on the same GPU.

    python3 bench/torch_peers.py --json torch.json [--quick] [--ops a,b] [--shapes RxC,...] [--dtypes bf16,fp32]

Same method as bench_memory_ops: CUDA events, warm-up, L2 flushed before each timed run, median
of the repeats, bytes = each input read once and each output written once.
"""
import argparse
import json

import torch
import torch.nn.functional as F

from torch_timing import time_ms

# One compiled function serves 12 shapes and dtypes per op: past dynamo's default limit of 8
# recompiles it would silently run eager, so the limit is raised (its name changed in torch 2.6).
for limit_name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, limit_name):
        setattr(torch._dynamo.config, limit_name, 64)

SHAPES = [(16384, 1024), (16384, 4096), (4096, 16384), (1024, 65536), (256, 262144), (65536, 4096)]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def rmsnorm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def rmsnorm_residual(x, r, w):
    h = x + r
    return rmsnorm(h, w), h


OPS = {
    # name: (function, number of matrix inputs, matrix outputs, row-vector inputs)
    "rmsnorm": (lambda x, w: rmsnorm(x, w), 1, 1, 1),
    "rmsnorm_residual": (lambda x, r, w: rmsnorm_residual(x, r, w), 2, 2, 1),
    "layernorm": (lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5), 1, 1, 2),
    "softmax": (lambda x: torch.softmax(x, -1), 1, 1, 0),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), 1, 1, 0),
    "gelu": (lambda x: F.gelu(x), 1, 1, 0),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), 1, 1, 0),
    "silu": (lambda x: F.silu(x), 1, 1, 0),
    "silu_mul": (lambda a, b: F.silu(a) * b, 2, 1, 0),
    "add": (lambda a, b: a + b, 2, 1, 0),
    "mul": (lambda a, b: a * b, 2, 1, 0),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--ops", default="", help="comma-separated subset of the ops (default: all)")
    parser.add_argument("--shapes", default="", help="ROWSxCOLS,... instead of bench_memory_ops' shapes")
    parser.add_argument("--dtypes", default="", help="comma-separated subset of bf16,fp32")
    args = parser.parse_args()
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    dtypes = {name: DTYPES[name] for name in args.dtypes.split(",")} if args.dtypes else DTYPES
    ops = ["rmsnorm", "softmax", "silu_mul"] if args.quick else list(OPS)
    if args.ops:
        ops = args.ops.split(",")
        unknown = [name for name in ops if name not in OPS]
        if unknown:
            parser.error(f"unknown ops: {', '.join(unknown)}")
    results = []
    for name in ops:
        fn, n_in, n_out, n_vec = OPS[name]
        compiled = None if args.no_compile else torch.compile(fn, dynamic=False)
        for dname, dtype in dtypes.items():
            for rows, cols in shapes:
                inputs = [torch.rand(rows, cols, device="cuda", dtype=dtype) * 4 - 2 for _ in range(n_in)]
                inputs += [torch.rand(cols, device="cuda", dtype=dtype) + 0.5 for _ in range(n_vec)]
                element = torch.finfo(dtype).bits // 8
                nbytes = (n_in + n_out) * rows * cols * element + n_vec * cols * element
                row = {"op": name, "rows": rows, "cols": cols, "dtype": dname, "bytes": nbytes}
                with torch.no_grad():
                    row["eager_us"] = time_ms(lambda: fn(*inputs), args.repeats) * 1e3
                    if compiled is not None:
                        row["compile_us"] = time_ms(lambda: compiled(*inputs), args.repeats) * 1e3
                for key in ("eager", "compile"):
                    if f"{key}_us" in row:
                        row[f"{key}_gbps"] = nbytes / (row[f"{key}_us"] * 1e-6) / 1e9
                results.append(row)
                print(f"{name:<18} {rows}x{cols:<8} {dname:<5} eager {row['eager_us']:9.1f} us"
                      + (f"  compile {row['compile_us']:9.1f} us" if "compile_us" in row else ""), flush=True)
                del inputs
        if args.json:  # after every op, so a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "ops": results}, f,
                          indent=2)


if __name__ == "__main__":
    main()
