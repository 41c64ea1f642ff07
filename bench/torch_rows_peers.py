#!/usr/bin/env python3
"""Times torch eager and torch.compile on row-op and elementwise problems named as tileops-tune
names them, for sweep_peers.py --family rows.

    python3 bench/torch_rows_peers.py --problem "softmax 8x50257 bf16" [--problem ...] --json out.json

Same method as torch_peers.py (its functions, CUDA events, L2 flushed, median); each case records
eager_us, compile_us and best_us, the faster of the two.
"""
import argparse
import json

import torch

from torch_peers import DTYPES, OPS
from torch_timing import time_ms

for limit_name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, limit_name):
        setattr(torch._dynamo.config, limit_name, 256)


def parse(problem):
    """("softmax", rows, cols, "bf16") of "softmax 8x50257 bf16" ("rmsnorm_residual" for
    "rmsnorm ... residual")."""
    op, shape, dtype, *flags = problem.split()
    if op == "rmsnorm" and "residual" in flags:
        op = "rmsnorm_residual"
    rows, cols = (int(d) for d in shape.split("x"))
    if op not in OPS or dtype not in DTYPES:
        raise ValueError(f"not a row or elementwise problem torch_peers knows: {problem!r}")
    return op, rows, cols, dtype


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", action="append", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    compiled = {}
    cases = []
    for problem in args.problem:
        op, rows, cols, dname = parse(problem)
        fn, n_in, _, n_vec = OPS[op]
        if op not in compiled:
            compiled[op] = torch.compile(fn, dynamic=False)
        dtype = DTYPES[dname]
        inputs = [torch.rand(rows, cols, device="cuda", dtype=dtype) * 4 - 2 for _ in range(n_in)]
        inputs += [torch.rand(cols, device="cuda", dtype=dtype) + 0.5 for _ in range(n_vec)]
        with torch.no_grad():
            eager = time_ms(lambda: fn(*inputs), args.repeats) * 1e3
            compile_us = time_ms(lambda: compiled[op](*inputs), args.repeats) * 1e3
        cases.append({"problem": problem, "eager_us": eager, "compile_us": compile_us,
                      "best_us": min(eager, compile_us)})
        print(f"{problem:<36} eager {eager:9.1f} us  compile {compile_us:9.1f} us", flush=True)
        del inputs
    with open(args.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": cases}, f, indent=2)


if __name__ == "__main__":
    main()
