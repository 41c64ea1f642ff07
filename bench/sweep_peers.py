#!/usr/bin/env python3
"""A seeded sweep of real-model shapes for a family, ours (bench_problems) against its torch peer
in the same run, worst ratio first.

    python3 bench/sweep_peers.py --family rope|sampling|embedding|rows|gemm_fp8|quantize|moe_routing|gemm|prefill
                                 [--seed 1] [--bench build-gpu/bench/bench_problems] [--json sweep.json] [--list]
    PYTHONPATH=build-gpu/python python3 bench/sweep_peers.py --family decode|mla|gemm_grouped [--seed 1] [--json F]

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
mla: MLA decode batches of DeepSeek-V2 / V3, DeepSeek-V2-Lite and Kimi K2 at the heads one GPU
holds under tensor parallelism (8-128), the lengths, caches and query tokens drawn as for decode,
against the copy bandwidth (bench_decode_lengths.py). gemm_grouped: the experts' gate+up or down
projection of 24 mixture-of-experts models as one GPU holds them, at 16-16384 tokens with uneven
loads, against torch._grouped_mm (bench_gemm_grouped.py --problem). --list prints a family's problems without
running them. --recheck-below X re-times the problems
below X times the peer in --recheck-rounds alternating rounds of ours and the peer, each side's
median kept: a single run's ratio on a problem of a few microseconds is decided by the offset of
the process that timed it.
"""
import argparse
import json
import os
import random
import subprocess
import sys
from statistics import median

from model_configs import ATTENTION_MODELS, MODELS, MOE_MODELS
from sweep_report import plot, print_summary, summary

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
    for m in MODELS.values():
        def draw():
            op = rng.choice(["rmsnorm", "rmsnorm", "layernorm", "rmsnorm_residual", "silu_mul", "gelu", "add",
                             "softmax", "softmax", "log_softmax"])
            dtype = rng.choice(["bf16", "bf16", "fp32"])
            if op in ("softmax", "log_softmax"):
                shape = f"{rng.choice(LOGIT_ROWS)}x{m.vocab}"
            else:
                cols = m.intermediate if op in ("silu_mul", "gelu") else m.hidden
                shape = f"{rng.choice(ROW_TOKENS)}x{cols}"
            flags = " residual" if op == "rmsnorm_residual" else ""
            return f"{op.replace('_residual', '')} {shape} {dtype}{flags}"
        add_distinct(problems, draw, 10)
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
ROUTING_MODELS = [(8, 2, 4096, "softmax,renorm"), (128, 8, 2048, "softmax,renorm"),
                  (256, 8, 7168, "sigmoid,renorm,group8,topk_group4,bias")]
MOE_TOKENS = [1, 16, 64, 512, 4096, 16384]


def moe_routing_problems(rng):
    """Each model's three ops at every token count; decode sizes drawn masked (capacity = tokens:
    no drops), DeepSeek-V3's permute drawn with fp8 codes."""
    problems = []
    for experts, k, hidden, flags in ROUTING_MODELS:
        for tokens in MOE_TOKENS:
            problems.append(f"moe_topk {tokens}x{experts}x{k} bf16 {flags}")
            masked = tokens <= 64 and rng.random() < 0.5
            dtype = "fp8_e4m3" if experts == 256 and rng.random() < 0.3 else "bf16"
            problems.append(f"moe_permute {tokens}x{hidden}x{experts}x{k} {dtype}" + (f" capacity{tokens}" if masked else ""))
            problems.append(f"moe_unpermute {tokens}x{hidden}x{k} bf16" + (f" rows{experts * tokens}" if masked else ""))
    return problems


def add_distinct(problems, draw, count):
    """Appends `count` problems from draw() that `problems` does not hold yet (a seeded draw may
    repeat itself, and models share layers)."""
    goal = len(problems) + count
    while len(problems) < goal:
        problem = draw()  # None: drawn too large
        if problem and problem not in problems:
            problems.append(problem)


GEMM_TOKENS = [1, 3, 16, 64, 128, 255, 512, 1000, 2048, 4097, 8192, 16384]  # decode batches to long prefills


def gemm_layers(m):
    """N x K of a model's linear layers, weights N x K as nn.Linear holds them."""
    qkv = m.heads * m.head_dim + m.kv_heads * (m.head_dim + m.head_dim_v)
    return {"qkv": (qkv, m.hidden), "o": (m.hidden, m.heads * m.head_dim_v), "up": (m.intermediate, m.hidden),
            "gate_up": (2 * m.intermediate, m.hidden), "down": (m.hidden, m.intermediate), "lm_head": (m.vocab, m.hidden)}


