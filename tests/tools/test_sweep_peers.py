"""bench/sweep_peers.py --recheck-below against a fake bench_problems and a fake torch peer: no GPU or
torch needed. The scripts run from a copy of bench/ whose torch_rows_peers.py is the fake."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")


def fake_timer(side, results):
    """A script that takes bench_problems' arguments, logs "SIDE N" and writes `results`, a JSON
    expression over `problems` and `run` (how many runs of this side came before)."""
    return f"""#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
problems = [args[i + 1] for i, a in enumerate(args) if a == "--problem"]
log = os.environ["SWEEP_LOG"]
run = sum(1 for line in open(log) if line.startswith("{side}")) if os.path.exists(log) else 0
open(log, "a").write(f"{side} {{len(problems)}}\\n")
json.dump({results}, open(args[args.index("--json") + 1], "w"))
"""


# Every run appends "ours N" or "peer N" (N problems) to $SWEEP_LOG. Ours takes 10 us a problem;
# its first run adds 5 us to softmax problems (a slow process), its second run 1 us to all. The
# peer takes 11 us; its eager and torch.compile figures differ by run, so that the medians of each
# are not one run's.
FAKE_BENCH = fake_timer("ours", """{"device": "Fake GPU", "copy_gbps": 3000.0, "results": [
    {"problem": p, "median_us": us, "fraction_of_copy": 10.0 / us, "config": "{x=1}"}
    for p in problems
    for us in [10.0 + (5.0 if run == 0 and p.startswith("softmax") else 0.0) + (1.0 if run == 1 else 0.0)]]}""")

FAKE_PEER = fake_timer("peer", """{"device": "Fake GPU", "cases": [
    {"problem": p, "eager_us": eager, "compile_us": compile_us, "best_us": min(eager, compile_us)}
    for p in problems
    for eager, compile_us in [[(11.0, 12.0), (13.0, 11.5), (12.0, 30.0)][run % 3]]]}""")


class SweepRecheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.bench = os.path.join(self.dir.name, "bench")
        shutil.copytree(BENCH, self.bench, ignore=shutil.ignore_patterns("torch_*.py", "__pycache__"))
        for name, text in (("torch_rows_peers.py", FAKE_PEER), ("bench_problems", FAKE_BENCH)):
            with open(os.path.join(self.bench, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(self.bench, name), 0o755)
        self.log = os.path.join(self.dir.name, "runs.log")

    def tearDown(self):
        self.dir.cleanup()

    def sweep(self, *extra):
        out = os.path.join(self.dir.name, "sweep.json")
        family = [] if "--family" in extra else ["--family", "rows"]
        result = subprocess.run([sys.executable, os.path.join(self.bench, "sweep_peers.py"), *family,
                                 "--bench", os.path.join(self.bench, "bench_problems"), "--json", out, *extra],
                                capture_output=True, text=True, env=dict(os.environ, SWEEP_LOG=self.log))
        if result.returncode != 0:
            return result, None
        with open(out) as f:
            return result, json.load(f)

    def runs(self):
        with open(self.log) as f:
            return f.read().split()

    def test_rechecks_only_the_problems_below_the_bound_in_alternating_rounds(self):
        result, report = self.sweep("--recheck-below", "1.0", "--recheck-rounds", "3")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {r["problem"]: r for r in report["rows"]}
        slow = [p for p in rows if p.startswith("softmax")]
        self.assertTrue(slow)
        # The first pass: ours 10 us (softmax 15), the peer's faster figure 11 us.
        for problem, row in rows.items():
            if problem.startswith("softmax"):
                self.assertEqual(row["first_pass"], {"us": 15.0, "peer_us": 11.0, "speedup": 11.0 / 15.0})
                # Ours over the 3 rounds: 11, 10, 10 (runs 1-3); the peer's eager 13, 12, 11 and
                # torch.compile 11.5, 30, 12: medians 10, 12 and 12, the faster 12.
                self.assertEqual(row["rounds"], 3)
                self.assertEqual(row["us"], 10.0)
                self.assertEqual(row["peer"]["eager_us"], 12.0)
                self.assertEqual(row["peer"]["compile_us"], 12.0)
                self.assertEqual(row["peer_us"], 12.0)
                self.assertAlmostEqual(row["speedup"], 1.2)
            else:
                self.assertNotIn("first_pass", row)
                self.assertAlmostEqual(row["speedup"], 1.1)
        # The first pass over all problems, then ours and the peer in turn over just the slow ones,
        # who goes first alternating.
        runs = self.runs()
        total = str(len(rows))
        n = str(len(slow))
        self.assertEqual(runs, ["ours", total, "peer", total, "ours", n, "peer", n, "peer", n, "ours", n, "ours", n,
                                "peer", n])
        self.assertEqual(report["summary"]["below_peer"], 0)
        self.assertIn("re-timed; first pass 0.73x", result.stdout)

    def test_without_the_option_nothing_is_timed_twice(self):
        result, report = self.sweep()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.runs()), 4)
        self.assertTrue(all("first_pass" not in r for r in report["rows"]))
        self.assertGreater(report["summary"]["below_peer"], 0)

    def test_grouped_rows_come_from_one_script_and_skip_what_the_peer_refused(self):
        # Ours 10 us a problem; torch._grouped_mm 12 us, refusing the problems of 8 experts.
        with open(os.path.join(self.bench, "bench_gemm_grouped.py"), "w") as f:
            f.write(fake_timer("grouped", """{"device": "Fake GPU", "results": [
    {"problem": p, "us": 10.0, "max_rows": 1, "active": 1,
     "grouped_mm_us": None if p.split()[1].startswith("8x") else 12.0, "error": "refused"}
    for p in problems]}"""))
        result, report = self.sweep("--family", "gemm_grouped")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.runs()[0], "grouped")
        rows = report["rows"]
        self.assertTrue(rows)
        self.assertTrue(all(not r["problem"].split()[1].startswith("8x") for r in rows))
        self.assertIn("the peer failed: refused", result.stdout)
        for row in rows:
            self.assertAlmostEqual(row["speedup"], 1.2)
            _, m, n, k = (int(d) for d in row["problem"].split()[1].split("x"))
            self.assertAlmostEqual(row["tflops"], 2.0 * m * n * k / 10.0 / 1e6)

    def test_mla_rows_count_tensor_throughput_and_split_the_copy_target_by_heads(self):
        # Every sequence holds 1000 tokens (1152 bytes each); each batch takes 100 us.
        with open(os.path.join(self.bench, "bench_decode_lengths.py"), "w") as f:
            f.write(fake_timer("mla", """{"device": "Fake GPU", "copy_gbps": 3000.0, "results": [
    {"problem": p, "lengths": [1000] * b, "kv_bytes": 1152 * 1000 * b, "us": 100.0,
     "fraction_of_copy": 1152 * 1000 * b / 100e-6 / 3000e9}
    for p in problems for b in [int(p.split()[1].split("x")[0])]]}"""))
        result, report = self.sweep("--family", "mla")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = report["rows"]
        for row in rows:
            batch, heads, q_len, _ = (int(d) for d in row["problem"].split()[1].split("x"))
            self.assertAlmostEqual(row["tflops"], 2.0 * heads * q_len * 1000 * batch * (576 + 512) / 100.0 / 1e6)
        big = [r for r in rows if r["kv_bytes"] >= 64e6]
        heads = [int(r["problem"].split()[1].split("x")[1]) for r in big]
        stats = report["summary"]["at_least_64mb"]
        self.assertEqual(stats["problems"], len(big))
        self.assertEqual(stats["bandwidth_bound"], sum(h < 128 for h in heads))
        self.assertEqual(stats["tensor_bound"], sum(h >= 128 for h in heads))
        self.assertGreater(stats["bandwidth_bound"], 0)
        self.assertGreater(stats["tensor_bound"], 0)
        self.assertIn("bound by the tensor cores", result.stdout)

    def test_refuses_a_recheck_of_decode_and_zero_rounds(self):
        result, _ = self.sweep("--recheck-rounds", "0")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--recheck-rounds must be at least 1", result.stderr)
        result = subprocess.run([sys.executable, os.path.join(self.bench, "sweep_peers.py"), "--family", "decode",
                                 "--recheck-below", "0.9"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertIn("nothing to re-time", result.stderr)


class SweepProblemsTest(unittest.TestCase):
    def test_every_family_draws_distinct_problems(self):
        # A problem drawn twice would count twice in the geomean and among the shapes below the peer.
        script = os.path.join(BENCH, "sweep_peers.py")
        listed = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, check=True).stdout
        families = listed[listed.index("{") + 1:listed.index("}")].split(",")
        self.assertGreaterEqual(len(families), 11)
        for family in families:
            listed = subprocess.run([sys.executable, script, "--family", family, "--list"], capture_output=True,
                                    text=True, check=True).stdout.split("\n")
            problems = [p for p in listed if p]
            self.assertEqual(len(problems), len(set(problems)), family)

    @unittest.skipUnless(os.environ.get("TILEOPS_TUNE_EXE"), "needs TILEOPS_TUNE_EXE (set by ctest)")
    def test_every_family_draws_problems_the_ops_accept(self):
        # A problem the op refuses would stop a sweep on the GPU; tileops-tune explain checks
        # them all here (for sm_90a, where every op runs).
        sys.path.insert(0, BENCH)
        import heuristic_check
        import sweep_peers
        with tempfile.TemporaryDirectory() as dir:
            for family, draw in sorted(sweep_peers.PROBLEMS.items()):
                path = os.path.join(dir, family + ".json")
                with open(path, "w") as f:
                    json.dump({"problems": [heuristic_check.parse(text) for text in draw(random.Random(1))]}, f)
                explained = subprocess.run([os.environ["TILEOPS_TUNE_EXE"], "explain", "--arch", "sm_90a", "--workload",
                                            path], capture_output=True, text=True)
                self.assertEqual(explained.returncode, 0, f"{family}: {explained.stderr}")


if __name__ == "__main__":
    unittest.main()
