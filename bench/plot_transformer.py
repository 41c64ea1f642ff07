#!/usr/bin/env python3
"""Draws bench_transformer.py's results as an SVG bar chart (no plotting library needed): each
case's time against torch.compile's in the same run (= 1), with torch eager and, for decode steps,
the floor (weights and KV read once at the measured copy bandwidth).

    python3 bench/plot_transformer.py --json e2e.json --out docs/images/transformer_llama3_8b_h100.svg [--date 2026-11-27]
"""
import argparse
import json
from xml.sax.saxutils import escape

SERIES = [("tileops-jit", "#2b6cb0"), ("torch.compile", "#a0aec0"), ("torch eager", "#ed8936"), ("floor", "#38a169")]
CLIP = 2.0  # bars longer than this many times torch.compile's are cut, their value written


def cases(results, context, prefill):
    peers = {c["case"]: c for c in results["torch"]["cases"]}
    out = []
    for key, mine in results["ours"].items():
        if key.startswith("decode "):
            batch = key.split()[1]
            peer = peers[f"decode batch {batch}, context {context}"]
            base = peer["compile_reduce_overhead_ms"]
            out.append((f"decode step, batch {batch}", mine["decode_step_ms"], base,
                        {"tileops-jit": mine["decode_step_ms"], "torch.compile": base, "torch eager": peer["eager_ms"],
                         "floor": peer["floor_ms"]}))
    if "prefill" in results["ours"]:
        prompts, tokens = prefill.split("x")
        peer = peers[f"prefill {prompts} x {tokens}"]
        base = peer["compile_ms"]
        out.append((f"prefill {prefill}", results["ours"]["prefill"]["prefill_ms"], base,
                    {"tileops-jit": results["ours"]["prefill"]["prefill_ms"], "torch.compile": base,
                     "torch eager": peer.get("eager_sdpa_cudnn_ms", peer.get("eager_sdpa_default_ms"))}))
    return out


def svg(rows, title):
    bar, gap, label_w, plot_w = 14, 16, 170, 420
    height = 60 + sum(len(r[3]) * bar + gap for r in rows) + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 150}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
             '<text x="10" y="38" fill="#4a5568">time relative to torch.compile in the same run (shorter is '
             'faster); bars past 2x are cut</text>']
    scale = plot_w / CLIP
    y = 55
    one = label_w + scale
    for name, _, base, values in rows:
        parts.append(f'<text x="10" y="{y + len(values) * bar / 2 + 4}">{escape(name)}</text>')
        for series, color in SERIES:
            if series not in values or values[series] is None:
                continue
            ratio = values[series] / base
            width = min(ratio, CLIP) * scale
            parts.append(f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar - 2}" fill="{color}"/>')
            unit = "ms"
            parts.append(f'<text x="{label_w + width + 4:.1f}" y="{y + bar - 4}" fill="#2d3748">'
                         f'{values[series]:.2f} {unit} ({ratio:.2f}x)</text>')
            y += bar
        y += gap
    parts.append(f'<line x1="{one:.1f}" y1="50" x2="{one:.1f}" y2="{y}" stroke="#718096" stroke-dasharray="4 3"/>')
    x = 10
    for series, color in SERIES:
        parts.append(f'<rect x="{x}" y="{y + 8}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{x + 16}" y="{y + 18}">{series}</text>')
        x += 30 + 8 * len(series)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True, help="bench_transformer.py --json output")
    parser.add_argument("--out", required=True)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--prefill", default="8x2048")
    parser.add_argument("--title", default="Llama-3-8B architecture, random bf16 weights")
    parser.add_argument("--date", default="")
    args = parser.parse_args()
    with open(args.json) as f:
        results = json.load(f)
    gpu = results["ours"]["start"]["gpu"]
    title = f"{args.title}, {gpu}" + (f", {args.date}" if args.date else "")
    with open(args.out, "w") as f:
        f.write(svg(cases(results, args.context, args.prefill), title))


if __name__ == "__main__":
    main()