def gemm_problems(rng):
    """Eight problems a model: a drawn linear layer (x W^T, B as N x K) at a drawn token count."""
    problems = []
    for m in MODELS.values():
        layers = gemm_layers(m)

        def draw():
            n, k = layers[rng.choice(sorted(layers))]
            return f"gemm {rng.choice(GEMM_TOKENS)}x{n}x{k} {rng.choice(['bf16', 'bf16', 'bf16', 'fp16'])} nt"
        add_distinct(problems, draw, 8)
    return problems


PREFILL_MIXES = [(1, 16384), (2, 8192), (4, 4096), (8, 2048), (16, 1024), (32, 512), (64, 256), (1, 1000), (3, 3001),
                 (2, 777), (1, 128), (8, 200)]  # batch x prompt length
ENCODERS = {"bert-large", "eva02-clip-e", "qwen2-vl-vision"}  # bidirectional attention only


def prefill_problems(rng):
    """Seven problems a model: its heads at a drawn batch x prompt length, causal (decoders, mostly)
    or not."""
    problems = []
    for name, m in ATTENTION_MODELS.items():
        def draw():
            batch, seqlen = rng.choice(PREFILL_MIXES)
            flags = [] if name in ENCODERS or rng.random() < 0.25 else ["causal"]
            if m.head_dim_v != m.head_dim:
                flags.append(f"dv{m.head_dim_v}")
            dtype = rng.choice(["bf16", "bf16", "bf16", "fp16"])
            return (f"flash_attention {batch}x{m.heads}x{m.kv_heads}x{m.head_dim}x{seqlen}x{seqlen} {dtype} "
                    f"{','.join(flags)}".strip())
        add_distinct(problems, draw, 7)
    return problems


DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
DECODE_LONGEST = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]  # the longest sequence of a batch
DECODE_KINDS = ["uniform", "one_long", "long_tail", "ragged"]  # bench_decode_lengths.py draws the lengths


def decode_problems(rng):
    """Eight problems a decoder model (DeepSeek's 192/128 heads decode through MLA): a drawn batch,
    longest sequence and spread of lengths, cache layout (contiguous, pages of 16 or 64, fp8 at
    times), 1 or 4 query tokens; at most 16 GB of KV."""
    problems = []
    for name, m in ATTENTION_MODELS.items():
        if name in ENCODERS or m.head_dim_v != m.head_dim:
            continue

        def draw():
            batch, longest = rng.choice(DECODE_BATCHES), rng.choice(DECODE_LONGEST)
            kv_fp8 = rng.random() < 0.15
            if batch * longest * 2 * m.kv_heads * m.head_dim * (1 if kv_fp8 else 2) > 16e9:
                return None
            flags = [rng.choice(["", "", "page16", "page16", "page64"])] + (["kv_fp8"] if kv_fp8 else [])
            q_len = rng.choice([1, 1, 1, 1, 1, 4])
            dtype = rng.choice(["bf16", "bf16", "bf16", "fp16"])
            return (f"decode_attention {batch}x{m.heads}x{m.kv_heads}x{m.head_dim}x{q_len}x{longest} {dtype} "
                    f"{','.join(f for f in flags if f)} {rng.choice(DECODE_KINDS)}").replace("  ", " ")
        add_distinct(problems, draw, 8)
    return problems


# Query heads a GPU holds of the models that decode through MLA: DeepSeek-V2 / V3 (128) whole and
# split over 2, 4, 8 or 16 GPUs, DeepSeek-V2-Lite (16), Kimi K2 (64) whole and over 8 GPUs.
MLA_HEADS = [128, 64, 32, 16, 8]


def mla_problems(rng):
    """200 MLA decode batches: heads as a GPU holds them, a drawn batch, longest sequence and spread
    of lengths, one or two query tokens (multi-token prediction), a contiguous latent cache or pages
    of 16 or 64 tokens, bf16 or fp16; at most 16 GB of cache."""
    def draw():
        batch, longest = rng.choice(DECODE_BATCHES), rng.choice(DECODE_LONGEST)
        if batch * longest * 576 * 2 > 16e9:
            return None
        page = rng.choice(["", "page16", "page64", "page64"])
        dtype = rng.choice(["bf16", "bf16", "bf16", "fp16"])
        q_len = rng.choice([1, 1, 1, 2])
        return (f"mla_decode {batch}x{rng.choice(MLA_HEADS)}x{q_len}x{longest} {dtype} {page} "
                f"{rng.choice(DECODE_KINDS)}").replace("  ", " ")
    problems = []
    add_distinct(problems, draw, 200)
    return problems


