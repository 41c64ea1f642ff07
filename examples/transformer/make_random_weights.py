#!/usr/bin/env python3
"""Writes a safetensors checkpoint of random weights for a model config, for the transformer
example and its checks against PyTorch when no real checkpoint is at hand.

    transformer_check --config config.json --list-weights > weights.jsonl
    python3 examples/transformer/make_random_weights.py --weights weights.jsonl --out model.safetensors \
        [--dtype bf16] [--seed 0] [--std 0.02]

The names and shapes come from transformer_check, so they are the ones the example reads. Matrices
are normal with standard deviation --std (GPT-2's initialisation); norm weights are 1 and biases 0,
so activations stay in range through many layers. With torch (CPU is enough) an 8B model takes
minutes; without it, pure Python serves small test configs only.
"""
import argparse
import array
import json
import random
import struct

try:
    import torch
except ImportError:
    torch = None

DTYPES = {"bf16": ("BF16", 2), "fp16": ("F16", 2), "fp32": ("F32", 4)}


def encode(values, dtype):
    """Little-endian bytes of floats in the dtype (round to nearest even)."""
    if dtype == "fp32":
        return array.array("f", values).tobytes()
    if dtype == "fp16":
        return struct.pack(f"<{len(values)}e", *values)
    words = array.array("I", array.array("f", values).tobytes())
    return array.array("H", ((w + 0x7FFF + ((w >> 16) & 1)) >> 16 & 0xFFFF for w in words)).tobytes()


def tensor_bytes(name, shape, dtype, std, rng, generator):
    count = 1
    for dim in shape:
        count *= dim
    fill = (1.0 if name.endswith("weight") else 0.0) if len(shape) == 1 else None
    if torch is not None:
        torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        t = torch.full(shape, fill) if fill is not None else torch.randn(shape, generator=generator) * std
        return t.to(torch_dtype).contiguous().view(torch.uint8).numpy().tobytes()
    values = [fill] * count if fill is not None else [rng.gauss(0.0, std) for _ in range(count)]
    return encode(values, dtype)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", required=True, help="transformer_check --list-weights output")
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--std", type=float, default=0.02)
    args = parser.parse_args()
    st_dtype, element = DTYPES[args.dtype]
    with open(args.weights) as f:
        weights = [json.loads(line) for line in f if line.strip()]
    header, offset = {}, 0
    for w in weights:
        count = 1
        for dim in w["shape"]:
            count *= dim
        header[w["name"]] = {"dtype": st_dtype, "shape": w["shape"], "data_offsets": [offset, offset + count * element]}
        offset += count * element
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)  # the data starts 8-byte aligned
    generator = torch.Generator().manual_seed(args.seed) if torch is not None else None
    rng = random.Random(args.seed)
    with open(args.out, "wb") as out:
        out.write(struct.pack("<Q", len(header_bytes)))
        out.write(header_bytes)
        for w in weights:
            out.write(tensor_bytes(w["name"], w["shape"], args.dtype, args.std, rng, generator))
    print(f"{args.out}: {len(weights)} tensors, {offset / 1e9:.2f} GB of {args.dtype}")


if __name__ == "__main__":
    main()
