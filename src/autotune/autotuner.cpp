#include "autotune/autotuner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "autotune/operand_buffers.hpp"
#include "autotune/timing.hpp"
#include "core/op_model.hpp"
#include "cuda/driver.hpp"
#include "jit/compiler.hpp"
#include "runtime/op_state.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/error.hpp"
#include "tuning/op_config.hpp"
#include "util/clock.hpp"
#include "util/log.hpp"
#include "util/parallel_for.hpp"

namespace tileops::tuning {
namespace {

using Clock = std::chrono::steady_clock;

// Norm-wise relative difference; +inf when any element is not finite (unwritten or broken).
double relative_difference(const std::vector<float>& out, const std::vector<float>& ref) {
    // Partial sums per chunk, added in chunk order: the same result whatever the thread count.
    const size_t grain = 1 << 20;
    std::vector<double> diffs(util::chunk_count(out.size(), grain)), norms(diffs.size());
    std::vector<char> finite(diffs.size(), 1);
    util::parallel_for_chunks(out.size(), grain, [&](size_t chunk, size_t begin, size_t end) {
        double diff = 0, norm = 0;
        for (size_t i = begin; i < end; ++i) {
            if (!std::isfinite(out[i])) {
                finite[chunk] = 0;
                return;
            }
            diff += double(out[i] - ref[i]) * double(out[i] - ref[i]);
            norm += double(ref[i]) * double(ref[i]);
        }
        diffs[chunk] = diff;
        norms[chunk] = norm;
    });
    double diff = 0, norm = 0;
    for (size_t c = 0; c < diffs.size(); ++c) {
        if (!finite[c]) return INFINITY;
        diff += diffs[c];
        norm += norms[c];
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// Candidates reduce in other orders than the heuristic, so outputs differ by rounding only.
double candidate_tolerance(const std::string& dtype_key) {
    if (dtype_key.find("bf16") != std::string::npos) return 2e-2;
    if (dtype_key.find("fp16") != std::string::npos) return 2e-3;
    return 2e-5;
}

std::vector<Config> candidate_list(const detail::OpModel& model, const DeviceInfo& device, const Config& heuristic,
                                   const TuneOptions& options) {
    std::vector<Config> space = model.search_space(device);
    space.erase(std::remove(space.begin(), space.end(), heuristic), space.end());
    if (!options.exhaustive) {
        std::mt19937_64 rng(options.seed);
        std::shuffle(space.begin(), space.end(), rng);
    }
    space.insert(space.begin(), heuristic);  // the baseline always runs first
    if (options.max_candidates > 0 && space.size() > static_cast<size_t>(options.max_candidates))
        space.resize(static_cast<size_t>(options.max_candidates));
    return space;
}

}  // namespace

TuneResult autotune(Runtime& runtime, const Op& op, const TuneOptions& options) {
    detail::RuntimeImpl& impl = runtime.impl();
    impl.make_current();
    const DeviceInfo& device = impl.device();
    const detail::OpModel& model = op.model();
    auto report = [&](const std::string& what, double fraction) {
        if (options.progress) options.progress(what, fraction);
    };

    TuneResult result;
    result.heuristic = model.heuristic(device);
    const std::vector<Config> candidates = candidate_list(model, device, result.heuristic, options);
    result.candidates.resize(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) result.candidates[i].config = candidates[i];

    OperandBuffers buffers(model, options.seed);
    const int vec = op.vector_width(buffers.inputs(), buffers.outputs());
    // The budget covers compiling and timing; the heuristic (candidate 0) always runs, as the
    // baseline every other candidate is checked against. Compiling may take half of it at most:
    // with a cold kernel cache it would otherwise take all of it and leave nothing timed (seen on
    // the H100 machine: 1 of 115 row-op candidates timed with a 10-second budget).
    const auto start = Clock::now();
    const auto budget = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.budget_seconds));
    const auto deadline = start + budget, compile_deadline = start + budget / 2;

    // 1. Compile every candidate in parallel (CPU only; the cubins land in the disk cache).
    std::atomic<size_t> next{0}, compiled{0};
    std::mutex report_mutex;
    auto compile_worker = [&] {
        for (size_t i = next++; i < candidates.size(); i = next++) {
            CandidateOutcome& outcome = result.candidates[i];
            if (i > 0 && Clock::now() > compile_deadline) {
                outcome.failure = "skipped: the half of the time budget for compiling was spent before it compiled";
                continue;
            }
            try {
                Config config = candidates[i];
                auto widest = config.find("vec");  // ops without vector widths have no "vec"
                int v = widest == config.end() ? vec : std::min<int>(vec, static_cast<int>(widest->second));
                detail::LaunchPlan plan = model.plan(config, v, device);
                impl.builder().get(plan.template_file, plan.name_expression, device.arch());
                outcome.ok = true;
            } catch (const std::exception& e) {
                outcome.failure = fmt::format("compile: {}", e.what());
            }
            std::lock_guard lock(report_mutex);
            report(fmt::format("compiled {}/{}", ++compiled, candidates.size()), 0.5 * compiled / candidates.size());
        }
    };
    unsigned threads = options.compile_threads ? options.compile_threads : std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < std::min<size_t>(threads, candidates.size()); ++t) pool.emplace_back(compile_worker);
    for (auto& t : pool) t.join();
    if (!result.candidates[0].ok)
        throw Error(fmt::format("tileops: cannot tune {}: its heuristic config fails: {}", model.describe(),
                                result.candidates[0].failure));