GROUPED_TOKENS = [16, 64, 128, 512, 1000, 2048, 4096, 8192, 16384]  # tokens one step routes


def gemm_grouped_problems(rng):
    """Nine contiguous grouped GEMMs a mixture-of-experts model (24 of them): the gate+up or the
    down projection of its experts at a drawn token count, as one GPU holds them: every expert
    whole, the intermediate split over 2, 4 or 8 GPUs (tensor parallelism), or, from 64 experts, an
    eighth of the experts with an eighth of the rows (expert parallelism); bf16, at most 16 GB of
    weights."""
    problems = []
    for m in MOE_MODELS.values():
        def draw():
            split = rng.choice(["tp1", "tp2", "tp4", "tp8"] + (["ep8"] if m.experts >= 64 else []))
            experts, intermediate, rows = m.experts, m.intermediate, rng.choice(GROUPED_TOKENS) * m.top_k
            if split == "ep8":
                experts, rows = experts // 8, max(rows // 8, 1)
            else:
                intermediate //= int(split[2:])
            n, k = (2 * intermediate, m.hidden) if rng.random() < 0.5 else (m.hidden, intermediate)
            if experts * n * k * 2 > 16e9:
                return None
            return f"gemm_grouped {experts}x{rows}x{n}x{k} bf16"
        add_distinct(problems, draw, 9)
    return problems


PROBLEMS = {"rope": rope_problems, "sampling": sampling_problems, "embedding": embedding_problems,
            "rows": rows_problems, "gemm_fp8": gemm_fp8_problems, "quantize": quantize_problems,
            "moe_routing": moe_routing_problems, "gemm": gemm_problems, "prefill": prefill_problems,
            "decode": decode_problems, "mla": mla_problems, "gemm_grouped": gemm_grouped_problems}
# The peer's figure each family compares with.
PEER = {"rope": ("compile_us", "torch.compile"), "sampling": ("torch_us", "torch"),
        "embedding": ("compile_us", "torch.compile"), "rows": ("best_us", "the faster of torch eager and torch.compile"),
        "gemm_fp8": ("scaled_mm_us", "torch._scaled_mm"), "quantize": ("compile_us", "torch.compile"),
        "moe_routing": ("best_us", "the faster of torch eager and torch.compile"),
        "gemm": ("cublas_us", "cuBLAS (torch F.linear)"), "prefill": ("cudnn_us", "SDPA cuDNN"),
        "decode": ("copy_us", "a copy of the same bytes"), "mla": ("copy_us", "a copy of the same bytes"),
        "gemm_grouped": ("grouped_mm_us", "torch._grouped_mm")}
# Each family's target as the issue states it: the least speed-up on any shape.
TARGET = {"gemm": 0.95, "prefill": 0.9, "decode": 0.85, "mla": 0.85, "gemm_grouped": 0.95}
# Families timed against the copy bandwidth of the same run (bench_decode_lengths.py), not a peer.
COPY_PEERED = {"decode", "mla"}


# MLA's latent keys: 576 dims scored, the first 512 of them the values.
MLA_SCORE_DIMS, MLA_VALUE_DIMS = 576, 512
# Query heads from which MLA decode is bound by the tensor cores, not by the bytes (a cached token
# costs 1152 bytes and heads x 2 x 1088 flops: 128 heads are 242 flops a byte, near an H100's or
# H200's balance; docs/perf/mla_decode.md). The copy target is about the batches below it.
MLA_TENSOR_BOUND_HEADS = 128


def tflops(family, problem, us, lengths=None):
    """Tensor-core throughput of a GEMM (M x N x K; grouped: all groups' rows x N x K), prefill
    problem (causal halves it) or MLA decode batch (every query token of every head scores and sums
    the keys its sequence holds: needs the batch's `lengths`), else None."""
    words = problem.split()
    dims = [int(x) for x in words[1].split("x")]
    if family.startswith("gemm"):
        m, n, k = dims[-3:]
        return 2.0 * m * n * k / us / 1e6
    if family == "prefill":
        batch, heads, _, head_dim, seqlen_q, seqlen_k = dims
        flags = words[3].split(",") if len(words) > 3 else []
        head_dim_v = next((int(f[2:]) for f in flags if f.startswith("dv")), head_dim)
        flops = 2.0 * batch * heads * seqlen_q * seqlen_k * (head_dim + head_dim_v) * (0.5 if "causal" in flags else 1.0)
        return flops / us / 1e6
    if family == "mla" and lengths is not None:
        _, heads, q_len, _ = dims
        return 2.0 * heads * q_len * sum(lengths) * (MLA_SCORE_DIMS + MLA_VALUE_DIMS) / us / 1e6
    return None


