#!/usr/bin/env python3
"""Host cost of one call from Python on a cache hit, against what it wraps and against peers.

Each figure is host microseconds per call over a loop of back-to-back calls of a tiny problem
(silu over one row of 64 bf16 elements: the GPU finishes each kernel before the host issues the
next, so the loop measures the host), median of 7 rounds:
  - tileops_jit.silu(x, out=y): the public function, output given;
  - tileops_jit.silu(x): the output allocated by torch;
  - tileops_jit._C.elementwise(...): the binding alone;
  - torch.nn.functional.silu(x, out... ) eager, and a Triton kernel launch of the same size;
  - Op::run and a raw cuLaunchKernel of the same kernel, from C++ (bench_memory_ops --launch-only,
    run by this script in the same call).

  bench_python_overhead.py --bench-dir build/bench [--json out.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import tileops_jit as tj


def host_us(fn, calls=20000, rounds=7):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_round.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_round)


def triton_launch():
    """A Triton kernel of the same size, or None when Triton is missing."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
        tl.store(y_ptr + offsets, (x / (1 + tl.exp(-x))).to(tl.bfloat16), mask=mask)

    def launch(x, y):
        silu_kernel[(1,)](x, y, x.numel(), BLOCK=64)

    return launch


def cpp_figures(bench_dir):
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "launch.json")
        subprocess.run([os.path.join(bench_dir, "bench_memory_ops"), "--launch-only", "--json", out], check=True,
                       stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)["launch"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench-dir", required=True, help="the build's bench folder (bench_memory_ops)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    x = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    figures = {
        "tileops_jit.silu(x, out=y)": host_us(lambda: tj.silu(x, out=y)),
        "tileops_jit.silu(x)": host_us(lambda: tj.silu(x)),
        "tileops_jit._C.elementwise": host_us(lambda: tj._C.elementwise(tj._C.ElementwiseOp.silu, x, None, y)),
        "torch.nn.functional.silu(x)": host_us(lambda: torch.nn.functional.silu(x)),
    }
    launch = triton_launch()
    if launch is not None:
        figures["triton launch (cache hit)"] = host_us(lambda: launch(x, y), calls=5000)
    cpp = cpp_figures(args.bench_dir)
    figures["C++ Op::run"] = cpp["op_run_us"]
    figures["C++ cuLaunchKernel"] = cpp["raw_cuLaunchKernel_us"]
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "host_us_per_call": figures,
              "python_over_op_run_us": figures["tileops_jit.silu(x, out=y)"] - cpp["op_run_us"]}
    for name, us in figures.items():
        print(f"{name:34s} {us:6.2f} us")
    print(f"Python over Op::run: {result['python_over_op_run_us']:.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
