// The tuner's accounting of a budget that runs out: candidates it never compiled or timed are
// skipped, not failed, and say so in the entry; a candidate that does fail stays a failure. The
// candidates are compiled for real (NVRTC, no GPU needed); a scripted runner stands in for the GPU.
#include <algorithm>
#include <cstdint>
#include <filesystem>

#include <catch2/catch_test_macros.hpp>

#include "autotune/autotuner.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;

namespace {

// Times candidate i at 10 + i us (so the heuristic, candidate 0, is fastest and stays), except
// the one it is told to fail as a wrong result, and the favoured config, at 5 us.
class ScriptedRunner : public tuning::CandidateRunner {
public:
    explicit ScriptedRunner(size_t failing, Config favoured = {}) : failing_(failing), favoured_(std::move(favoured)) {}
    int vector_width() override { return 8; }
    double bytes_moved() override { return 1e6; }
    tuning::Measurement measure(size_t index, const Config& config, int, int) override {
        ++measured;
        if (index == failing_) return {false, "wrong output: scripted", 0, 0};
        return {true, "", config == favoured_ ? 5.0 : 10.0 + static_cast<double>(index), 0.1};
    }
    std::vector<std::vector<double>> retime(const std::vector<Config>& configs, int rounds) override {
        std::vector<std::vector<double>> samples(configs.size());
        for (size_t c = 0; c < configs.size(); ++c)
            samples[c].assign(static_cast<size_t>(rounds), configs[c] == favoured_ ? 5.0 : 10.0 + 5.0 * c);
        return samples;
    }
    size_t measured = 0;

private:
    size_t failing_;
    Config favoured_;
};

}  // namespace

TEST_CASE("candidates the budget leaves untimed are counted as skipped, not failed", "[tuning]") {
    test::TempDir dir;
    jit::KernelBuilder builder(dir.path() / "cache", 0, true);
    const RmsNorm op(RmsNormProblem{.rows = 4096, .cols = 4096});
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    // Over 60 candidates of 50 ms or more each: more than two threads can compile in 1.5 s.
    REQUIRE(op.model().search_space(device).size() > 60);

    tuning::TuneOptions options;
    // Half of it for compiling; a compile under way then still ends (even under a sanitizer,
    // where NVRTC runs several times slower) well before the other half is spent, and the
    // scripted runner times the compiled ones at once.
    options.budget_seconds = 3;
    options.compile_threads = 2;  // candidates 0 and 1 start compiling at once, so both compile
    options.retime_rounds = 3;
    ScriptedRunner runner(1);
    const tuning::TuneResult result = tuning::autotune(op.model(), device, builder, runner, options);

    const TuningEntry& e = result.entry;
    INFO(e.candidates_tried << " tried, " << e.candidates_failed << " failed, " << e.candidates_skipped << " skipped");
    CHECK(e.candidates_tried == static_cast<int>(result.candidates.size()));
    CHECK(e.candidates_failed == 1);  // candidate 1, the scripted wrong output
    CHECK(e.candidates_skipped > 0);
    CHECK(e.candidates_skipped == std::count_if(result.candidates.begin(), result.candidates.end(),
                                                [](const auto& c) { return c.skipped; }));
    CHECK(e.candidates_failed + e.candidates_skipped + static_cast<int>(runner.measured) - 1 == e.candidates_tried);
    CHECK_FALSE(result.candidates[1].skipped);
    for (const tuning::CandidateOutcome& c : result.candidates) {
        if (!c.skipped) continue;
        CHECK_FALSE(c.ok);
        CHECK(c.failure.rfind("skipped: ", 0) == 0);
    }
    CHECK(e.config == result.candidates[0].config);  // the heuristic, fastest in this script

    // The count survives the database.
    TuningDb db;
    db.upsert(e);
    const auto path = dir.path() / "db.json";
    db.save(path);
    const TuningDb back = TuningDb::load(path);
    REQUIRE(back.entries().size() == 1);
    CHECK(back.entries().front().candidates_skipped == e.candidates_skipped);
    CHECK(back.entries().front().candidates_failed == 1);
}

TEST_CASE("the configs the runtime would run are timed whatever the budget", "[tuning]") {
    test::TempDir dir;
    jit::KernelBuilder builder(dir.path() / "cache", 0, true);
    const RmsNorm op(RmsNormProblem{.rows = 4096, .cols = 4096});
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    const std::vector<Config> space = op.model().search_space(device);
    REQUIRE(space.size() > 2);
    // The exhaustive order would reach it last: the one a short tune never timed before.
    const Config current = space.back();
    REQUIRE(current != op.model().heuristic(device));

    tuning::TuneOptions options;
    options.budget_seconds = 0;  // nothing but the heuristic and the protected configs runs
    options.max_candidates = 1;  // nor does a limit drop them
    options.compile_threads = 2;
    options.retime_rounds = 3;
    options.always_timed = {current, op.model().heuristic(device), current};  // duplicates are timed once
    ScriptedRunner runner(SIZE_MAX, current);
    const tuning::TuneResult result = tuning::autotune(op.model(), device, builder, runner, options);

    REQUIRE(result.candidates.size() == 2);
    CHECK(result.candidates[0].config == result.heuristic);
    CHECK(result.candidates[1].config == current);
    CHECK(result.candidates[1].ok);
    CHECK_FALSE(result.candidates[1].skipped);
    CHECK(runner.measured == 2);
    CHECK(result.entry.config == current);  // it won, where the budget alone would have left it out

    // Without the protection, the same budget and limit time the heuristic alone.
    options.always_timed.clear();
    ScriptedRunner plain(SIZE_MAX, current);
    const tuning::TuneResult alone = tuning::autotune(op.model(), device, builder, plain, options);
    CHECK(alone.candidates.size() == 1);
    CHECK(alone.entry.config == alone.heuristic);
}
