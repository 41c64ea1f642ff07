#!/usr/bin/env python3
"""Merges bench_flash_attention's and torch_flash_peers.py's JSON into a markdown table, then
checks the performance targets below.

    python3 bench/compare_flash_attention.py flash.json [torch_flash.json]

Ratios are speeds (peer time / our time: > 1 is faster than the peer). Targets: >= 1.5x torch
SDPA flash (FA2) on every shape with seqlen >= 1k; >= 0.9x cuDNN on every D = 128 shape;
>= 600 TFLOP/s non-causal at seqlen >= 4k, D = 128, bf16. A case that either side failed to run
counts as not met.
"""
import json
import sys

PEERS = ("flash", "cudnn")


def ratio(ours, peer):
    return ours["tflops"] / peer["tflops"] if ours.get("tflops") and peer and peer.get("tflops") else None


def cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def target(text, rows, value, threshold, unit, fmt=".2f"):
    """One line: how many of `rows` reach `threshold` by `value(row)` (None: not measured)."""
    values = [(value(r), r["case"]) for r in rows]
    met = sum(1 for v, _ in values if v is not None and v >= threshold)
    missing = [case for v, case in values if v is None]
    measured = [(v, case) for v, case in values if v is not None]
    line = f"- {text}: {'met' if rows and met == len(rows) else 'NOT met'}, {met} of {len(rows)}"
    if measured:
        low, case = min(measured)
        line += f" (lowest {low:{fmt}}{unit} at {case})"
    if missing:
        line += f"; not measured: {', '.join(missing) if len(missing) <= 4 else f'{len(missing)} cases'}"
    return line


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        ours = json.load(open(sys.argv[1]))
    except (OSError, ValueError) as e:
        sys.exit(f"compare_flash_attention: no results of ours: {e}")
    peers_json = {}
    if len(sys.argv) > 2:
        try:
            peers_json = json.load(open(sys.argv[2]))
        except (OSError, ValueError) as e:
            print(f"(no torch peers: {e})\n")
    peers = {row["case"]: row for row in peers_json.get("cases", [])}
    print(f"{ours['device']} ({ours['arch']}), layout {ours['layout']}; torch {peers_json.get('torch', '-')}, "
          f"cuDNN {peers_json.get('cudnn', '-')}\n")
    print("| shape (BxHxS) | D | dtype | causal | ours TFLOP/s | flash TFLOP/s | cuDNN TFLOP/s | ours/flash | ours/cuDNN |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    rows, notes = [], []
    for r in ours["cases"]:
        peer = peers.get(r["case"], {})
        heads = f"{r['heads']}" if r["kv_heads"] == r["heads"] else f"{r['heads']}/{r['kv_heads']}"
        row = {"case": r["case"], "ours": r, **{name: peer.get(name) for name in PEERS}}
        row.update({f"vs_{name}": ratio(r, row[name]) for name in PEERS})
        rows.append(row)
        print(f"| {r['batch']}x{heads}x{r['seqlen']} | {r['head_dim']} | {r['dtype']} | {'yes' if r['causal'] else 'no'} | "
              f"{cell(r.get('tflops'), '.1f')} | "
              + " | ".join(cell((row[name] or {}).get("tflops"), ".1f") for name in PEERS) + " | "
              + " | ".join(cell(row[f"vs_{name}"], ".2f") for name in PEERS) + " |")
        if r.get("error"):
            notes.append(f"- {r['case']}, ours: {r['error'].splitlines()[0]}")
        elif not r.get("output_finite", True):
            notes.append(f"- {r['case']}, ours: the output had non-finite values")
        for name in PEERS:
            result = row[name]
            if peers and result is None:
                notes.append(f"- {r['case']}, {name}: not in the peers' JSON")
            elif result and result.get("error"):
                notes.append(f"- {r['case']}, {name}: {result['error']}")
            elif result and result.get("rejected"):
                notes.append(f"- {r['case']}, {name} ran {result['layout']}, {result['gqa'] or 'mha'} after: "
                             + "; ".join(result["rejected"]))
    gqa_ways = sorted({(row[name] or {}).get("gqa") or "" for row in rows for name in PEERS} - {""})
    if gqa_ways:
        notes.append(f"- torch GQA: {', '.join(gqa_ways)}")
    if notes:
        print("\n" + "\n".join(notes))

    print("\nTargets:")
    print(target("ours >= 1.5x SDPA flash (FA2), every shape with seqlen >= 1k",
                 [row for row in rows if row["ours"]["seqlen"] >= 1024], lambda row: row["vs_flash"], 1.5, "x"))
    print(target("ours >= 0.9x SDPA cuDNN, every D = 128 shape",
                 [row for row in rows if row["ours"]["head_dim"] == 128], lambda row: row["vs_cudnn"], 0.9, "x"))
    big = [row for row in rows if not row["ours"]["causal"] and row["ours"]["seqlen"] >= 4096
           and row["ours"]["head_dim"] == 128 and row["ours"]["dtype"] == "bf16"]
    print(target("ours >= 600 TFLOP/s non-causal, seqlen >= 4k, D = 128, bf16", big,
                 lambda row: row["ours"].get("tflops"), 600, " TFLOP/s", ".1f"))


if __name__ == "__main__":
    main()
