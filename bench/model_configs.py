"""The public model configs the shape sweeps draw from (sweep_peers.py, bench_decode_lengths.py
--sweep): hidden, intermediate and vocabulary sizes, attention heads, KV heads and head dims, as
their Hugging Face config.json files give them."""
from collections import namedtuple

Model = namedtuple("Model", "hidden intermediate vocab heads kv_heads head_dim head_dim_v")


def model(hidden, intermediate, vocab, heads, kv_heads, head_dim=None, head_dim_v=None):
    head_dim = head_dim or hidden // heads
    return Model(hidden, intermediate, vocab, heads, kv_heads, head_dim, head_dim_v or head_dim)


# 25 model families; the row sweep draws from their (hidden, intermediate, vocab) in this order.
MODELS = {
    "llama-3-8b": model(4096, 14336, 128256, 32, 8), "llama-3-70b": model(8192, 28672, 128256, 64, 8),
    "llama-2-7b": model(4096, 11008, 32000, 32, 32), "mistral-7b": model(4096, 14336, 32000, 32, 8),
    "qwen2.5-7b": model(3584, 18944, 152064, 28, 4), "qwen2.5-0.5b": model(896, 4864, 151936, 14, 2),
    "qwen2.5-72b": model(8192, 29568, 152064, 64, 8), "phi-3-mini": model(3072, 8192, 32064, 32, 32),
    "phi-2": model(2560, 10240, 51200, 32, 32), "gemma-2-9b": model(3584, 14336, 256000, 16, 8, 256),
    "gemma-2b": model(2048, 16384, 256000, 8, 1, 256), "gpt-2": model(768, 3072, 50257, 12, 12),
    "gpt-2-xl": model(1600, 6400, 50257, 25, 25), "gpt-neox-20b": model(6144, 24576, 50432, 64, 64),
    "falcon-7b": model(4544, 18176, 65024, 71, 1), "bloom-7b": model(4096, 16384, 250880, 32, 32),
    "opt-6.7b": model(4096, 16384, 50272, 32, 32), "flan-t5-xl": model(2048, 5120, 32128, 32, 32, 64),
    "whisper-large": model(1280, 5120, 51865, 20, 20),
    # DeepSeek-V2-Lite's attention as its prefill runs it: queries and keys 192 wide, values 128.
    "deepseek-v2-lite": model(2048, 10944, 102400, 16, 16, 192, 128),
    "starcoder2-15b": model(6144, 24576, 49152, 48, 4), "yi-34b": model(7168, 20480, 64000, 56, 8),
    "mpt-7b": model(4096, 16384, 50432, 32, 32), "bert-large": model(1024, 4096, 30522, 16, 16),
    "internlm2-7b": model(4096, 14336, 92544, 32, 8),
}

# Attention layers beyond the 25: DeepSeek-V3's prefill (192/128), EVA02-CLIP-E's 112-wide heads, a
# Qwen2-VL vision tower (80), and a 160-wide head, which the issue of head dims names and no
# model above has.
EXTRA_ATTENTION = {
    "deepseek-v3": model(7168, 18432, 129280, 128, 128, 192, 128), "eva02-clip-e": model(1792, 15360, 0, 16, 16),
    "qwen2-vl-vision": model(1280, 5120, 0, 16, 16), "head-dim-160": model(5120, 13824, 32000, 32, 8, 160),
    "llama-3.2-3b": model(3072, 8192, 128256, 24, 8, 128),
}
ATTENTION_MODELS = {**MODELS, **EXTRA_ATTENTION}

MoE = namedtuple("MoE", "experts top_k hidden intermediate")

# Mixture-of-experts layers (routed experts: count, experts a token takes, hidden size, one
# expert's intermediate size), for the grouped GEMM sweep.
MOE_MODELS = {
    "mixtral-8x7b": MoE(8, 2, 4096, 14336), "mixtral-8x22b": MoE(8, 2, 6144, 16384),
    "qwen3-30b-a3b": MoE(128, 8, 2048, 768), "qwen3-235b-a22b": MoE(128, 8, 4096, 1536),
    "qwen2-57b-a14b": MoE(64, 8, 3584, 2560), "qwen1.5-moe-a2.7b": MoE(60, 4, 2048, 1408),
    "deepseek-v2": MoE(160, 6, 5120, 1536), "deepseek-v2-lite": MoE(64, 6, 2048, 1408),
    "deepseek-v3": MoE(256, 8, 7168, 2048), "kimi-k2": MoE(384, 8, 7168, 2048),
    "dbrx": MoE(16, 4, 6144, 10752), "olmoe-1b-7b": MoE(64, 8, 2048, 1024),
    "phi-3.5-moe": MoE(16, 2, 4096, 6400), "grok-1": MoE(8, 2, 6144, 32768),
    "jamba-v0.1": MoE(16, 2, 4096, 14336), "arctic": MoE(128, 2, 7168, 4864),
    "llama-4-scout": MoE(16, 1, 5120, 8192), "llama-4-maverick": MoE(128, 1, 5120, 8192),
    "gpt-oss-120b": MoE(128, 4, 2880, 2880), "gpt-oss-20b": MoE(32, 4, 2880, 2880),
    "glm-4.5": MoE(160, 8, 5120, 1536), "glm-4.5-air": MoE(128, 8, 4096, 1408),
    "granite-3.0-3b-a800m": MoE(40, 8, 1536, 512), "jetmoe-8b": MoE(8, 2, 2048, 5632),
}
