"""tools/gpu_sanitizers.py against fake tools: a compute-sanitizer that runs a job in a set time and
prints what the real one does, an nvidia-smi with two GPUs, and a test program that lists one
search-space test. No GPU needed."""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, "tools", "gpu_sanitizers.py")

FAKES = {
    # Every shard takes JOB_S seconds; shard 3 reports a hazard, shard 5 fails its test.
    "compute-sanitizer": """#!/bin/sh
sleep "${JOB_S:-0.3}"
case "$TILEOPS_TEST_SHARD" in
  3/*) cat <<'LOG'
========= Error: Potential RAW hazard detected at __shared__ 0x38a80 in block (0,0,1) :
=========     Write Thread (192,0,0) at tileops::seesaw_update_max(const float (&)[8][4], float *)+0x9a20 in mla_decode_seesaw.cuh:264
=========     Read Thread (64,0,0) at void tileops::mla_decode_seesaw_kernel<__nv_bfloat16, (int)0>(tileops::MlaDecodeArgs)+0xe090 in mla_decode_seesaw.cuh:453
=========     Current Value : 0
========= Error: Potential RAW hazard detected at __shared__ 0x38a81 in block (0,0,1) :
=========     Write Thread (196,0,0) at tileops::seesaw_update_max(const float (&)[8][4], float *)+0x9a50 in mla_decode_seesaw.cuh:264
=========     Read Thread (68,0,0) at void tileops::mla_decode_seesaw_kernel<__nv_bfloat16, (int)0>(tileops::MlaDecodeArgs)+0xe090 in mla_decode_seesaw.cuh:453
========= Error: Potential WAR hazard detected at __shared__ 0x100 in block (3,0,0) :
=========     Read Thread (0,0,0) at tileops::consume()+0x10 in flash_queue.cuh:40
=========     Write Thread (32,0,0) at tileops::produce()+0x20 in flash_queue.cuh:52
========= RACECHECK SUMMARY: 3 hazards displayed (2750 errors, 0 warnings)
LOG
      exit 99 ;;
  5/*) echo "test cases: 1 | 0 passed | 1 failed"; exit 1 ;;
esac
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
echo "All tests passed (3 assertions in 1 test case) on GPU $CUDA_VISIBLE_DEVICES"
""",
    "nvidia-smi": """#!/bin/sh
echo "GPU 0: Fake (UUID: GPU-0)"
echo "GPU 1: Fake (UUID: GPU-1)"
""",
    "tileops_tests": """#!/bin/sh
echo "<Catch2TestRun><TestCase><Name>Every row-op config [many, rows]</Name></TestCase></Catch2TestRun>"
""",
}


class GpuSanitizersTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.dir.name, "bin")
        os.makedirs(self.bin)
        for name, text in FAKES.items():
            path = os.path.join(self.bin, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)

    def tearDown(self):
        self.dir.cleanup()

    def run_runner(self, out, *args, job_s=0.3):
        env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"], JOB_S=str(job_s))
        done = subprocess.run([sys.executable, RUNNER, "--tests", os.path.join(self.bin, "tileops_tests"),
                               "--tools", "racecheck", "--families", "rows", "--search-space-only", "--shards", "8",
                               "--out", out, *args], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(out, "summary.json")) as f:
            return {r["shard"]: r for r in json.load(f)}, done.stdout

    def test_every_shard_once_over_both_gpus_with_what_each_found(self):
        results, table = self.run_runner(os.path.join(self.dir.name, "all"))
        self.assertEqual(sorted(results), [f"{i}/8" for i in range(8)])
        self.assertEqual(results["3/8"]["state"], "errors")
        self.assertEqual(results["3/8"]["reported"], 2750)  # all of them, not the 3 shown
        self.assertEqual(results["3/8"]["hazard_sites"],
                         {"RAW mla_decode_seesaw.cuh:264 -> mla_decode_seesaw.cuh:453": 2,
                          "WAR flash_queue.cuh:40 -> flash_queue.cuh:52": 1})
        self.assertNotIn("hazard_sites", results["0/8"])
        self.assertEqual(results["5/8"]["state"], "tests failed")
        clean = [s for s, r in results.items() if r["state"] == "clean"]
        self.assertEqual(len(clean), 6)
        self.assertEqual({r["gpu"] for r in results.values()}, {0, 1})
        self.assertIn("racecheck  rows         6 clean, 1 errors, 1 tests failed", table)

    def test_name_contains_keeps_only_the_tests_it_names(self):
        kept, _ = self.run_runner(os.path.join(self.dir.name, "kept"), "--name-contains", "row-op")
        self.assertEqual(sorted(kept), [f"{i}/8" for i in range(8)])
        none, table = self.run_runner(os.path.join(self.dir.name, "none"), "--name-contains", "gemv")
        self.assertEqual(none, {})
        self.assertNotIn("racecheck", table)

    def test_start_by_leaves_jobs_for_a_later_run_that_done_skips(self):
        first_out = os.path.join(self.dir.name, "first")
        # Two GPUs, jobs of 1 s, none started after 1.5 s: the first two run to their end (the
        # deadline is far), the others are left for the next run.
        first, _ = self.run_runner(first_out, "--start-by-s", "1.5", "--deadline-s", "60", job_s=1)
        ran = {s for s, r in first.items() if r["state"] != "not run"}
        self.assertGreaterEqual(len(ran), 2)
        self.assertLess(len(ran), 8)
        self.assertNotIn("deadline", {first[s]["state"] for s in ran})
        second, _ = self.run_runner(os.path.join(self.dir.name, "second"), "--done",
                                    os.path.join(first_out, "summary.json"))
        self.assertEqual(set(second), set(first) - ran)

    def test_deadline_kills_what_still_runs(self):
        results, _ = self.run_runner(os.path.join(self.dir.name, "cut"), "--deadline-s", "1", job_s=5)
        states = sorted(r["state"] for r in results.values())
        self.assertEqual(states.count("deadline"), 2)  # one a GPU, killed
        self.assertEqual(states.count("not run"), 6)


if __name__ == "__main__":
    unittest.main()
