#!/usr/bin/env python3
"""Times torch's sampling path on the problems bench_problems times for Sampling (vocab 128256,
temperature 0.7, top-k 50, top-p 0.9, as OperandBuffers fills them), on the same GPU.

    python3 bench/torch_sampling_peers.py --json torch_sampling.json [--batches 1,8,64,256] [--dtype fp32]

The peer is the usual torch path without a full sort: logits / temperature, topk, softmax of the
top k, top-p by a cumulative sum over them, multinomial; and torch.argmax for greedy. Same method
as bench_problems: CUDA events, warm-up, L2 flushed before each timed run, median.
"""
import argparse
import json

import torch

from torch_timing import time_ms


def sample_top_k_top_p(logits, temperature, top_k, top_p):
    scaled = logits.float() / temperature[:, None]
    values, indices = torch.topk(scaled, top_k, dim=-1)
    probs = values.softmax(-1)
    above = probs.cumsum(-1) - probs  # mass of the more probable tokens
    probs = probs.masked_fill(above >= top_p[:, None], 0.0)
    choice = torch.multinomial(probs, 1)
    return indices.gather(-1, choice).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batches", default="1,8,64,256")
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    args = parser.parse_args()
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    results = []
    for batch in (int(b) for b in args.batches.split(",")):
        logits = (torch.rand(batch, args.vocab, device="cuda") * 4 - 2).to(dtype)
        temperature = torch.full((batch,), 0.7, device="cuda")
        top_p = torch.full((batch,), 0.9, device="cuda")
        row = {"batch": batch, "vocab": args.vocab, "dtype": args.dtype}
        with torch.no_grad():
            row["sample_us"] = time_ms(lambda: sample_top_k_top_p(logits, temperature, 50, top_p), args.repeats) * 1e3
            row["argmax_us"] = time_ms(lambda: logits.argmax(-1), args.repeats) * 1e3
        results.append(row)
        print(f"sampling {batch}x{args.vocab} {args.dtype}: top-k/top-p {row['sample_us']:8.1f} us   "
              f"argmax {row['argmax_us']:8.1f} us", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": results}, f,
                          indent=2)


if __name__ == "__main__":
    main()
