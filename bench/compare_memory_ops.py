#!/usr/bin/env python3
"""Joins bench_memory_ops and torch_peers JSON into one markdown table (for bench/README.md).

    python3 bench/compare_memory_ops.py tileops.json torch.json
"""
import json
import sys


def main():
    ours = json.load(open(sys.argv[1]))
    peers = {(r["op"], r["rows"], r["cols"], r["dtype"]): r for r in json.load(open(sys.argv[2]))["ops"]}
    print(f"Device: {ours['device']} ({ours['arch']}); measured copy bandwidth {ours['copy_gbps']:.0f} GB/s\n")
    print("| op | shape | dtype | tileops us | tileops GB/s | % of copy | torch eager us | torch.compile us | vs eager | vs compile |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in ours["ops"]:
        p = peers.get((r["op"], r["rows"], r["cols"], r["dtype"]), {})
        eager, comp = p.get("eager_us"), p.get("compile_us")
        fmt = lambda v: f"{v:.1f}" if v else "-"
        ratio = lambda v: f"{v / r['median_us']:.2f}x" if v else "-"
        print(f"| {r['op']} | {r['rows']}x{r['cols']} | {r['dtype']} | {r['median_us']:.1f} | {r['gbps']:.0f} | "
              f"{100 * r['fraction_of_copy']:.1f}% | {fmt(eager)} | {fmt(comp)} | {ratio(eager)} | {ratio(comp)} |")
    launch = ours.get("launch")
    if launch:
        print(f"\nHost cost per call on a cache hit: raw cuLaunchKernel {launch['raw_cuLaunchKernel_us']:.2f} us, "
              f"Op::run {launch['op_run_us']:.2f} us (overhead {launch['overhead_us']:.2f} us)")


if __name__ == "__main__":
    main()
