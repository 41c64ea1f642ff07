#!/usr/bin/env python3
"""Runs the [gpu] tests under compute-sanitizer, one test case and tool a job, the jobs spread
over every visible GPU (--jobs-per-gpu at a time on each, default one), and writes what each found.

    tools/gpu_sanitizers.py --tests build/tests/tileops_tests --tools memcheck,racecheck \
        --families gemm,decode --out results/ [--deadline-s 540] [--done earlier/summary.json]

Each job's log goes to OUT/logs/; OUT/summary.json (rewritten as each job ends, so a run cut
short keeps what it finished) and the table printed at the end say per job: clean, the errors the
tool reported, the tests that failed, or that it ran out of time (a job still running at the
deadline is killed and reported as such; one not started is "not run"). --start-by-s starts no job
after that long: a test that takes minutes under a tool then waits for the next run.
--done skips the jobs an earlier summary finished, so a long pass can be split over several runs.
--shards N runs each [search_space] test as N jobs, each on its share of the configs;
--search-space-only leaves the families' other tests out; otherwise the search-space tests run
after all the others. --name-contains TEXT keeps only the tests whose name holds TEXT.
The [cli] family is left out: its [gpu] test runs deliberately faulty kernels in the tuning worker.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

FAMILIES = {
    "gemm": "[gpu][gemm]",
    "gemm_fp8": "[gpu][gemm_fp8],[gpu][gemm_fp8_grouped]",
    "gemm_grouped": "[gpu][gemm_grouped]",
    "quantize": "[gpu][quantize]",
    "moe_routing": "[gpu][moe_routing]",
    "rows": "[gpu][rmsnorm],[gpu][layernorm],[gpu][softmax]",
    "elementwise": "[gpu][elementwise]",
    "decode": "[gpu][decode]",
    "mla": "[gpu][mla]",
    "flash": "[gpu][flash]",
    "embedding": "[gpu][embedding]",
    "rope": "[gpu][rope]",
    "sampling": "[gpu][sampling]",
    "runtime": "[gpu][runtime]",
    "tuning": "[gpu][tuning]",
}
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def test_names(tests, spec):
    listing = subprocess.run([tests, spec, "--list-tests", "--reporter", "xml"], capture_output=True, text=True,
                             check=True).stdout
    return [m.strip() for m in re.findall(r"<Name>(.*?)</Name>", listing, re.S)]


def exact_spec(name):
    """A Catch2 test spec that selects the test named `name` alone."""
    name = name.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    return '"' + re.sub(r'([\\,\[\]*"])', r"\\\1", name) + '"'


def gpu_count():
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return max(1, len([line for line in out.splitlines() if line.startswith("GPU ")]))


HAZARD = re.compile(r"Error: Potential (\w+) hazard")
ACCESS_SITE = re.compile(r"(?:Write|Read) Thread \(.*\) at .* in (\S+:\d+)")


def hazard_sites(log):
    """How many of the shown racecheck hazards each pair of source lines has, as
    "RAW a.cuh:264 -> a.cuh:453" (the two accesses in the tool's order): thousands of reports
    that share one pair are one hand-off to look at."""
    sites = {}
    kind, accesses = None, []
    for line in log.splitlines():
        hazard = HAZARD.search(line)
        if hazard:
            kind, accesses = hazard.group(1), []
            continue
        access = ACCESS_SITE.search(line)
        if kind and access:
            accesses.append(access.group(1))
            if len(accesses) == 2:
                key = f"{kind} {accesses[0]} -> {accesses[1]}"
                sites[key] = sites.get(key, 0) + 1
                kind = None
    return sites


def summarize(log, returncode, timed_out):
    errors = re.findall(r"ERROR SUMMARY: (\d+) error", log)
    # "100 hazards displayed (27648 errors, 0 warnings)": the tool shows at most 100; count them all.
    hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazards? displayed(?: \((\d+) errors?)?", log)
    tests = re.findall(r"test cases: .*|All tests passed.*", log)
    reported = sum(int(n) for n in errors) + sum(int(total or shown) for shown, total in hazards)
    # The tool's own warnings, once each: "overflow of tracked cuda::barrier structures" means
    # it lost track of mbarriers and what it reports (or a fault it causes) cannot be trusted.
    warnings = sorted(set(re.findall(r"=+ Warning: (.*)", log)))
    if timed_out:
        state = "deadline"
    elif any("overflow of tracked cuda::barrier" in w for w in warnings):
        state = "barrier overflow"
    elif reported:
        state = "errors"
    elif returncode != 0:
        state = "tests failed"
    else:
        state = "clean"
    result = {"state": state, "reported": reported, "tests": tests[-1] if tests else "", "warnings": warnings}
    sites = hazard_sites(log)
    if sites:
        result["hazard_sites"] = sites
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, help="the tileops_tests executable")
    parser.add_argument("--tools", default="memcheck,racecheck,synccheck")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--out", required=True)
    parser.add_argument("--deadline-s", type=float, default=540, help="kill what still runs after this long")
    parser.add_argument("--start-by-s", type=float, default=None,
                        help="start no job after this long (default: the deadline), so that one that needs "
                             "minutes is left for the next run rather than started only to be killed")
    parser.add_argument("--gpus", help="the GPU ordinals to use (default: every visible one)")
    parser.add_argument("--jobs-per-gpu", type=int, default=1,
                        help="jobs run at once on each GPU (default 1; under racecheck 8 jobs on one H100 "
                             "finished none of 8 shards in 430 s where one alone took 177 s)")
    parser.add_argument("--num-cuda-barriers", type=int, default=0,
                        help="mbarriers per block racecheck and synccheck should track (0: the tool counts them; "
                             "it does not count the kernels' raw shared-memory mbarriers)")
    parser.add_argument("--shards", type=int, default=1,
                        help="split each [search_space] test into this many jobs (TILEOPS_TEST_SHARD=i/n), "
                             "so a slow tool covers its configs on several GPUs at once")
    parser.add_argument("--search-space-only", action="store_true",
                        help="run only the [search_space] tests of the families")
    parser.add_argument("--done", action="append", default=[], help="an earlier summary.json: skip what it finished")
    parser.add_argument("--name-contains", action="append", default=[],
                        help="keep only the tests whose name holds this text (repeatable: any of them), e.g. one "
                             "search-space test after its kernel changed")
    args = parser.parse_args()
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    finished = set()
    for path in args.done:
        with open(path) as f:
            finished |= {(r["tool"], r["test"], r.get("shard")) for r in json.load(f)
                         if r["state"] not in ("deadline", "not run")}
    names = {}
    for family in args.families.split(","):
        if family not in FAMILIES:
            sys.exit(f"unknown family {family}; known: {', '.join(FAMILIES)}")
        names[family] = test_names(args.tests, FAMILIES[family])
    search_space = set(test_names(args.tests, "[search_space]"))
    if args.search_space_only:
        names = {family: [n for n in family_names if n in search_space] for family, family_names in names.items()}
    if args.name_contains:
        names = {family: [n for n in family_names if any(text in n for text in args.name_contains)]
                 for family, family_names in names.items()}
    sharded = search_space if args.shards > 1 else set()
    shards = [f"{i}/{args.shards}" for i in range(args.shards)]
    jobs = []  # (tool, family, test name, shard or None)
    for tool in args.tools.split(","):
        if tool not in TOOLS:
            sys.exit(f"unknown tool {tool}; known: {', '.join(TOOLS)}")
        for family in names:
            jobs += [(tool, family, name, shard) for name in names[family]
                     for shard in (shards if name in sharded else [None]) if (tool, name, shard) not in finished]
    # The search-space tests last: they take the longest (minutes each under a tool), so a
    # deadline cuts them rather than the families' other tests.
    jobs.sort(key=lambda job: job[2] in search_space)

    start = time.monotonic()
    start_by = args.deadline_s if args.start_by_s is None else min(args.start_by_s, args.deadline_s)
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(gpu_count()))
    slots = [(gpu, k) for gpu in gpus for k in range(max(1, args.jobs_per_gpu))]
    running = {}  # slot -> (job, process, log file, started)
    results = []

    def write_summary():
        # Rewritten after every job, so a run cut short still leaves what it finished.
        path = os.path.join(args.out, "summary.json")
        with open(path + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(path + ".tmp", path)

    def finish(slot, timed_out):
        (tool, family, name, shard), process, log_file, started = running.pop(slot)
        if timed_out:
            process.kill()
        process.wait()
        log_file.close()
        with open(log_file.name, errors="replace") as f:
            log = f.read()
        result = {"tool": tool, "family": family, "test": name, "shard": shard, "gpu": slot[0],
                  "seconds": round(time.monotonic() - started, 1)}
        result.update(summarize(log, process.returncode, timed_out))
        results.append(result)
        print(json.dumps(result), flush=True)
        write_summary()

    while jobs or running:
        for slot in slots:
            if slot not in running and jobs and time.monotonic() - start < start_by:
                tool, family, name, shard = jobs.pop(0)
                log_name = f"{tool}-{family}-{len(results) + len(running)}.log"
                log_file = open(os.path.join(args.out, "logs", log_name), "w")
                command = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "99"]
                if tool == "racecheck":
                    command += ["--racecheck-report", "hazard"]
                if tool in ("racecheck", "synccheck") and args.num_cuda_barriers > 0:
                    command += ["--num-cuda-barriers", str(args.num_cuda_barriers)]
                command += [args.tests, exact_spec(name)]
                env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(slot[0]))
                if shard:
                    env["TILEOPS_TEST_SHARD"] = shard
                process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
                running[slot] = ((tool, family, name, shard), process, log_file, time.monotonic())
        for slot in list(running):
            if running[slot][1].poll() is not None:
                finish(slot, False)
            elif time.monotonic() - start > args.deadline_s:
                finish(slot, True)
        if not running and time.monotonic() - start >= start_by:
            break
        time.sleep(1)
    for tool, family, name, shard in jobs:
        results.append({"tool": tool, "family": family, "test": name, "shard": shard, "state": "not run"})
    write_summary()
    table = {}
    for r in results:
        row = table.setdefault((r["tool"], r["family"]), {})
        row[r["state"]] = row.get(r["state"], 0) + 1
    for (tool, family), states in sorted(table.items()):
        print(f"{tool:<10} {family:<12} " + ", ".join(f"{n} {state}" for state, n in sorted(states.items())))


if __name__ == "__main__":
    main()
