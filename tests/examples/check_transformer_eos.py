#!/usr/bin/env python3
"""transformer_run ends a sequence at its end-of-sequence token, and the decoding once every
sequence has ended; --ignore-eos runs every step.

  check_transformer_eos.py TRANSFORMER_RUN CONFIG WORK_DIR

A first run with --ignore-eos gives each sequence's tokens; a second run names one token of each
sequence as eos_token_id, so every sequence ends early. Exit status 4 (skipped) without a GPU.
"""
import json
import os
import subprocess
import sys

SKIP = 4
STEPS = 40
EOS_CHECK_STEPS = 16  # how often transformer_run looks for ended sequences


def run(program, config, work, name, *extra):
    report = os.path.join(work, name + ".json")
    result = subprocess.run([program, "--config", config, "--random-weights", "7", "--prompt-lengths", "5,9,3",
                             "--prompt-seed", "3", "--temperature", "1", "--seed", "11", "--steps", str(STEPS), "--report", report, *extra],
                            capture_output=True, text=True)
    if result.returncode == 1 and ("driver" in result.stderr or "device" in result.stderr):
        print(f"no GPU: {result.stderr.strip()}")
        sys.exit(SKIP)
    if result.returncode != 0:
        sys.exit(f"{name}: exit status {result.returncode}\n{result.stdout}\n{result.stderr}")
    with open(report) as f:
        return json.load(f)


def main():
    program, config_path, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    with open(config_path) as f:
        config = json.load(f)
    config.pop("eos_token_id", None)
    plain = os.path.join(work, "config.json")
    with open(plain, "w") as f:
        json.dump(config, f)

    full = run(program, plain, work, "ignore-eos", "--ignore-eos")
    tokens = full["tokens"]
    if full["decode_steps"] != STEPS or any(len(t) != STEPS + 1 for t in tokens):
        sys.exit(f"--ignore-eos ran {full['decode_steps']} steps, tokens {[len(t) for t in tokens]}, not {STEPS}")

    # Sampled (seeded) so tokens vary: one of each sequence's tokens 1-5 that no sequence draws among
    # its first three ends it.
    eos = []
    for t in tokens:
        ends = [x for x in t[1:6] if all(x not in u[:3] for u in tokens)]
        if not ends:
            print("the random model repeats its first tokens; nothing to check")
            sys.exit(SKIP)
        eos.append(ends[0])
    config["eos_token_id"] = sorted(set(eos))
    with_eos = os.path.join(work, "config-eos.json")
    with open(with_eos, "w") as f:
        json.dump(config, f)

    cut = run(program, with_eos, work, "eos")
    failures = []
    if cut["decode_steps"] != EOS_CHECK_STEPS:
        failures.append(f"decoding ran {cut['decode_steps']} steps, not {EOS_CHECK_STEPS}, after every sequence ended")
    for b, (t, c) in enumerate(zip(tokens, cut["tokens"])):
        first = next(i for i, x in enumerate(t) if x in config["eos_token_id"])
        if c != t[:first + 1]:
            failures.append(f"sequence {b}: {c}, expected {t[:first + 1]} (up to its end-of-sequence token)")
    # With --ignore-eos the same config runs every step.
    again = run(program, with_eos, work, "eos-ignored", "--ignore-eos")
    if again["tokens"] != tokens or again["decode_steps"] != STEPS:
        failures.append("--ignore-eos with eos_token_id set did not run every step to the same tokens")
    if failures:
        sys.exit("\n".join(failures))
    print(f"every sequence ended at its eos token; decoding stopped after {cut['decode_steps']} steps")


if __name__ == "__main__":
    main()
