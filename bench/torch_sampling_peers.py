#!/usr/bin/env python3
"""Times torch's sampling path on Sampling problems, named as bench_problems names them, on the
same GPU, with the parameters bench_problems fills (temperature 0.7, top-k 50, top-p 0.9).

    python3 bench/torch_sampling_peers.py --json torch_sampling.json \
        --problem "sampling 64x128256 fp32" [--problem "sampling 1x128256 fp32 greedy"]...

The peer is the usual torch path without a full sort: logits / temperature, topk, softmax of the
top k, top-p by a cumulative sum over them, multinomial; torch.argmax for greedy. Same method as
bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median. multinomial syncs
with the host, so its time moves between runs more than the others'.
"""
import torch

from torch_timing import run_problems, time_ms

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def sample_top_k_top_p(logits, temperature, top_k, top_p):
    scaled = logits.float() / temperature[:, None]
    values, indices = torch.topk(scaled, top_k, dim=-1)
    probs = values.softmax(-1)
    above = probs.cumsum(-1) - probs  # mass of the more probable tokens
    probs = probs.masked_fill(above >= top_p[:, None], 0.0)
    choice = torch.multinomial(probs, 1)
    return indices.gather(-1, choice).squeeze(-1)


def time_problem(text, repeats):
    parts = text.split()
    batch, vocab = (int(x) for x in parts[1].split("x"))
    greedy = len(parts) > 3 and parts[3] == "greedy"
    logits = (torch.rand(batch, vocab, device="cuda") * 4 - 2).to(DTYPES[parts[2]])
    temperature = torch.full((batch,), 0.7, device="cuda")
    top_p = torch.full((batch,), 0.9, device="cuda")
    with torch.no_grad():
        if greedy:
            ms = time_ms(lambda: logits.argmax(-1), repeats)
        else:
            ms = time_ms(lambda: sample_top_k_top_p(logits, temperature, min(50, vocab), top_p), repeats)
    return {"problem": text, "torch_us": ms * 1e3}


def main():
    run_problems(time_problem, "sampling BxV DTYPE [greedy]",
                 lambda row: f"{row['problem']:<40} torch {row['torch_us']:8.1f} us")


if __name__ == "__main__":
    main()
