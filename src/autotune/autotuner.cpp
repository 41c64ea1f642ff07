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

#include "autotune/candidate_bench.hpp"
#include "autotune/timing.hpp"
#include "jit/compiler.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/error.hpp"
#include "tuning/op_config.hpp"
#include "util/clock.hpp"
#include "util/log.hpp"

namespace tileops::tuning {
namespace {

using Clock = std::chrono::steady_clock;

// The candidates in the order they are tried: the heuristic (the baseline every other one is
// checked against), the configs to time whatever the budget, then the rest of the search space.
// `protected_count` says how many lead the list: the budget never skips those.
std::vector<Config> candidate_list(const detail::OpModel& model, const DeviceInfo& device, const Config& heuristic,
                                   const TuneOptions& options, size_t& protected_count) {
    std::vector<Config> first{heuristic};
    for (const Config& config : options.always_timed)
        if (std::find(first.begin(), first.end(), config) == first.end()) first.push_back(config);
    std::vector<Config> space = model.search_space(device);
    space.erase(std::remove_if(space.begin(), space.end(),
                               [&](const Config& c) { return std::find(first.begin(), first.end(), c) != first.end(); }),
                space.end());
    if (!options.exhaustive) {
        std::mt19937_64 rng(options.seed);
        std::shuffle(space.begin(), space.end(), rng);
    }
    protected_count = first.size();
    space.insert(space.begin(), first.begin(), first.end());
    if (options.max_candidates > 0)  // a limit never drops the leading ones
        space.resize(std::min(space.size(), std::max(protected_count, static_cast<size_t>(options.max_candidates))));
    return space;
}

}  // namespace

TuneResult autotune(const detail::OpModel& model, const DeviceInfo& device, jit::KernelBuilder& builder,
                    CandidateRunner& runner, const TuneOptions& options) {
    auto report = [&](const std::string& what, double fraction) {
        if (options.progress) options.progress(what, fraction);
    };

    TuneResult result;
    result.heuristic = model.heuristic(device);
    size_t protected_count = 1;
    const std::vector<Config> candidates = candidate_list(model, device, result.heuristic, options, protected_count);
    result.candidates.resize(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) result.candidates[i].config = candidates[i];

    const int vec = runner.vector_width();
    // The budget covers compiling and timing; the heuristic (candidate 0) and the configs to time
    // whatever the budget (those after it) always run. Compiling may take half of it at most:
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
            if (i >= protected_count && Clock::now() > compile_deadline) {
                outcome.skipped = true;
                outcome.failure = "skipped: the half of the time budget for compiling was spent before it compiled";
                continue;
            }
            try {
                Config config = candidates[i];
                auto widest = config.find("vec");  // ops without vector widths have no "vec"
                int v = widest == config.end() ? vec : std::min<int>(vec, static_cast<int>(widest->second));
                detail::LaunchPlan plan = model.plan(config, v, device);
                builder.get(plan.template_file, plan.name_expression, device.arch());
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

    // 2. Check and time each candidate, one at a time (the heuristic first: the reference).
    for (size_t i = 0; i < candidates.size(); ++i) {
        CandidateOutcome& outcome = result.candidates[i];
        if (!outcome.ok) continue;
        if (i >= protected_count && Clock::now() > deadline) {
            outcome.ok = false;
            outcome.skipped = true;
            outcome.failure = "skipped: time budget spent before it was timed";
            continue;
        }
        const Measurement m = runner.measure(i, candidates[i], options.warmup, options.repeats);
        if (i == 0 && !m.ok)
            throw Error(fmt::format("tileops: cannot tune {}: its heuristic config fails: {}", model.describe(), m.failure));
        outcome.ok = m.ok;
        outcome.failure = m.failure;
        outcome.median_us = m.median_us;
        outcome.spread_us = m.spread_us;
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
    std::vector<Config> retimed_configs;
    for (size_t i : ranked) retimed_configs.push_back(candidates[i]);
    const std::vector<std::vector<double>> samples = runner.retime(retimed_configs, options.retime_rounds);
    std::map<size_t, TimingStats> retimed;
    std::map<size_t, int> round_wins;
    for (int round = 0; round < options.retime_rounds; ++round) {
        size_t fastest = 0;
        for (size_t r = 0; r < ranked.size(); ++r)
            if (samples[r][round] < samples[fastest][round]) fastest = r;
        ++round_wins[ranked[fastest]];
    }
    for (size_t r = 0; r < ranked.size(); ++r) retimed[ranked[r]] = summarize(samples[r]);
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
    entry.throughput = runner.bytes_moved() / (entry.median_us * 1e-6) / 1e9;
    entry.throughput_unit = "GB/s";
    for (size_t i : ranked)
        if (i != winner) entry.runners_up.emplace_back(candidates[i], retimed[i].median_us);
    entry.candidates_tried = static_cast<int>(candidates.size());
    entry.candidates_skipped = static_cast<int>(
        std::count_if(result.candidates.begin(), result.candidates.end(), [](const auto& c) { return c.skipped; }));
    entry.candidates_failed = static_cast<int>(std::count_if(result.candidates.begin(), result.candidates.end(),
                                                             [](const auto& c) { return !c.ok && !c.skipped; }));
    entry.stability = static_cast<double>(round_wins[winner]) / std::max(1, options.retime_rounds);
    entry.tuned_at = util::utc_timestamp();
    entry.device = device.name;
    util::logger().debug("tileops: tuned {}: {:.2f} us ({} candidates, {} failed, {} skipped), heuristic {:.2f} us{}",
                         model.describe(), entry.median_us, entry.candidates_tried, entry.candidates_failed,
                         entry.candidates_skipped, result.heuristic_median_us,
                         result.heuristic_kept ? " (kept: within noise)" : "");
    return result;
}

TuneResult autotune(Runtime& runtime, const Op& op, const TuneOptions& options) {
    CandidateBench bench(runtime, op, options.seed, options.lengths);
    return autotune(op.model(), runtime.device(), runtime.impl().builder(), bench, options);
}

}  // namespace tileops::tuning