def problem_flags(problems):
    return [a for p in problems for a in ("--problem", p)]


def time_ours(args, problems, repeats, path):
    """{problem: bench_problems' result} of one run over `problems` (its whole JSON stays in `path`)."""
    subprocess.run([args.bench, *problem_flags(problems), *repeats, "--json", path], check=True, stdout=sys.stderr)
    with open(path) as f:
        return dict(zip(problems, json.load(f)["results"]))


def time_peer(args, problems, repeats, path):
    """{problem: the peer script's case} of one run over `problems` (past --peer-timeout, those it
    timed: it saves its cases as it goes)."""
    if os.path.exists(path):
        os.remove(path)
    peer = os.path.join(HERE, f"torch_{args.family}_peers.py")
    try:
        subprocess.run([sys.executable, peer, *problem_flags(problems), *repeats, "--json", path], check=True,
                       stdout=sys.stderr, timeout=args.peer_timeout or None)
    except subprocess.TimeoutExpired:
        print(f"the peer ran out of its {args.peer_timeout} s; reporting the problems it timed", file=sys.stderr)
    return {c["problem"]: c for c in json.load(open(path))["cases"]} if os.path.exists(path) else {}


def sweep_row(args, text, result, peer_case):
    """A row of the report: ours against the peer's figure (None where the peer has none)."""
    peer_us = peer_case.get(PEER[args.family][0])
    if peer_us is None:
        return None
    return {"problem": text, "us": result["median_us"], "peer_us": peer_us, "speedup": peer_us / result["median_us"],
            "fraction_of_copy": result["fraction_of_copy"], "tflops": tflops(args.family, text, result["median_us"]),
            "config": result.get("config", ""), "peer": peer_case}


def report_rows(args, timed):
    """The rows of (problem, our result, the peer's case) triples; a problem the peer cannot run
    (its case says why) is named and left out."""
    rows = []
    for text, result, peer_case in timed:
        row = sweep_row(args, text, result, peer_case)
        if row is None:
            print(f"{text}: the peer failed: {peer_case.get('error', '')}")
            continue
        rows.append(row)
    return rows


def peer_rows(args, problems, repeats, ours_json, peer_json):
    """Ours through bench_problems, the peer through its torch script, each on every problem."""
    ours = time_ours(args, problems, repeats, ours_json)
    peers = time_peer(args, problems, repeats, peer_json)
    return report_rows(args, [(text, ours[text], peers[text]) for text in problems if text in peers])


