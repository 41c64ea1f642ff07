#!/usr/bin/env python3
"""PyTorch peers of the transformer example (examples/transformer) on a Llama-3 architecture
config, with random bf16 weights on the GPU, in the same method as the C++ benchmarks
(torch_timing.py: CUDA events, median):

  decode step, batch B, every sequence C tokens in: eager, and torch.compile(mode="reduce-overhead")
      over a static KV cache [B, kv_heads, C + 64, head_dim] per layer, attention masked to the
      filled part (gpt-fast's design); the step ends in the greedy argmax, as ours does;
  prefill of P prompts of L tokens: eager with SDPA on its cuDNN backend, and torch.compile, each
      writing the keys and values to the cache;
  the floor of a decode step: the weights it reads (every matrix, the LM head, the norms) and the
      KV cache, once, at the copy bandwidth measured here (a 2 GB device-to-device copy).

    python3 bench/torch_llama_peers.py --config tests/data/transformer/llama3_8b_config.json \\
        [--decode-batches 1,8,64] [--context 2048] [--prefill 8x2048] [--json out.json]

The q/k/v and gate/up projections are fused (one GEMM each), as in ours and in gpt-fast.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "transformer"))
from check_against_torch import llama3_inv_freq  # noqa: E402  (the example's reference: one definition)
from torch_timing import save_results, time_ms  # noqa: E402


def build(config, torch):
    import torch.nn.functional as F

    h, H = config["hidden_size"], config["num_attention_heads"]
    Hkv, L = config.get("num_key_value_heads", H), config["num_hidden_layers"]
    d, ff, vocab = h // H, config["intermediate_size"], config["vocab_size"]
    eps = config.get("rms_norm_eps", 1e-5)
    dev, bf16 = "cuda", torch.bfloat16

    def randn(*shape):
        return (torch.randn(*shape, device=dev, dtype=bf16) * 0.02)

    class Llama(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = randn(vocab, h)
            self.layers = [dict(n1=torch.ones(h, device=dev, dtype=bf16), qkv=randn((H + 2 * Hkv) * d, h),
                                o=randn(h, H * d), n2=torch.ones(h, device=dev, dtype=bf16),
                                gate_up=randn(2 * ff, h), down=randn(h, ff)) for _ in range(L)]
            self.norm = torch.ones(h, device=dev, dtype=bf16)
            self.lm_head = randn(vocab, h)
            self.inv_freq = llama3_inv_freq(config, d).to(dev)
            self.k_cache, self.v_cache = [], []
            # Fixed addresses: CUDA graphs of torch.compile read them in place instead of copying.
            for t in [self.embed, self.norm, self.lm_head] + [w for layer in self.layers for w in layer.values()]:
                torch._dynamo.mark_static_address(t)

        def weight_bytes(self):
            per_layer = sum(t.numel() for t in self.layers[0].values()) * 2
            return per_layer * L + (self.lm_head.numel() + self.norm.numel()) * 2

        def set_cache(self, batch, length):
            self.k_cache = self.v_cache = None
            torch.cuda.empty_cache()
            self.k_cache = [torch.zeros(batch, Hkv, length, d, device=dev, dtype=bf16) for _ in range(L)]
            self.v_cache = [torch.zeros(batch, Hkv, length, d, device=dev, dtype=bf16) for _ in range(L)]
            for t in self.k_cache + self.v_cache:
                torch._dynamo.mark_static_address(t)

        def rope(self, x, pos):  # x [B, T, heads, d]; neox halves
            angle = pos.to(torch.float32)[:, None] * self.inv_freq[None, :]
            cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
            a, b = x[..., : d // 2].float(), x[..., d // 2:].float()
            return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(x.dtype)

        def forward(self, ids, pos, decode):
            B, T = ids.shape
            x = self.embed[ids]
            for layer, kc, vc in zip(self.layers, self.k_cache, self.v_cache):
                y = F.rms_norm(x, (h,), layer["n1"], eps)
                q, k, v = (y @ layer["qkv"].T).split([H * d, Hkv * d, Hkv * d], dim=-1)
                q = self.rope(q.view(B, T, H, d), pos).transpose(1, 2)
                k = self.rope(k.view(B, T, Hkv, d), pos).transpose(1, 2)
                v = v.view(B, T, Hkv, d).transpose(1, 2)
                kc.index_copy_(2, pos, k)
                vc.index_copy_(2, pos, v)
                if decode:
                    mask = (torch.arange(kc.shape[2], device=dev) <= pos[-1])[None, None, None, :]
                    a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, enable_gqa=True)
                else:
                    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                x = x + a.transpose(1, 2).reshape(B, T, H * d) @ layer["o"].T
                y = F.rms_norm(x, (h,), layer["n2"], eps)
                gate, up = (y @ layer["gate_up"].T).chunk(2, dim=-1)
                x = x + (F.silu(gate) * up) @ layer["down"].T
            logits = (F.rms_norm(x[:, -1], (h,), self.norm, eps) @ self.lm_head.T).float()
            return logits.argmax(-1)

    return Llama(), dict(layers=L, kv_heads=Hkv, head_dim=d, vocab=vocab)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--decode-batches", default="1,8,64")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--prefill", default="8x2048", help="PROMPTSxTOKENS; empty: none")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with open(args.config) as f:
        config = json.load(f)
    torch.manual_seed(0)
    model, dims = build(config, torch)
    cases = []

    src = torch.empty(1 << 30, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = time_ms(lambda: dst.copy_(src), 20)
    bandwidth = 2 * src.numel() * 2 / (copy_ms * 1e-3)
    del src, dst
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s; weights read a decode step {model.weight_bytes() / 1e9:.2f} GB",
          flush=True)

    for batch in [int(b) for b in args.decode_batches.split(",") if b]:
        model.set_cache(batch, args.context + 64)
        ids = torch.randint(0, dims["vocab"], (batch, 1), device="cuda")
        pos = torch.tensor([args.context], device="cuda")
        kv_bytes = batch * (args.context + 1) * dims["layers"] * 2 * dims["kv_heads"] * dims["head_dim"] * 2
        case = {"case": f"decode batch {batch}, context {args.context}",
                "floor_ms": (model.weight_bytes() + kv_bytes) / bandwidth * 1e3, "copy_tb_s": bandwidth / 1e12}
        with torch.no_grad():
            case["eager_ms"] = time_ms(lambda: model(ids, pos, True), args.repeats)
            if not args.no_compile:
                step = torch.compile(lambda i, p: model(i, p, True), mode="reduce-overhead", fullgraph=True)
                case["compile_reduce_overhead_ms"] = time_ms(lambda: step(ids, pos), args.repeats)
        print(json.dumps(case), flush=True)
        cases.append(case)

    if args.prefill:
        prompts, tokens = (int(x) for x in args.prefill.split("x"))
        model.set_cache(prompts, tokens)
        ids = torch.randint(0, dims["vocab"], (prompts, tokens), device="cuda")
        pos = torch.arange(tokens, device="cuda")
        case = {"case": f"prefill {prompts} x {tokens}"}
        with torch.no_grad():
            try:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    case["eager_sdpa_cudnn_ms"] = time_ms(lambda: model(ids, pos, False), 5)
            except RuntimeError as e:  # cuDNN's backend refused the problem
                case["eager_sdpa_cudnn_error"] = str(e).splitlines()[0]
            case["eager_sdpa_default_ms"] = time_ms(lambda: model(ids, pos, False), 5)
            if not args.no_compile:
                prefill = torch.compile(lambda i, p: model(i, p, False), fullgraph=True)
                case["compile_ms"] = time_ms(lambda: prefill(ids, pos), 5)
        print(json.dumps(case), flush=True)
        cases.append(case)
    save_results(args.json, cases)


if __name__ == "__main__":
    main()
