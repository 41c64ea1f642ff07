#!/usr/bin/env python3
"""A seeded sweep of real-model shapes for a family, ours (bench_problems) against its torch peer
in the same run, worst ratio first.

    python3 bench/sweep_peers.py --family rope|sampling|embedding|rows|gemm_fp8|quantize|moe_routing [--seed 1]
                                 [--bench build-gpu/bench/bench_problems] [--json sweep.json] [--list]

rope: Llama 3 8B / 70B, Qwen 2.5 7B / 0.5B, Phi-3 mini, Gemma 2 9B, GPT-NeoX 20B (24 of 96 dims
rotate), GPT-J (interleaved, 64 of 256), at token counts drawn from decode steps to long prefills,
with and without the paged append (and an fp8 cache). sampling: the vocabularies of Llama 2 / 3,
Phi-3, GPT-2, Qwen 2.5 and Gemma at batches of 1 to 256, fp32 and bf16 logits, greedy too.
embedding: the tables (vocabulary x hidden) of the same models and GPT-2's learned positions, at
token counts from a decode step to a long prefill, bf16, fp16 and fp32. rows: row ops (norms over
the hidden size, softmax over the vocabulary) and elementwise ops (over the intermediate size) of
25 model families, 250 problems, against the faster of torch eager and torch.compile
(torch_rows_peers.py). gemm_fp8: squares 1024-16384 and the projections of Llama-3-8B / 70B
and DeepSeek-V3 at M from 1 to 8192, per-tensor, row and block scales, against torch._scaled_mm
(cuBLASLt), reported in TFLOP/s. quantize: fp8 e4m3 quantization of the activations entering
FP8 GEMMs (the hidden and intermediate sizes of Llama-3-8B / 70B, DeepSeek-V3, Qwen 2.5 72B and
a 5120-wide model) at token counts from a decode batch to a long prefill, plus 4096x4096 and
16384x7168, per token, per 1x128 block and per tensor (computed and static), against torch's
amax + division + cast, eager and torch.compile (torch_quantize_peers.py). moe_routing: the
router top-k, permute and unpermute of Mixtral (8 experts, k 2), Qwen3-30B-A3B (128, k 8) and
DeepSeek-V3 (256, k 8, grouped, biased) at 1 to 16384 tokens (the masked layout drawn at decode
sizes, fp8 codes drawn for DeepSeek-V3's permute), against the faster of torch eager and
torch.compile (torch_moe_routing_peers.py; its --skewed mode times the chains on skewed logits).
--list prints a family's problems without running them.
"""
import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

ROPE_MODELS = [  # heads, kv heads, head dim, flags besides the append
    (32, 8, 128, ""), (64, 8, 128, ""), (28, 4, 128, ""), (14, 2, 64, ""), (32, 32, 96, ""),
    (16, 8, 256, ""), (64, 64, 96, "rot24"), (16, 16, 256, "rot64,gptj"),
]
ROPE_TOKENS = [1, 3, 8, 33, 64, 255, 1000, 2048, 3001, 8192, 16384]
VOCABS = [32000, 32064, 50257, 128256, 151936, 256000]
BATCHES = [1, 2, 5, 16, 48, 100, 256]
EMBEDDING_MODELS = [  # vocabulary, hidden, learned positions
    (128256, 4096, 0), (128256, 8192, 0), (152064, 3584, 0), (151936, 896, 0), (32064, 3072, 0),
    (256000, 3584, 0), (50257, 768, 1024), (50257, 1600, 1024),
]
EMBEDDING_TOKENS = [1, 7, 64, 255, 1000, 2048, 4097, 8192, 16384]


def rope_problems(rng):
    problems = []
    for heads, kv_heads, dim, flags in ROPE_MODELS:
        for tokens in sorted(rng.sample(ROPE_TOKENS, 3)):
            extra = [flags] if flags else []
            append = rng.random() < 0.75
            if append:
                extra.append("page16")
                if rng.random() < 0.25:
                    extra.append("kv_fp8")
            problems.append(f"rope {tokens}x{heads}x{kv_heads}x{dim} bf16 {','.join(extra)}".strip())
    return problems


def sampling_problems(rng):
    problems = []
    for vocab in VOCABS:
        for batch in sorted(rng.sample(BATCHES, 3)):
            dtype = rng.choice(["fp32", "bf16"])
            problems.append(f"sampling {batch}x{vocab} {dtype}" + (" greedy" if rng.random() < 0.2 else ""))
    return problems


def embedding_problems(rng):
    problems = []
    for vocab, hidden, positions in EMBEDDING_MODELS:
        for tokens in sorted(rng.sample(EMBEDDING_TOKENS, 3)):
            dtype = rng.choice(["bf16", "bf16", "fp16", "fp32"])
            flags = f" positions{positions}" if positions else ""
            problems.append(f"embedding {tokens}x{vocab}x{hidden} {dtype}{flags}")
    return problems


