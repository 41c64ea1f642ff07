#!/usr/bin/env python3
"""The SASS lines where a kernel's warps stalled most, from an ncu report (profiling aid).

    ncu --import R.ncu-rep --page source --print-source sass --csv > src.csv
    python3 bench/ncu_hotspots.py src.csv [--top N] [--column "Instructions Executed"]

Prints each hot line's share of the stall samples (or of another per-line column, such as the
instructions executed), its address and instruction, with the lines just before it for context.
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--column", default="Warp Stall Sampling (All", help="rank by the column whose name starts so")
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.reader(f)]
    header_index = next((i for i, r in enumerate(rows) if "Source" in r and any("Sampling" in c for c in r)), None)
    if header_index is None:
        sys.exit("no header with Source and a stall-sampling column")
    header = rows[header_index]
    source = header.index("Source")
    samples = next((i for i, c in enumerate(header) if c.startswith(args.column)), None)
    if samples is None:
        sys.exit(f"no column starting with {args.column!r}; the columns: {', '.join(header)}")
    address = header.index("Address") if "Address" in header else None
    lines = []
    for r in rows[header_index + 1:]:
        if len(r) <= max(source, samples):
            continue
        try:
            n = float((r[samples] or "0").replace(",", ""))
        except ValueError:
            continue
        lines.append((n, r[address] if address is not None else "", r[source]))
    total = sum(n for n, _, _ in lines) or 1.0
    print(f"{len(lines)} SASS lines, {total:.0f} in all of {header[samples]!r}")
    order = sorted(range(len(lines)), key=lambda i: -lines[i][0])
    for i in order[: args.top]:
        n, addr, text = lines[i]
        print(f"{100 * n / total:5.1f}%  {addr}  {text.strip()}")
        for j in range(max(0, i - 2), i):
            print(f"        {lines[j][1]}  {lines[j][2].strip()}")


if __name__ == "__main__":
    main()
