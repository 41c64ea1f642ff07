// The autotuner: enumerates an op's search space, compiles the candidates in parallel on the CPU,
// checks each against the heuristic config's output, times them one at a time on the GPU, re-times
// the best few interleaved, and keeps a tuned config only when it beats the heuristic by more than
// the measured noise.
//
// Compiling happens here; running the candidates is a CandidateRunner's job: CandidateBench runs
// them in this process, tileops-tune's WorkerRunner in a worker process with a watchdog (so a
// candidate that traps, hangs or corrupts its context fails alone).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autotune/length_spread.hpp"
#include "core/op_model.hpp"
#include "jit/kernel_builder.hpp"
#include "tileops/op.hpp"
#include "tileops/runtime.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::tuning {

struct TuneOptions {
    double budget_seconds = 60;  // per problem: compiling and timing stop when it is spent
    int max_candidates = 0;      // 0: no limit
    bool exhaustive = true;      // false: a random sample (seeded) of the search space
    uint64_t seed = 1;
    LengthSpread lengths = LengthSpread::uniform;  // how a batch's sequence lengths are drawn
    int warmup = 3;
    int repeats = 20;            // timed runs per candidate (median)
    int retime_top = 3;          // best candidates re-timed interleaved with the heuristic
    int retime_rounds = 15;
    unsigned compile_threads = 0;  // 0: all hardware threads
    // Configs compiled and timed right after the heuristic whatever the budget: what the runtime
    // would run the problem with today (an entry of the target database, another fleet's), so
    // that a short tune never replaces one of them, untimed, with something slower it found.
    std::vector<Config> always_timed;
    // Called as candidates finish compiling and timing: (what is happening, fraction done).
    std::function<void(const std::string&, double)> progress;
};

// One candidate checked and timed.
struct Measurement {
    bool ok = false;
    std::string failure;  // why not: launch failure, wrong output, killed by the watchdog, ...
    double median_us = 0;
    double spread_us = 0;
};

// Runs the candidates of one problem on a GPU, on operands of its own (random inputs, seeded).
class CandidateRunner {
public:
    virtual ~CandidateRunner() = default;
    // The launch width the op takes on the runner's operands: the kernels to compile.
    virtual int vector_width() = 0;
    // Bytes the op moves (each input read once, each output written once), for throughput.
    virtual double bytes_moved() = 0;
    // Runs `config` on poisoned outputs, checks them and times it. Candidate 0 is the heuristic:
    // its outputs are the reference every later candidate is checked against.
    virtual Measurement measure(size_t index, const Config& config, int warmup, int repeats) = 0;
    // `rounds` runs of each config, interleaved round by round: samples[config][round], in us.
    virtual std::vector<std::vector<double>> retime(const std::vector<Config>& configs, int rounds) = 0;
};

struct CandidateOutcome {
    Config config;
    bool ok = false;
    bool skipped = false;  // never compiled or timed: the time budget ran out first (not a failure)
    std::string failure;   // why it was not used: compile error, launch failure, wrong output, budget
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

// Tunes `model` for `device`: compiles through `builder`, runs on `runner`. Throws when even the
// heuristic config cannot run.
TuneResult autotune(const detail::OpModel& model, const DeviceInfo& device, jit::KernelBuilder& builder,
                    CandidateRunner& runner, const TuneOptions& options);

// Tunes `op` in this process, on `runtime`'s device (a CandidateBench). A candidate that leaves
// the context unusable ends the tune with its DriverError.
TuneResult autotune(Runtime& runtime, const Op& op, const TuneOptions& options);

}  // namespace tileops::tuning