# (hidden, intermediate, vocabulary) of 25 public model families.
ROW_MODELS = {
    "llama-3-8b": (4096, 14336, 128256), "llama-3-70b": (8192, 28672, 128256), "llama-2-7b": (4096, 11008, 32000),
    "mistral-7b": (4096, 14336, 32000), "qwen2.5-7b": (3584, 18944, 152064), "qwen2.5-0.5b": (896, 4864, 151936),
    "qwen2.5-72b": (8192, 29568, 152064), "phi-3-mini": (3072, 8192, 32064), "phi-2": (2560, 10240, 51200),
    "gemma-2-9b": (3584, 14336, 256000), "gemma-2b": (2048, 16384, 256000), "gpt-2": (768, 3072, 50257),
    "gpt-2-xl": (1600, 6400, 50257), "gpt-neox-20b": (6144, 24576, 50432), "falcon-7b": (4544, 18176, 65024),
    "bloom-7b": (4096, 16384, 250880), "opt-6.7b": (4096, 16384, 50272), "flan-t5-xl": (2048, 5120, 32128),
    "whisper-large": (1280, 5120, 51865), "deepseek-v2-lite": (2048, 10944, 102400),
    "starcoder2-15b": (6144, 24576, 49152), "yi-34b": (7168, 20480, 64000), "mpt-7b": (4096, 16384, 50432),
    "bert-large": (1024, 4096, 30522), "internlm2-7b": (4096, 14336, 92544),
}
ROW_TOKENS = [1, 3, 17, 64, 255, 1000, 2048, 4097, 8192, 16384]  # decode steps to long prefills
LOGIT_ROWS = [1, 2, 5, 16, 48, 100, 256, 1024]  # sampled sequences: the vocabulary's softmax rows


GEMM_FP8_SQUARES = [1024, 2048, 4096, 8192, 16384]
GEMM_FP8_PROJECTIONS = [  # N x K of Llama-3-8B and 70B and DeepSeek-V3's layers
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192), (57344, 8192),
    (8192, 28672), (7168, 2048), (2048, 7168), (24576, 7168), (7168, 16384),
]
GEMM_FP8_TOKENS = [1, 16, 64, 128, 512, 2048, 8192]


def gemm_fp8_problems(rng):
    problems = [f"gemm_fp8 {s}x{s}x{s} fp8_e4m3->bf16 tensor" for s in GEMM_FP8_SQUARES]
    for n, k in GEMM_FP8_PROJECTIONS:
        for m in sorted(rng.sample(GEMM_FP8_TOKENS, 3)):
            problems.append(f"gemm_fp8 {m}x{n}x{k} fp8_e4m3->bf16 {rng.choice(['tensor', 'row', 'block'])}")
    return problems


def rows_problems(rng):
    """Ten problems a model: norms over the hidden size, the gated activation over the
    intermediate size, softmax over the vocabulary, each at a drawn token count and dtype."""
    problems = []
    for hidden, intermediate, vocab in ROW_MODELS.values():
        for _ in range(10):
            op = rng.choice(["rmsnorm", "rmsnorm", "layernorm", "rmsnorm_residual", "silu_mul", "gelu", "add",
                             "softmax", "softmax", "log_softmax"])
            dtype = rng.choice(["bf16", "bf16", "fp32"])
            if op in ("softmax", "log_softmax"):
                shape = f"{rng.choice(LOGIT_ROWS)}x{vocab}"
            else:
                cols = intermediate if op in ("silu_mul", "gelu") else hidden
                shape = f"{rng.choice(ROW_TOKENS)}x{cols}"
            flags = " residual" if op == "rmsnorm_residual" else ""
            problems.append(f"{op.replace('_residual', '')} {shape} {dtype}{flags}")
    return problems


QUANTIZE_MODELS = [(4096, 14336), (8192, 28672), (7168, 18432), (8192, 29568), (5120, 13824)]  # hidden, intermediate
QUANTIZE_TOKENS = [1, 16, 128, 1000, 4096, 8192, 16384]
QUANTIZE_SCALINGS = ["per_token", "block_1x128", "per_tensor", "per_tensor_static"]


def quantize_problems(rng):
    """The serving sizes of issue 34 under every scaling, then two drawn problems a model."""
    problems = [f"quantize {shape} bf16->fp8_e4m3 {scaling}" for shape in ("4096x4096", "16384x7168")
                for scaling in QUANTIZE_SCALINGS]
    for hidden, intermediate in QUANTIZE_MODELS:
        for tokens in sorted(rng.sample(QUANTIZE_TOKENS, 2)):
            cols = rng.choice([hidden, intermediate])
            dtype = rng.choice(["bf16", "bf16", "fp16"])
            problems.append(f"quantize {tokens}x{cols} {dtype}->fp8_e4m3 {rng.choice(QUANTIZE_SCALINGS)}")
    return problems


