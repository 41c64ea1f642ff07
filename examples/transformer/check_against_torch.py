#!/usr/bin/env python3
"""Checks the transformer example against a PyTorch implementation of the same architecture with
the same weights, computed in float64 on the CPU from the checkpoint's values:

  1. the residual stream after every layer of a varlen prefill, and the prefill's logits, within
     bf16 tolerance: relative L2 error and largest error (against the largest value) at most 1e-2
     or, where more, 1.5 x those of the same PyTorch model run in bf16;
  2. greedy decoding for --steps steps, the reference fed the example's tokens: every token is the
     reference's argmax, or within the logits' tolerance of it (a tie that bf16 may break either
     way); the sequences that match the reference's own greedy decoding exactly are counted;
  3. sampling with temperature, top-k, top-p and min-p: every token the example draws lies in the
     set the reference's logits allow (the reference is fed the example's tokens).

    python3 examples/transformer/check_against_torch.py --build build \\
        --config tests/data/transformer/small_llama_config.json [--weights model.safetensors]

Without --weights, random ones are written with make_random_weights.py. Exit status 0 when every
check passes; the numbers are printed either way.
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        tensors[name] = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"]) if raw else \
            torch.zeros(entry["shape"], dtype=DTYPES[entry["dtype"]])
    return tensors


def read_checkpoint(path):
    """A .safetensors file, a sharded checkpoint's index (model.safetensors.index.json) or a
    directory holding either, as the example reads them."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        path = index if os.path.exists(index) else os.path.join(path, "model.safetensors")
    if not path.endswith(".json"):
        return read_safetensors(path)
    with open(path) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        for name, tensor in read_safetensors(os.path.join(os.path.dirname(path), shard)).items():
            if weight_map.get(name) == shard:
                tensors[name] = tensor
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        sys.exit(f"{path}: the index names tensors its shards lack: {', '.join(missing[:5])}")
    return tensors