    // 2. Check and time each candidate, one at a time.
    KernelTimer timer(device);
    std::vector<float> reference;
    std::vector<detail::ResolvedLaunch> launches(candidates.size());
    const double tolerance = candidate_tolerance(model.dtype_key());
    const auto& cu = cuda::driver();
    for (size_t i = 0; i < candidates.size(); ++i) {
        CandidateOutcome& outcome = result.candidates[i];
        if (!outcome.ok) continue;
        if (i > 0 && Clock::now() > deadline) {
            outcome.ok = false;
            outcome.failure = "skipped: time budget spent before it was timed";
            continue;
        }
        try {
            launches[i] = impl.resolve_config(model, candidates[i], vec);
            auto launch = [&, i] { op.launch_with(launches[i], buffers.inputs(), buffers.outputs(), nullptr); };
            buffers.poison_outputs();
            launch();
            TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
            std::vector<float> out = buffers.download_outputs();
            if (i == 0) {
                reference = std::move(out);
                if (relative_difference(reference, reference) != 0)
                    throw Error("the heuristic config left outputs unwritten or non-finite");
            } else if (double diff = relative_difference(out, reference); !(diff <= tolerance)) {
                outcome.ok = false;
                outcome.failure = fmt::format("wrong output: relative difference {:.3g} to the heuristic config (tolerance {:.3g})",
                                              diff, tolerance);
                continue;
            }
            TimingStats stats = timer.time(launch, options.warmup, options.repeats);
            outcome.median_us = stats.median_us;
            outcome.spread_us = stats.spread_us();
            util::logger().debug("tileops: {} candidate {}: {:.2f} us (grid {})", model.op_name(),
                                    config_text(candidates[i]), stats.median_us, launches[i].grid[0]);
        } catch (const DriverError& e) {
            outcome.ok = false;
            outcome.failure = fmt::format("launch: {}", e.what());
            if (i == 0) throw;
            // A sticky error (illegal address, ...) poisons the context: stop rather than mis-time.
            if (e.status() == CUDA_ERROR_ILLEGAL_ADDRESS || e.status() == CUDA_ERROR_LAUNCH_FAILED) throw;
        } catch (const std::exception& e) {
            outcome.ok = false;
            outcome.failure = e.what();
            if (i == 0) throw;
        }
        report(fmt::format("timed {}/{}", i + 1, candidates.size()), 0.5 + 0.4 * (i + 1) / candidates.size());
    }

    // 3. Re-time the best few with the heuristic, interleaved, so drift hits all alike.
    std::vector<size_t> ranked;
    for (size_t i = 1; i < candidates.size(); ++i)
        if (result.candidates[i].ok) ranked.push_back(i);
    std::sort(ranked.begin(), ranked.end(),
              [&](size_t a, size_t b) { return result.candidates[a].median_us < result.candidates[b].median_us; });
    if (ranked.size() > static_cast<size_t>(options.retime_top)) ranked.resize(static_cast<size_t>(options.retime_top));
    ranked.insert(ranked.begin(), 0);
    std::map<size_t, std::vector<double>> samples;
    std::map<size_t, int> round_wins;
    for (int round = 0; round < options.retime_rounds; ++round) {
        size_t fastest = 0;
        double fastest_us = INFINITY;
        for (size_t i : ranked) {
            double us = timer.time_once([&] { op.launch_with(launches[i], buffers.inputs(), buffers.outputs(), nullptr); });
            samples[i].push_back(us);
            if (us < fastest_us) fastest_us = us, fastest = i;
        }
        ++round_wins[fastest];
    }
    std::map<size_t, TimingStats> retimed;
    for (auto& [i, s] : samples) retimed[i] = summarize(s);
    size_t winner = 0;
    for (size_t i : ranked)
        if (retimed[i].median_us < retimed[winner].median_us) winner = i;
    const double noise = std::max(retimed[winner].spread_us(), retimed[0].spread_us());
    result.heuristic_median_us = retimed[0].median_us;
    if (winner != 0 && retimed[0].median_us - retimed[winner].median_us <= noise) {
        result.heuristic_kept = true;
        winner = 0;
    }
    report("done", 1.0);

    TuningEntry& entry = result.entry;
    entry.config = candidates[winner];
    entry.key = tuned_key_for(model, entry.config, device);
    entry.nvrtc_version = jit::nvrtc_version();
    entry.median_us = retimed[winner].median_us;
    entry.spread_us = retimed[winner].spread_us();
    entry.throughput = buffers.bytes_moved() / (entry.median_us * 1e-6) / 1e9;
    entry.throughput_unit = "GB/s";
    for (size_t i : ranked)
        if (i != winner) entry.runners_up.emplace_back(candidates[i], retimed[i].median_us);
    entry.candidates_tried = static_cast<int>(candidates.size());
    entry.candidates_failed = static_cast<int>(
        std::count_if(result.candidates.begin(), result.candidates.end(), [](const auto& c) { return !c.ok; }));
    entry.stability = static_cast<double>(round_wins[winner]) / std::max(1, options.retime_rounds);
    entry.tuned_at = util::utc_timestamp();
    entry.device = device.name;
    util::logger().debug("tileops: tuned {}: {:.2f} us ({} candidates, {} failed), heuristic {:.2f} us{}", model.describe(),
                            entry.median_us, entry.candidates_tried, entry.candidates_failed, result.heuristic_median_us,
                            result.heuristic_kept ? " (kept: within noise)" : "");
    return result;
}

}  // namespace tileops::tuning
