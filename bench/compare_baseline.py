#!/usr/bin/env python3
"""Compares benchmark results with a stored per-GPU baseline and flags regressions.

    python3 bench/compare_baseline.py --baseline bench/baselines/h100.json RESULT.json [RESULT.json ...]
                                      [--tol 0.05] [--all]

Each RESULT.json is the --json output of bench_memory_ops, bench_decode_attention,
bench_flash_attention, bench_gemm, bench_mla_decode or bench_launch_floor; the program is told
from the file's layout. Problems are matched by (bench program, problem label), the label built
from a result row as below (the same labels the baseline holds):

    bench_memory_ops        "{op} {rows}x{cols} {dtype}"                  median_us
    bench_decode_attention  "{layout} {batch}x{heads}/{kv_heads}x{kv_len}"   median_us
    bench_mla_decode        "{layout} {batch}x{heads}x{kv_len}"           median_us
    bench_flash_attention   the row's "case", as written                  median_us
    bench_gemm              "{shape} {m}x{n}x{k} {dtype} {layout}"        tileops_us
    bench_launch_floor      the row's "name", as written                  us

A bench_gemm row run with --only (shape "only") matches the baseline problem of the same
M x N x K, dtype and layout. A problem measured in several result files takes the median.

A problem regresses when now > baseline x (1 + tol). The table lists every matched problem
(--all) or only those outside +-tol (default); problems present on one side only are listed
and are not failures. Exit status: 1 if any problem regressed, 2 on bad input, 0 otherwise.
"""
import argparse
import json
import signal
import statistics
import sys


def rows_of(doc):
    """(bench program, [(label, us, note)]) of one result file, or (None, reason)."""
    if "ops" in doc:
        rows = doc["ops"]
        if rows and "median_us" not in rows[0]:
            return None, "torch peers' output (no median_us), not a bench result"
        return "bench_memory_ops", [(f"{r['op']} {r['rows']}x{r['cols']} {r['dtype']}", r["median_us"], None) for r in rows]
    if "results" in doc:
        dtype, layout = doc.get("dtype", "bf16"), doc.get("layout", "nt")
        return "bench_gemm", [(f"{r['shape']} {r['m']}x{r['n']}x{r['k']} {dtype} {layout}", r["tileops_us"], None)
                              for r in doc["results"]]
    if "rows" in doc:
        return "bench_launch_floor", [(r["name"], r["us"], None) for r in doc["rows"]]
    if "cases" in doc:
        cases = doc["cases"]
        if not cases:
            return None, "no cases"
        first = cases[0]
        if "case" in first:
            if "flash" in first or "cudnn" in first:
                return None, "torch peers' output, not a bench result"
            out = []
            for r in cases:
                note = None
                if r.get("error"):
                    note = "error: " + r["error"].splitlines()[0]
                elif not r.get("output_finite", True):
                    note = "non-finite output"
                out.append((r["case"], r.get("median_us"), note))
            return "bench_flash_attention", out
        if "median_us" not in first:
            return None, "torch peers' output (no median_us), not a bench result"
        if "kv_heads" in first:
            return "bench_decode_attention", [
                (f"{r['layout']} {r['batch']}x{r['heads']}/{r['kv_heads']}x{r['kv_len']}", r["median_us"], None) for r in cases]
        return "bench_mla_decode", [(f"{r['layout']} {r['batch']}x{r['heads']}x{r['kv_len']}", r["median_us"], None)
                                    for r in cases]
    return None, "not the output of a known bench program"


def gemm_dims(label):
    """'only 1024x1024x1024 bf16 nt' -> '1024x1024x1024 bf16 nt'."""
    return label.split(" ", 1)[1] if " " in label else label


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="baseline JSON, e.g. bench/baselines/h100.json")
    ap.add_argument("--tol", type=float, default=0.05, help="allowed slowdown as a fraction (default 0.05)")
    ap.add_argument("--all", action="store_true", help="list every matched problem, not only those outside +-tol")
    ap.add_argument("results", nargs="+", help="--json output of the bench programs")
    args = ap.parse_args()
    if args.tol < 0:
        ap.error("--tol must be >= 0")

    try:
        base_doc = json.load(open(args.baseline))
        baseline = {}
        for family in base_doc["families"].values():
            for p in family["problems"]:
                baseline[(p["bench"], p["problem"])] = p["us"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"compare_baseline: cannot read the baseline {args.baseline}: {e!r}", file=sys.stderr)
        return 2
    base_gpu = base_doc.get("metadata", {}).get("gpu")

    measured = {}  # (bench, label) -> [us, ...]
    notes = []
    benches_run = set()
    for path in args.results:
        try:
            doc = json.load(open(path))
        except (OSError, ValueError) as e:
            print(f"compare_baseline: {path}: {e}", file=sys.stderr)
            return 2
        bench, rows = rows_of(doc)
        if bench is None:
            print(f"compare_baseline: {path}: skipped ({rows})", file=sys.stderr)
            continue
        device = doc.get("device")
        if base_gpu and device and device != base_gpu:
            print(f"warning: {path} ran on {device}, the baseline on {base_gpu}", file=sys.stderr)
        benches_run.add(bench)
        for label, us, note in rows:
            if bench == "bench_gemm" and label.startswith("only "):
                dims = gemm_dims(label)
                label = next((lab for b, lab in baseline if b == bench and gemm_dims(lab) == dims), label)
            if note or us is None:
                notes.append(f"{bench} {label}: {note or 'no time'} ({path})")
                continue
            measured.setdefault((bench, label), []).append(us)
    if not benches_run:
        print("compare_baseline: no bench results among the files", file=sys.stderr)
        return 2

    matched = sorted(k for k in measured if k in baseline)
    only_now = sorted(k for k in measured if k not in baseline)
    only_base = sorted(k for k in baseline if k[0] in benches_run and k not in measured)

    regressions = faster = 0
    lines = []
    for key in matched:
        base_us, now_us = baseline[key], statistics.median(measured[key])
        ratio = now_us / base_us
        flag = ""
        if now_us > base_us * (1 + args.tol):
            flag, regressions = "REGRESSION", regressions + 1
        elif now_us < base_us * (1 - args.tol):
            flag, faster = "faster", faster + 1
        if flag or args.all:
            lines.append((key[0], key[1], base_us, now_us, ratio, flag))
    width = max([len(l[1]) for l in lines] + [7])
    print(f"baseline {args.baseline} ({base_gpu}, {base_doc.get('metadata', {}).get('date')}); tolerance {args.tol:.0%}")
    if lines:
        print(f"\n{'bench':<22} {'problem':<{width}} {'base us':>10} {'now us':>10} {'now/base':>8}")
        for bench, label, base_us, now_us, ratio, flag in lines:
            print(f"{bench:<22} {label:<{width}} {base_us:>10.2f} {now_us:>10.2f} {ratio:>8.3f}  {flag}")
    if only_now:
        print(f"\nmeasured, not in the baseline ({len(only_now)}):")
        for bench, label in only_now:
            print(f"  {bench} {label}")
    if only_base:
        print(f"\nin the baseline, not measured ({len(only_base)}):")
        for bench, label in only_base:
            print(f"  {bench} {label}")
    if notes:
        print(f"\nwithout a time ({len(notes)}):")
        for note in notes:
            print(f"  {note}")
    print(f"\n{len(matched)} matched: {regressions} regressed (> +{args.tol:.0%}), {faster} faster (< -{args.tol:.0%}), "
          f"{len(matched) - regressions - faster} within tolerance")
    return 1 if regressions else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    sys.exit(main())
