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
