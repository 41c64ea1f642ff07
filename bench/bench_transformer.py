#!/usr/bin/env python3
"""The end-to-end benchmark: the transformer example (examples/transformer/transformer_run) on a
Llama-3 architecture config with random weights, against PyTorch implementations of the same
model in the same call (torch_llama_peers.py), as a markdown table.

    python3 bench/bench_transformer.py --build build --config tests/data/transformer/llama3_8b_config.json \\
        [--decode-batches 1,8,64] [--context 2048] [--prefill 8x2048] [--json out.json] [--no-torch]

Ours: one process a case. The first run fills the kernel cache (if cold); the cold-start row is
a second, warm-cache process: start to first token, and its parts.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def ours(args, lengths, steps, repeats, report):
    command = [os.path.join(args.build, "examples", "transformer_run"), "--config", args.config, "--random-weights", "1",
               "--prompt-lengths", lengths, "--steps", str(steps), "--prefill-repeats", str(repeats), "--report", report]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    with open(report) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--decode-batches", default="1,8,64")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--prefill", default="8x2048")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--json", default="")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-transformer-")
    batches = [int(b) for b in args.decode_batches.split(",") if b]
    results = {"ours": {}, "torch": {}}

    # Warm the kernel cache, then a warm-cache process for the cold start.
    ours(args, f"{args.context}", 1, 0, os.path.join(work, "warm.json"))
    results["ours"]["start"] = ours(args, f"{args.context}", 1, 0, os.path.join(work, "start.json"))
    for batch in batches:
        results["ours"][f"decode {batch}"] = ours(args, f"{args.context}x{batch}", args.steps, 0,
                                                   os.path.join(work, f"decode{batch}.json"))
    if args.prefill:
        prompts, tokens = args.prefill.split("x")
        results["ours"]["prefill"] = ours(args, f"{tokens}x{prompts}", 1, 5, os.path.join(work, "prefill.json"))
    if not args.no_torch:
        peer_json = os.path.join(work, "torch.json")
        subprocess.run([sys.executable, os.path.join(HERE, "torch_llama_peers.py"), "--config", args.config,
                        "--decode-batches", args.decode_batches, "--context", str(args.context), "--prefill",
                        args.prefill, "--json", peer_json], check=True)
        with open(peer_json) as f:
            results["torch"] = json.load(f)

    peers = {c["case"]: c for c in results["torch"].get("cases", [])}
    print(f"\n{results['ours']['start']['gpu']}, {os.path.basename(args.config)}, random bf16 weights\n")
    print("| case | ours | torch.compile | torch eager | ours vs compile | floor | ours / floor |")
    print("|---|---|---|---|---|---|---|")
    for batch in batches:
        mine = results["ours"][f"decode {batch}"]["decode_step_ms"]
        peer = peers.get(f"decode batch {batch}, context {args.context}", {})
        compiled, eager, floor = peer.get("compile_reduce_overhead_ms"), peer.get("eager_ms"), peer.get("floor_ms")
        print(f"| decode step, batch {batch}, {args.context} context | {mine:.3f} ms | "
              f"{compiled or float('nan'):.3f} ms | {eager or float('nan'):.3f} ms | "
              f"{(compiled or float('nan')) / mine:.2f}x | {floor or float('nan'):.3f} ms | "
              f"{mine / (floor or float('nan')):.2f}x |")
    if args.prefill:
        mine = results["ours"]["prefill"]["prefill_ms"]
        prompts, tokens = args.prefill.split("x")
        peer = peers.get(f"prefill {prompts} x {tokens}", {})
        cudnn, compiled = peer.get("eager_sdpa_cudnn_ms"), peer.get("compile_ms")
        print(f"| prefill {args.prefill} | {mine:.1f} ms | {compiled or float('nan'):.1f} ms | "
              f"{cudnn or float('nan'):.1f} ms (SDPA cuDNN) | {(compiled or float('nan')) / mine:.2f}x "
              f"(eager: {(cudnn or float('nan')) / mine:.2f}x) | | |")
    s = results["ours"]["start"]
    print(f"\nwarm-cache start to first token: {s['first_token_s']:.3f} s = runtime {s['runtime_start_s']:.3f} s + "
          f"weights {s['weights_s']:.3f} s ({s['weights_gb']:.1f} GB, random) + prepare {s['prepare_s']:.3f} s + "
          f"prefill {s['prefill_s']:.3f} s; {s['kernels_compiled']} kernels compiled, "
          f"{s['kernels_from_disk_cache']} from the disk cache")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
