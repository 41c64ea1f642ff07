"""Timing of torch peers, the same method as the C++ benchmarks (bench_common.hpp): CUDA events,
3 warm-up runs, a 128 MB read before each timed run so inputs come from HBM, then a GPU sleep
of about 0.5 ms so that Python's dispatch is not timed, median."""


def time_ms(fn, repeats):
    """Median milliseconds of fn() over `repeats` timed runs."""
    import torch  # here, so that scripts can list their cases without torch

    flush = torch.ones(32 << 20, dtype=torch.int32, device="cuda")
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        flush.sum()  # a read: leaves L2 clean (a fill would leave ~50 MB of dirty lines to write back in the timed run)
        # Keeps the GPU busy (~0.5 ms) while Python records the start event and dispatches fn, so
        # that no host time falls inside the timed window (ours, in C++, is covered by the flush
        # alone). 50 us may not cover a call through tileops_jit's bindings: a decode batch timed
        # 96.5 us from Python after 50 us against 86.6 in tileops-tune (H200, two runs).
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(1_000_000)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def save_results(path, cases):
    """Writes the cases, with the GPU and torch's version, to the JSON file `path` ('' writes none)."""
    if not path:
        return
    import json

    import torch

    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": cases}, f, indent=2)


def run_problems(time_problem, problem_help, line):
    """The main of a peer script over bench_problems' problem names: parses --problem (repeatable),
    --repeats and --json, times each problem with time_problem(text, repeats) -> row, prints
    line(row) and saves the rows so far after each one."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--problem", action="append", default=[], help=f"'{problem_help}', repeatable")
    args = parser.parse_args()
    results = []
    for text in args.problem:
        row = time_problem(text, args.repeats)
        results.append(row)
        print(line(row), flush=True)
        save_results(args.json, results)
