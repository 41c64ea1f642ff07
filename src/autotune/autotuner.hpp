// The autotuner: enumerates an op's search space, compiles the candidates in parallel on the CPU,
// checks each against the heuristic config's output, times them one at a time on the GPU, re-times
// the best few interleaved, and keeps a tuned config only when it beats the heuristic by more than
// the measured noise.
//
// Each candidate runs in this process. Candidates are built and timed through plain functions of
// (op, config), so isolating a candidate that could corrupt the context in a child process only
// needs a driver that forks per candidate; nothing here assumes they share a context.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tileops/op.hpp"
#include "tileops/runtime.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::tuning {

struct TuneOptions {
    double budget_seconds = 60;  // per problem: compiling and timing stop when it is spent
    int max_candidates = 0;      // 0: no limit
    bool exhaustive = true;      // false: a random sample (seeded) of the search space
    uint64_t seed = 1;
    int warmup = 3;
    int repeats = 20;            // timed runs per candidate (median)
    int retime_top = 3;          // best candidates re-timed interleaved with the heuristic
    int retime_rounds = 15;
    unsigned compile_threads = 0;  // 0: all hardware threads
    // Called as candidates finish compiling and timing: (what is happening, fraction done).
    std::function<void(const std::string&, double)> progress;
};

struct CandidateOutcome {
    Config config;
    bool ok = false;
    std::string failure;  // why it was skipped: compile error, launch failure, wrong output, budget
    double median_us = 0;
    double spread_us = 0;
};

struct TuneResult {
    TuningEntry entry;                        // what goes into the database
    std::vector<CandidateOutcome> candidates;  // every candidate, in the order tried
    Config heuristic;
    bool heuristic_kept = false;  // the winner did not beat the heuristic by more than the noise
    double heuristic_median_us = 0;
};

// Tunes `op` on `runtime`'s device. Throws when even the heuristic config cannot run.
TuneResult autotune(Runtime& runtime, const Op& op, const TuneOptions& options);

}  // namespace tileops::tuning
