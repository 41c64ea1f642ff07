#!/usr/bin/env python3
"""How close an op's heuristic comes to tuning on shapes no tuning database holds (the target: an
untuned shape within 10% of what tuning it finds).

    python3 bench/heuristic_check.py workload --family gemm --count 48 -o held_out.json
    tileops-tune tune --workload held_out.json --db scratch.json --json > tuned.json   # on the GPU
    python3 bench/heuristic_check.py report tuned.json

With --chunk N, `workload` also writes the problems N at a time (held_out_0.json, held_out_1.json,
...), for tunes that must each end within a time limit; `report` takes all their outputs at once.

`workload` draws problems with sweep_peers.py's generator for the family, from seeds other than
the sweep's (none of them is a sweep problem), leaving out every shape a shipped database
(tuning_db/*.json) holds and, for GEMM and prefill, problems above --max-gflop (tuning time).
Decode batches are tuned at their longest length (the tune key has no length spread).
`report` reads what `tune --json` printed: each problem's tuned median and its heuristic config's
median, both timed in the same tune, and prints them worst first with the geomean and the count
within 10%.
"""
import argparse
import glob
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_peers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(problem):
    """'op AxB dtype [flags] [length spread]' -> a workload problem."""
    words = problem.split()
    op, shape, dtype = words[0], [int(x) for x in words[1].split("x")], words[2]
    flags = [w for w in words[3:] if w not in sweep_peers.DECODE_KINDS]
    return {"op": op, "shape": shape, "dtype": dtype, "flags": flags[0] if flags else ""}


def shipped_keys():
    keys = set()
    for path in glob.glob(os.path.join(ROOT, "tuning_db", "*.json")):
        for e in json.load(open(path))["entries"]:
            keys.add((e["op"], tuple(e["shape"]), e["dtype"], e.get("flags", "")))
    return keys


def workload(args):
    sweep = set(sweep_peers.PROBLEMS[args.family](random.Random(args.sweep_seed)))
    shipped, chosen, seen = shipped_keys(), [], set()
    seed = args.sweep_seed
    while len(chosen) < args.count and seed < args.sweep_seed + 50:
        seed += 1
        drawn = sweep_peers.PROBLEMS[args.family](random.Random(seed))
        random.Random(seed).shuffle(drawn)
        for text in drawn:
            p = parse(text)
            key = (p["op"], tuple(p["shape"]), p["dtype"], p["flags"])
            gflop = sweep_peers.tflops(args.family, text, 1e3) or 0.0  # TFLOP/s over 1 ms: GFLOP
            if text in sweep or key in seen or key in shipped or gflop > args.max_gflop:
                continue
            seen.add(key)
            chosen.append(p)
            if len(chosen) == args.count:
                break
    json.dump({"name": f"{args.family}-held-out", "problems": chosen}, open(args.output, "w"), indent=1)
    print(f"{len(chosen)} {args.family} problems -> {args.output}")
    if args.chunk > 0:
        stem = args.output[:-5] if args.output.endswith(".json") else args.output
        for i in range(0, len(chosen), args.chunk):
            path = f"{stem}_{i // args.chunk}.json"
            json.dump({"name": f"{args.family}-held-out-{i // args.chunk}", "problems": chosen[i:i + args.chunk]},
                      open(path, "w"), indent=1)
            print(f"  {min(args.chunk, len(chosen) - i)} -> {path}")


def report(args):
    results = []
    for path in args.tune_json:
        try:
            tuned = json.load(open(path))
        except (OSError, ValueError) as e:  # a tune cut short prints nothing: say so, use the rest
            print(f"{path}: skipped ({e})", file=sys.stderr)
            continue
        results += tuned.get("results", []) if isinstance(tuned, dict) else tuned
    rows, failed = [], []
    for r in results:
        if "entry" not in r or not r.get("heuristic_median_us"):
            failed.append(r.get("problem", "?"))
            continue
        best, heuristic = r["entry"]["median_us"], r["heuristic_median_us"]
        rows.append((heuristic / best, r["problem"], best, heuristic))
    if not rows:
        sys.exit(f"{', '.join(args.tune_json)}: no tuned problem with a heuristic time")
    rows.sort(reverse=True)
    print("| problem | tuned us | heuristic us | heuristic / tuned |\n|---|---:|---:|---:|")
    for ratio, problem, best, heuristic in rows:
        print(f"| {problem} | {best:.1f} | {heuristic:.1f} | {ratio:.2f} |")
    geomean = math.exp(sum(math.log(r[0]) for r in rows) / len(rows))
    within = sum(r[0] <= 1.1 for r in rows)
    print(f"\n{len(rows)} problems: heuristic / tuned geomean {geomean:.3f}, {within} within 10%, worst {rows[0][0]:.2f}")
    if failed:
        print(f"{len(failed)} without a result: {', '.join(failed)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("workload", help="draw held-out problems into a tune workload")
    w.add_argument("--family", required=True, choices=sorted(sweep_peers.PROBLEMS))
    w.add_argument("--count", type=int, default=48)
    w.add_argument("--sweep-seed", type=int, default=1, help="the sweep's seed: its problems are left out")
    w.add_argument("--max-gflop", type=float, default=2000, help="GEMM / prefill problems above this are left out")
    w.add_argument("-o", "--output", required=True)
    w.add_argument("--chunk", type=int, default=0, help="also write the problems this many a file")
    r = sub.add_parser("report", help="heuristic against tuned, from `tileops-tune tune --json`")
    r.add_argument("tune_json", nargs="+", help="what each `tune --json` printed")
    args = parser.parse_args()
    (workload if args.command == "workload" else report)(args)


if __name__ == "__main__":
    main()
