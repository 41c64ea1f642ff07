#!/usr/bin/env python3
"""Times torch scaled_dot_product_attention with the flash backend (SDPBackend.FLASH_ATTENTION,
FlashAttention-2) and the cuDNN backend (SDPBackend.CUDNN_ATTENTION) on the cases
bench_flash_attention uses, on the same GPU.

    python3 bench/torch_flash_peers.py --json torch_flash.json [--repeats N] [--quick] [--list] [--only CASE]...

--quick, --only and --list as in bench_flash_attention.cpp (CASE:
BATCHxHEADS[/KV_HEADS]xSEQLENxDIM[:bf16|:fp16][:causal|:noncausal]); --list needs no torch.

Same layout as ours: q, k and v are [batch, seqlen, heads, head_dim] tensors and SDPA gets their
q.transpose(1, 2) views ([batch, heads, seqlen, head_dim], strided). Inputs uniform in [-2, 2),
as bench_common's random_buffer. GQA through enable_gqa=True (torch >= 2.5). Where a backend
refuses a call, the next way is tried: enable_gqa, then k and v repeat_interleave'd to the query
heads (outside the timed runs), then contiguous [batch, heads, seqlen, head_dim] copies; the way
that ran is recorded ("layout", "gqa") with the refusals ("rejected"), and a backend that runs no
way gets nulls and "error". Same method as the C++ benchmark: CUDA events, 3 warm-up runs, L2
flushed before each timed run, median. FLOPs = 4 * batch * heads * seqlen^2 * head_dim, halved
when causal.
"""
import argparse
import json
import warnings

from torch_timing import time_ms

DTYPES = ("bf16", "fp16")
LENGTHS = [(16, 1024), (4, 4096), (2, 8192), (1, 16384)]  # (batch, seqlen): 16k tokens each


def make_case(batch, heads, kv_heads, seqlen, head_dim, dtype, causal):
    return {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seqlen": seqlen, "head_dim": head_dim,
            "dtype": dtype, "causal": causal}


def key(c):
    """The key both programs' JSON carry: "4x32/8x4096x128 bf16 causal"."""
    heads = f"{c['heads']}" if c["kv_heads"] == c["heads"] else f"{c['heads']}/{c['kv_heads']}"
    return (f"{c['batch']}x{heads}x{c['seqlen']}x{c['head_dim']} {c['dtype']} "
            f"{'causal' if c['causal'] else 'noncausal'}")


def flops(c):
    return 4.0 * c["batch"] * c["heads"] * c["seqlen"] ** 2 * c["head_dim"] * (0.5 if c["causal"] else 1.0)


def issue_cases(quick):
    """Keep in step with issue_cases() in bench_flash_attention.cpp (same order)."""
    if quick:
        return [make_case(batch, 16, 16, seqlen, 128, "bf16", causal)
                for batch, seqlen in [(16, 1024), (4, 4096)] for causal in (False, True)]
    cases = [make_case(batch, 16, 16, seqlen, head_dim, dtype, causal)
             for dtype in DTYPES for head_dim in (64, 128) for batch, seqlen in LENGTHS for causal in (False, True)]
    cases += [make_case(batch, 32, 8, seqlen, 128, "bf16", causal) for batch, seqlen in LENGTHS for causal in (False, True)]
    return cases


def positive(text):
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"'{text}' is not a positive integer")
    return int(text)


def parse_only(text):
    """The cases one --only argument names."""
    parts = text.split(":")
    dims = parts[0].split("x")
    if len(dims) != 4:
        raise ValueError(f"--only {text}: the shape is not BATCHxHEADSxSEQLENxDIM (HEADS may be HEADS/KV_HEADS)")
    heads = dims[1].split("/")
    if len(heads) > 2:
        raise ValueError(f"--only {text}: heads are HEADS or HEADS/KV_HEADS")
    dtypes, causals = list(DTYPES), [False, True]
    for part in parts[1:]:
        if part in DTYPES:
            dtypes = [part]
        elif part in ("causal", "noncausal"):
            causals = [part == "causal"]
        else:
            raise ValueError(f"--only {text}: '{part}' is not bf16, fp16, causal or noncausal")
    num_heads = positive(heads[0])
    kv_heads = positive(heads[1]) if len(heads) == 2 else num_heads
    return [make_case(positive(dims[0]), num_heads, kv_heads, positive(dims[2]), positive(dims[3]), dtype, causal)
            for dtype in dtypes for causal in causals]


