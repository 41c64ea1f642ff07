#!/usr/bin/env python3
"""Merges bench_decode_attention's and torch_decode_peers.py's JSON into a markdown table.

    python3 bench/compare_decode_attention.py ours.json torch_decode.json
"""
import json
import sys


def main():
    ours = json.load(open(sys.argv[1]))
    peers = {}
    if len(sys.argv) > 2:
        for row in json.load(open(sys.argv[2]))["cases"]:
            peers[(row["batch"], row["heads"], row["kv_heads"], row["kv_len"])] = row
    print(f"{ours['device']}, copy {ours['copy_gbps']:.0f} GB/s\n")
    print("| layout | batch | heads | KV len | KV MB | tileops us | GB/s | % copy | SDPA us | SDPA GB/s | speedup |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in ours["cases"]:
        # SDPA runs a contiguous bf16 cache: no peer for paged or fp8 rows (an fp8 cache reads half the bytes).
        same_problem = r["layout"] in ("contiguous", "contiguous-bhsd")
        peer = peers.get((r["batch"], r["heads"], r["kv_heads"], r["kv_len"])) if same_problem else None
        sdpa = (f"{peer['sdpa_us']:.1f} | {peer['sdpa_gbps']:.0f} | {peer['sdpa_us'] / r['median_us']:.2f}x"
                if peer else "- | - | -")
        print(f"| {r['layout']} | {r['batch']} | {r['heads']}/{r['kv_heads']} | {r['kv_len']} | "
              f"{r['kv_bytes'] / 1e6:.0f} | {r['median_us']:.1f} | {r['gbps']:.0f} | "
              f"{100 * r['fraction_of_copy']:.1f}% | {sdpa} |")


if __name__ == "__main__":
    main()