def llama3_inv_freq(config, head_dim):
    # transformers v5 keeps rope_theta and the scaling in "rope_parameters".
    parameters = config.get("rope_parameters") or {}
    theta = parameters.get("rope_theta", config.get("rope_theta", 10000.0))
    inv = [theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]
    scaling = parameters or config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        inv = [f / scaling["factor"] for f in inv]
    elif kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        original = scaling["original_max_position_embeddings"]
        out = []
        for f in inv:
            wavelength = 2 * math.pi / f
            if wavelength > original / low:
                out.append(f / factor)
            elif wavelength < original / high:
                out.append(f)
            else:
                smooth = (original / wavelength - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        inv = out
    return torch.tensor(inv, dtype=torch.float32)  # fp32 frequencies, as the library and Hugging Face


class Reference:
    """One sequence at a time, every position recomputed: slow and plain."""

    def __init__(self, config, weights, dtype=torch.float64):
        self.c, self.dtype = config, dtype
        # GPT2LMHeadModel.save_pretrained names the body "transformer.wte.weight", ...
        self.w = {k.removeprefix("transformer.") if k.startswith("transformer.") and k[12:] not in weights else k:
                  v.to(dtype) for k, v in weights.items()}
        self.llama = config["model_type"] == "llama"
        if self.llama:
            self.hidden, self.heads = config["hidden_size"], config["num_attention_heads"]
            self.kv_heads = config.get("num_key_value_heads", self.heads)
            self.layers, self.eps = config["num_hidden_layers"], config.get("rms_norm_eps", 1e-5)
            self.d = self.hidden // self.heads
            self.inv_freq = llama3_inv_freq(config, self.d)
            self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        else:
            self.hidden, self.heads = config["n_embd"], config["n_head"]
            self.kv_heads, self.layers = self.heads, config["n_layer"]
            self.eps, self.d = config.get("layer_norm_epsilon", 1e-5), self.hidden // self.heads
            self.exact_gelu = config.get("activation_function", "gelu_new") == "gelu"

    def rope(self, x, positions):  # x [T, heads, d]; the angle in fp32 as the library computes it
        angle = (positions.to(torch.float32)[:, None] * self.inv_freq[None, :]).to(torch.float64)
        cos, sin = angle.cos()[:, None, :].to(self.dtype), angle.sin()[:, None, :].to(self.dtype)
        half = self.d // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def attention(self, q, k, v):  # [T, heads, d], causal, GQA
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.d)
        mask = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(q.shape[0], -1)

    def forward(self, tokens):
        """The residual stream after each layer [T, hidden] and the logits of every position."""
        w, T = self.w, len(tokens)
        ids = torch.tensor(tokens)
        positions = torch.arange(T)
        hidden = []
        if self.llama:
            x = w["model.embed_tokens.weight"][ids]
            norm = lambda x, name: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w[name]
            for l in range(self.layers):
                p = f"model.layers.{l}."
                h = norm(x, p + "input_layernorm.weight")
                q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, self.heads, self.d)
                k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, self.kv_heads, self.d)
                v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, self.kv_heads, self.d)
                a = self.attention(self.rope(q, positions), self.rope(k, positions), v)
                x = x + a @ w[p + "self_attn.o_proj.weight"].T
                h = norm(x, p + "post_attention_layernorm.weight")
                gate = h @ w[p + "mlp.gate_proj.weight"].T
                x = x + (F.silu(gate) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
                hidden.append(x)
            return hidden, norm(x, "model.norm.weight") @ self.lm_head.T
        x = w["wte.weight"][ids] + w["wpe.weight"][positions]
        norm = lambda x, name: F.layer_norm(x, (self.hidden,), w[name + ".weight"], w[name + ".bias"], self.eps)
        for l in range(self.layers):
            p = f"h.{l}."
            h = norm(x, p + "ln_1")
            qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = (t.reshape(T, self.heads, self.d) for t in qkv.split(self.hidden, dim=-1))
            x = x + self.attention(q, k, v) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = norm(x, p + "ln_2")
            inner = h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
            inner = F.gelu(inner) if self.exact_gelu else F.gelu(inner, approximate="tanh")
            x = x + inner @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
            hidden.append(x)
        tied = self.c.get("tie_word_embeddings", True)
        return hidden, norm(x, "ln_f") @ (w["wte.weight"] if tied else w["lm_head.weight"]).T


def allowed_set(logits, temperature, top_k, top_p, min_p, slack):
    """Tokens the op may draw from these logits (vLLM's order: min-p, then top-k and top-p), widened
    by `slack` in probability at each boundary so that a bf16 difference does not count as a miss."""
    p = torch.softmax(logits / temperature, dim=-1)
    keep = p >= min_p * p.max() - slack
    order = torch.argsort(p, descending=True)
    if 0 < top_k < p.numel():
        kth = p[order[top_k - 1]]
        keep &= p >= kth - slack
    kept = torch.where(keep, p, torch.zeros_like(p))
    sorted_kept, index = torch.sort(kept, descending=True)
    before = torch.cumsum(sorted_kept, 0) - sorted_kept  # mass of the better tokens
    inside = before < top_p * kept.sum() + slack
    top = torch.zeros_like(keep)
    top[index[inside]] = True
    return keep & top


def errors(ours, ref):
    ours, ref = ours.to(torch.float64), ref.to(torch.float64)
    return ((ours - ref).norm() / ref.norm()).item(), ((ours - ref).abs().max() / ref.abs().max()).item()


def compare(name, ours, ref, torch_bf16):
    """Our errors against the float64 reference, within max(1e-2, 1.5 x PyTorch bf16's)."""
    rel_l2, worst = errors(ours, ref)
    peer_l2, peer_worst = errors(torch_bf16, ref)
    ok = rel_l2 <= max(1e-2, 1.5 * peer_l2) and worst <= max(1e-2, 1.5 * peer_worst)
    print(f"  {name:<10} relative L2 error {rel_l2:.2e} (PyTorch bf16 {peer_l2:.2e}), largest error / largest "
          f"value {worst:.2e} ({peer_worst:.2e}) {'ok' if ok else 'FAIL'}")
    return ok


def run_example(args, weights, prompts_path, dump, extra):
    command = [os.path.join(args.build, "examples", "transformer_run"), "--config", args.config, "--weights", weights,
               "--prompts", prompts_path, "--steps", str(args.steps), "--dump", dump] + extra
    print("$", " ".join(command))
    subprocess.run(command, check=True)
    return read_safetensors(dump)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, help="the CMake build directory")
    parser.add_argument("--config", required=True)
    parser.add_argument("--weights", help="a .safetensors file, a sharded checkpoint's index or a directory holding either, as "
                        "the example takes; default: random weights")
    parser.add_argument("--std", type=float, default=0.08, help="the random weights' standard deviation")
    parser.add_argument("--prompt-lengths", default="7,19,33,64")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    vocab = config["vocab_size"]
    work = tempfile.mkdtemp(prefix="transformer-check-")
    weights = args.weights
    if weights is None:
        listing = subprocess.run([os.path.join(args.build, "examples", "transformer_check"), "--config", args.config,
                                  "--list-weights"], check=True, capture_output=True, text=True).stdout
        with open(os.path.join(work, "weights.jsonl"), "w") as f:
            f.write(listing)
        weights = os.path.join(work, "model.safetensors")
        subprocess.run([sys.executable, os.path.join(HERE, "make_random_weights.py"), "--weights",
                        os.path.join(work, "weights.jsonl"), "--out", weights, "--std", str(args.std),
                        "--seed", str(args.seed)], check=True)
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(vocab) for _ in range(int(n))] for n in args.prompt_lengths.split(",")]
    prompts_path = os.path.join(work, "prompts.json")
    with open(prompts_path, "w") as f:
        json.dump(prompts, f)
    checkpoint = read_checkpoint(weights)
    reference = Reference(config, checkpoint)
    torch_bf16 = Reference(config, checkpoint, torch.bfloat16)
    ok = True

    print("greedy run: prefill activations, logits and tokens")
    ours = run_example(args, weights, prompts_path, os.path.join(work, "greedy.safetensors"), [])
    ref_hidden, ref_logits, bf16_hidden, bf16_logits = [], [], [], []
    for prompt in prompts:
        hidden, logits = reference.forward(prompt)
        ref_hidden.append(hidden)
        ref_logits.append(logits[-1])
        hidden, logits = torch_bf16.forward(prompt)
        bf16_hidden.append(hidden)
        bf16_logits.append(logits[-1])
    for l in range(reference.layers):
        ok &= compare(f"layer {l}", ours[f"hidden.{l}"], torch.cat([h[l] for h in ref_hidden]),
                      torch.cat([h[l] for h in bf16_hidden]))
    ok &= compare("logits", ours["logits"], torch.stack(ref_logits), torch.stack(bf16_logits))

    tokens, exact = ours["tokens"].tolist(), 0
    for b, prompt in enumerate(prompts):
        _, logits = reference.forward(list(prompt) + tokens[b][:-1])
        ties = 0
        for step, token in enumerate(tokens[b]):
            last = logits[len(prompt) - 1 + step]
            best = int(last.argmax())
            if token == best:
                continue
            gap = (last[best] - last[token]).item()
            tie = gap <= 2e-2 * last.abs().max().item()
            ties += 1
            if not tie:
                print(f"  prompt {b}: step {step} drew {token}, the reference's argmax is {best} (logit gap {gap:.3g}) FAIL")
                ok = False
        exact += ties == 0
        print(f"  prompt {b}: {len(tokens[b])} greedy tokens, {len(tokens[b]) - ties} the reference's argmax, "
              f"{ties} within a tie of it")
    print(f"  {exact} of {len(prompts)} sequences equal the reference's greedy decoding")

    print("sampled run: every token inside the reference's top-k / top-p / min-p set")
    temperature, top_k, top_p, min_p = 0.8, 40, 0.9, 0.02
    ours = run_example(args, weights, prompts_path, os.path.join(work, "sampled.safetensors"),
                       ["--temperature", str(temperature), "--top-k", str(top_k), "--top-p", str(top_p),
                        "--min-p", str(min_p), "--seed", str(args.seed)])
    tokens, outside, drawn = ours["tokens"].tolist(), 0, 0
    for b, prompt in enumerate(prompts):
        _, logits = reference.forward(list(prompt) + tokens[b][:-1])
        for step, token in enumerate(tokens[b]):
            allowed = allowed_set(logits[len(prompt) - 1 + step], temperature, top_k, top_p, min_p, slack=2e-3)
            drawn += 1
            if not allowed[token]:
                outside += 1
                print(f"  prompt {b}: step {step} drew {token}, outside the allowed set of {int(allowed.sum())}")
    print(f"  {drawn - outside} of {drawn} sampled tokens inside the allowed sets {'ok' if outside == 0 else 'FAIL'}")
    ok &= outside == 0
    print("all checks pass" if ok else "CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