def median_case(cases):
    """One case of the peer's whose figures are the medians of `cases`' (None where a run had none)."""
    merged = dict(cases[0])
    for key, value in cases[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures = [c.get(key) for c in cases]
            merged[key] = median(figures) if all(isinstance(f, (int, float)) for f in figures) else None
    # The faster of two peers: the faster of their medians, not the median of each run's faster.
    if "best_us" in merged and merged.get("eager_us") is not None and merged.get("compile_us") is not None:
        merged["best_us"] = min(merged["eager_us"], merged["compile_us"])
    return merged


def recheck(args, rows, repeats, ours_json, peer_json):
    """Re-times the rows below --recheck-below: --recheck-rounds rounds of ours and the peer in turn,
    each a fresh process over just those problems (who goes first alternates), and keeps each
    side's median over the rounds. Below about 5 us a process's own offset (0.3-0.4 us, the same
    on every problem it times) decides a single run's ratio; the rounds spread it over both sides.
    The first pass stays in each row as `first_pass`."""
    doubtful = [r for r in rows if r["speedup"] < args.recheck_below]
    if not doubtful:
        return
    problems = [r["problem"] for r in doubtful]
    print(f"re-timing {len(problems)} problems below {args.recheck_below}x in {args.recheck_rounds} rounds",
          file=sys.stderr)
    ours_runs, peer_runs = [], []
    for round_index in range(args.recheck_rounds):
        sides = [lambda: ours_runs.append(time_ours(args, problems, repeats, ours_json)),
                 lambda: peer_runs.append(time_peer(args, problems, repeats, peer_json))]
        for side in sides if round_index % 2 == 0 else sides[::-1]:
            side()
    for row in doubtful:
        text = row["problem"]
        ours = [run[text] for run in ours_runs]
        peer_cases = [run[text] for run in peer_runs if text in run]
        rechecked = sweep_row(args, text, {"median_us": median([o["median_us"] for o in ours]),
                                           "fraction_of_copy": median([o["fraction_of_copy"] for o in ours]),
                                           "config": row["config"]},
                              median_case(peer_cases) if peer_cases else {})
        if rechecked is None:  # the peer failed in a round: keep the first pass
            continue
        first = {"us": row["us"], "peer_us": row["peer_us"], "speedup": row["speedup"]}
        row.update(rechecked, first_pass=first, rounds=len(ours))


def decode_rows(args, problems, repeats, ours_json, _):
    """Decode and MLA decode through the Python bindings (bench_decode_lengths.py draws each batch's
    lengths); the peer is a copy of the bytes of KV the batch holds at the copy bandwidth of the
    same run."""
    script = os.path.join(HERE, "bench_decode_lengths.py")
    subprocess.run([sys.executable, script, *problem_flags(problems), *repeats, "--seed", str(args.seed), "--json",
                    ours_json], check=True,
                   stdout=sys.stderr)
    ours = json.load(open(ours_json))
    return [{"problem": r["problem"], "us": r["us"], "peer_us": r["kv_bytes"] / ours["copy_gbps"] / 1e3,
             "speedup": r["fraction_of_copy"], "fraction_of_copy": r["fraction_of_copy"], "kv_bytes": r["kv_bytes"],
             "tflops": tflops(args.family, r["problem"], r["us"], r["lengths"])} for r in ours["results"]]


def mla_heads(problem):
    return int(problem.split()[1].split("x")[1])


def grouped_rows(args, problems, repeats, ours_json, _):
    """Ours and torch._grouped_mm in one process through the Python bindings
    (bench_gemm_grouped.py --problem), both on the same uneven expert loads."""
    script = os.path.join(HERE, "bench_gemm_grouped.py")
    subprocess.run([sys.executable, script, *problem_flags(problems), *repeats, "--seed", str(args.seed), "--json",
                    ours_json], check=True, stdout=sys.stderr)
    with open(ours_json) as f:
        results = json.load(f)["results"]
    return report_rows(args, [(r["problem"], {"median_us": r["us"], "fraction_of_copy": None}, r) for r in results])


# Families whose figures come from one script of theirs (ours and the peer, or the copy bandwidth,
# in the same process) rather than bench_problems and a peer script.
ROW_SOURCES = {"decode": decode_rows, "mla": decode_rows, "gemm_grouped": grouped_rows}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", required=True, choices=sorted(PROBLEMS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bench", default="build-gpu/bench/bench_problems")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs a problem, ours and the peer's")
    parser.add_argument("--json", default="")
    parser.add_argument("--peer-timeout", type=float, default=0, help="seconds the peer may take (0: no bound)")
    parser.add_argument("--plot", default="", help="a PNG of the speed-up per shape (SVG without matplotlib)")
    parser.add_argument("--list", action="store_true", help="print the problems and stop")
    parser.add_argument("--recheck-below", type=float, default=0.0,
                        help="re-time the problems below this speed-up, ours and the peer in alternating rounds, "
                             "and report each side's median (0: off; not for decode, mla and gemm_grouped)")
    parser.add_argument("--recheck-rounds", type=int, default=5, help="rounds of --recheck-below (default 5)")
    args = parser.parse_args()
    if args.recheck_below > 0 and args.family in ROW_SOURCES:
        parser.error(f"--recheck-below: {args.family} is timed in one process with its peer, there is nothing to "
                     "re-time")
    if args.recheck_rounds < 1:
        parser.error("--recheck-rounds must be at least 1")
    rng = random.Random(args.seed)
    problems = PROBLEMS[args.family](rng)
    if args.list:
        print("\n".join(problems))
        return
    ours_json, peer_json = args.json + ".ours.tmp", args.json + ".peer.tmp"
    repeats = ["--repeats", str(args.repeats)]
    rows = ROW_SOURCES.get(args.family, peer_rows)(args, problems, repeats, ours_json, peer_json)
    ours = json.load(open(ours_json))
    if args.recheck_below > 0:
        recheck(args, rows, repeats, ours_json, peer_json)
    rows.sort(key=lambda r: r["speedup"])
    peer_name = PEER[args.family][1]
    copy = f", copy {ours['copy_gbps']:.0f} GB/s" if "copy_gbps" in ours else ""
    print(f"{ours['device']}{copy}; seed {args.seed}; peer {peer_name}, same run")
    # Tensor-core families are measured in TFLOP/s, the others against the copy bandwidth.
    compute = rows and rows[0]["tflops"] is not None
    print(f"| problem | ours us | {peer_name} us | speed-up | {'TFLOP/s' if compute else '% of copy'} |\n|---|---|---|---|---|")
    for r in rows:
        last = f"{r['tflops']:.0f}" if compute else f"{100 * r['fraction_of_copy']:.1f}%"
        note = f" (re-timed; first pass {r['first_pass']['speedup']:.2f}x)" if "first_pass" in r else ""
        print(f"| {r['problem']}{note} | {r['us']:.1f} | {r['peer_us']:.1f} | {r['speedup']:.2f}x | {last} |")
    stats = summary(rows, peer_name)
    if len(rows) < len(problems):
        print(f"\n{len(problems) - len(rows)} of {len(problems)} problems have no peer figure (above)")
    print_summary(stats)
    # Where the peer is the faster of two, each alone too: the rows target is a geomean against
    # torch eager and a minimum against both.
    for alone, name in (("eager_us", "torch eager"), ("compile_us", "torch.compile")):
        versus = [dict(r, speedup=r["peer"][alone] / r["us"]) for r in rows
                  if isinstance(r.get("peer"), dict) and r["peer"].get(alone)]
        if versus:
            stats["versus_" + alone[:-3]] = summary(versus, name)
            print_summary(stats["versus_" + alone[:-3]])
    # Copy-peered families: the target is about the batches of >= 64 MB of KV.
    big = [r for r in rows if r["kv_bytes"] >= 64e6] if args.family in COPY_PEERED else []
    if args.family in COPY_PEERED:  # every batch of >= 64 MB of KV at >= 85% of copy
        stats["at_least_64mb"] = {"problems": len(big), "below_85_percent": sum(r["speedup"] < 0.85 for r in big)}
        print(f"batches of >= 64 MB of KV: {len(big)}, {stats['at_least_64mb']['below_85_percent']} below 85% of copy")
        if args.family == "mla":  # the copy target is about the bandwidth-bound batches; the rest in TFLOP/s
            bound = [r for r in big if mla_heads(r["problem"]) < MLA_TENSOR_BOUND_HEADS]
            tensor = sorted(r["tflops"] for r in big if mla_heads(r["problem"]) >= MLA_TENSOR_BOUND_HEADS)
            stats["at_least_64mb"].update(
                bandwidth_bound=len(bound), bandwidth_bound_below_85_percent=sum(r["speedup"] < 0.85 for r in bound),
                tensor_bound=len(tensor), tensor_bound_median_tflops=median(tensor) if tensor else None)
            print(f"  below {MLA_TENSOR_BOUND_HEADS} heads: {len(bound)}, "
                  f"{stats['at_least_64mb']['bandwidth_bound_below_85_percent']} below 85% of copy")
            if tensor:
                print(f"  {MLA_TENSOR_BOUND_HEADS}+ heads (bound by the tensor cores): {len(tensor)}, "
                      f"{tensor[0]:.0f}-{tensor[-1]:.0f} TFLOP/s, median {median(tensor):.0f}")
    if args.plot:
        if args.family in COPY_PEERED:  # the batches the target is about, as a fraction of copy
            written = plot(big, args.plot, f"{args.family}: {len(big)} of {len(rows)} model shapes with >= 64 MB of "
                           f"KV, {ours['device']}, seed {args.seed}", "fraction of copy bandwidth", TARGET[args.family])
        else:
            written = plot(rows, args.plot, f"{args.family}: {len(rows)} model shapes, {ours['device']}, seed {args.seed}",
                           f"speed-up over {peer_name}", TARGET.get(args.family))
        print(f"plot: {written}")
    if args.json:
        json.dump({"device": ours["device"], "seed": args.seed, "family": args.family, "summary": stats, "rows": rows},
                  open(args.json, "w"), indent=2)
    for path in (ours_json, peer_json):
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    main()