# (experts, k, hidden, top-k flags) of Mixtral, Qwen3-30B-A3B and DeepSeek-V3.
MOE_MODELS = [(8, 2, 4096, "softmax,renorm"), (128, 8, 2048, "softmax,renorm"),
              (256, 8, 7168, "sigmoid,renorm,group8,topk_group4,bias")]
MOE_TOKENS = [1, 16, 64, 512, 4096, 16384]


def moe_routing_problems(rng):
    """Each model's three ops at every token count; decode sizes drawn masked (capacity = tokens:
    no drops), DeepSeek-V3's permute drawn with fp8 codes."""
    problems = []
    for experts, k, hidden, flags in MOE_MODELS:
        for tokens in MOE_TOKENS:
            problems.append(f"moe_topk {tokens}x{experts}x{k} bf16 {flags}")
            masked = tokens <= 64 and rng.random() < 0.5
            dtype = "fp8_e4m3" if experts == 256 and rng.random() < 0.3 else "bf16"
            problems.append(f"moe_permute {tokens}x{hidden}x{experts}x{k} {dtype}" + (f" capacity{tokens}" if masked else ""))
            problems.append(f"moe_unpermute {tokens}x{hidden}x{k} bf16" + (f" rows{experts * tokens}" if masked else ""))
    return problems


PROBLEMS = {"rope": rope_problems, "sampling": sampling_problems, "embedding": embedding_problems,
            "rows": rows_problems, "gemm_fp8": gemm_fp8_problems, "quantize": quantize_problems,
            "moe_routing": moe_routing_problems}
# The peer's figure each family compares with.
PEER = {"rope": ("compile_us", "torch.compile"), "sampling": ("torch_us", "torch"),
        "embedding": ("compile_us", "torch.compile"), "rows": ("best_us", "the faster of torch eager and torch.compile"),
        "gemm_fp8": ("scaled_mm_us", "torch._scaled_mm"), "quantize": ("compile_us", "torch.compile"),
        "moe_routing": ("best_us", "the faster of torch eager and torch.compile")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", required=True, choices=sorted(PROBLEMS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bench", default="build-gpu/bench/bench_problems")
    parser.add_argument("--json", default="")
    parser.add_argument("--list", action="store_true", help="print the problems and stop")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    problems = PROBLEMS[args.family](rng)
    if args.list:
        print("\n".join(problems))
        return
    flags = [a for p in problems for a in ("--problem", p)]
    ours_json, peer_json = args.json + ".ours.tmp", args.json + ".peer.tmp"
    subprocess.run([args.bench, *flags, "--json", ours_json], check=True, stdout=subprocess.DEVNULL)
    peer = os.path.join(HERE, f"torch_{args.family}_peers.py")
    subprocess.run([sys.executable, peer, *flags, "--json", peer_json], check=True, stdout=subprocess.DEVNULL)
    ours = json.load(open(ours_json))
    peers = {c["problem"]: c for c in json.load(open(peer_json))["cases"]}
    rows = []
    for text, result in zip(problems, ours["results"]):
        peer_case = peers[text]
        peer_us = peer_case[PEER[args.family][0]]
        if peer_us is None:  # the peer cannot run it (says why in its JSON)
            print(f"{text}: the peer failed: {peer_case.get('error', '')}")
            continue
        rows.append({"problem": text, "us": result["median_us"], "peer_us": peer_us,
                     "speedup": peer_us / result["median_us"], "fraction_of_copy": result["fraction_of_copy"],
                     "config": result.get("config", "")})
    rows.sort(key=lambda r: r["speedup"])
    peer_name = PEER[args.family][1]
    print(f"{ours['device']}, copy {ours['copy_gbps']:.0f} GB/s; seed {args.seed}; peer {peer_name}, same run")
    # GEMMs are measured in TFLOP/s (M x N x K from the shape), the others against the copy bandwidth.
    gemm = args.family.startswith("gemm")
    print(f"| problem | ours us | {peer_name} us | speed-up | {'TFLOP/s' if gemm else '% of copy'} |\n|---|---|---|---|---|")
    for r in rows:
        if gemm:
            m, n, k = (int(x) for x in r["problem"].split()[1].split("x")[-3:])
            last = f"{2.0 * m * n * k / r['us'] / 1e6:.0f}"
        else:
            last = f"{100 * r['fraction_of_copy']:.1f}%"
        print(f"| {r['problem']} | {r['us']:.1f} | {r['peer_us']:.1f} | {r['speedup']:.2f}x | {last} |")
    if args.json:
        json.dump({"device": ours["device"], "seed": args.seed, "family": args.family, "rows": rows},
                  open(args.json, "w"), indent=2)
    for path in (ours_json, peer_json):
        os.remove(path)


if __name__ == "__main__":
    main()
