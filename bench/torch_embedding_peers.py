#!/usr/bin/env python3
"""Times torch's embedding on Embedding problems, named as bench_problems names them, on the same
GPU: F.embedding (the gather), plus the position table's rows added for positionsN (GPT-2's
wte(ids) + wpe(positions)), eager and under torch.compile.

    python3 bench/torch_embedding_peers.py --json torch_embedding.json \\
        --problem "embedding 8192x128256x4096 bf16" [--problem "embedding 512x50257x768 fp32 positions1024"]...

Same method as bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import torch
import torch.nn.functional as F

from torch_timing import run_problems, time_ms

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def time_problem(text, repeats):
    parts = text.split()
    tokens, vocab, hidden = (int(x) for x in parts[1].split("x"))
    dtype = DTYPES[parts[2].split("->")[0]]
    positions = int(parts[3][len("positions"):]) if len(parts) > 3 else 0
    table = torch.randn(vocab, hidden, device="cuda").to(dtype)
    ids = torch.randint(0, vocab, (tokens,), device="cuda")
    if positions:
        position_table = torch.randn(positions, hidden, device="cuda").to(dtype)
        pos = torch.randint(0, positions, (tokens,), device="cuda")
        fn = lambda: F.embedding(ids, table) + F.embedding(pos, position_table)  # noqa: E731
    else:
        fn = lambda: F.embedding(ids, table)  # noqa: E731
    with torch.no_grad():
        eager = time_ms(fn, repeats)
        compiled = torch.compile(fn)
        compile_ms = time_ms(compiled, repeats)
    return {"problem": text, "eager_us": eager * 1e3, "compile_us": compile_ms * 1e3}


def main():
    run_problems(time_problem, "embedding TxVxH DTYPE [positionsN]",
                 lambda row: f"{row['problem']:<50} eager {row['eager_us']:8.1f} us  compile {row['compile_us']:8.1f} us")


if __name__ == "__main__":
    main()