def ways(q, k, v):
    """The ways to call SDPA, in the order tried: (layout, gqa, q, k, v, keyword arguments)."""
    group = q.shape[2] // k.shape[2]
    for layout in ("bshd", "bhsd"):
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        if layout == "bhsd":
            qt, kt, vt = (x.contiguous() for x in (qt, kt, vt))
        if group == 1:
            yield layout, None, qt, kt, vt, {}
        else:
            yield layout, "enable_gqa", qt, kt, vt, {"enable_gqa": True}
            yield layout, "repeat_interleave", qt, kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1), {}


def time_backend(backend, c, q, k, v, repeats):
    """Times one SDPA backend on one case: the first way it accepts, or nulls and the errors."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    rejected = []
    for layout, gqa, qt, kt, vt, kwargs in ways(q, k, v):
        with warnings.catch_warnings(record=True) as caught:  # torch gives its reasons for a refusal as warnings
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(backend):
                    ms = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=c["causal"], **kwargs),
                                 repeats)
            except Exception as e:  # refused (RuntimeError "No available kernel"), unsupported argument, or failed
                reasons = " ".join(" ".join(str(w.message).split()) for w in caught)
                text = " ".join(str(e).split())
                rejected.append(f"{layout}, {gqa or 'mha'}: {type(e).__name__}: {text} {reasons}".strip()[:600])
                continue
        return {"median_us": ms * 1e3, "tflops": flops(c) / (ms * 1e-3) / 1e12, "layout": layout, "gqa": gqa,
                "rejected": rejected, "error": None}
    return {"median_us": None, "tflops": None, "layout": None, "gqa": None, "rejected": rejected,
            "error": " | ".join(rejected)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    try:
        cases = [c for text in args.only for c in parse_only(text)] or issue_cases(args.quick)
    except ValueError as e:
        parser.error(str(e))
    if args.list:
        for c in cases:
            print(key(c))
        return

    import torch
    from torch.nn.attention import SDPBackend
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    header = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "layout": "bshd (SDPA gets q.transpose(1, 2) views)",
              "inputs": "uniform in [-2, 2)", "repeats": args.repeats}
    print(f"{header['device']}, torch {header['torch']}, cuDNN {header['cudnn']}", flush=True)
    print(f"{'case':<30} {'flash TFLOP/s':>13} {'cudnn TFLOP/s':>13}", flush=True)
    results = []
    with torch.no_grad():
        for c in cases:
            def tensor(heads):
                shape = (c["batch"], c["seqlen"], heads, c["head_dim"])
                return (torch.rand(shape, device="cuda") * 4 - 2).to(dtypes[c["dtype"]])
            q, k, v = tensor(c["heads"]), tensor(c["kv_heads"]), tensor(c["kv_heads"])
            row = {"case": key(c), **c, "flops": flops(c)}
            for name, backend in backends.items():
                row[name] = time_backend(backend, c, q, k, v, args.repeats)
            results.append(row)
            cells = [f"{row[name]['tflops']:13.1f}" if row[name]["tflops"] else f"{'-':>13}" for name in backends]
            notes = [f"{name}: {row[name]['error']}" for name in backends if row[name]["error"]]
            notes += [f"{name} ran {row[name]['layout']}, {row[name]['gqa']}" for name in backends
                      if row[name]["rejected"] and not row[name]["error"]]
            print(f"{key(c):<30} {' '.join(cells)}   {'; '.join(notes)}", flush=True)
            del q, k, v
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({**header, "cases": results}, f, indent=2)


if __name__ == "__main__":
    main()
