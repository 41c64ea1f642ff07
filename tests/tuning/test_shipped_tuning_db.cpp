// The shipped tuning databases (tuning_db/*.json) were tuned with the kernel templates as they are
// now: an edit to the template an entry's config selects, or to what it includes (even a
// comment), changes its content hash, and the runtime then ignores the entry as stale, silently
// falling back to the heuristic. No GPU needed.
#include <filesystem>
#include <fstream>
#include <set>

#include <catch2/catch_test_macros.hpp>
#include <nlohmann/json.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "tileops/device_info.hpp"
#include "support/shipped_db.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;

TEST_CASE("every entry of the shipped tuning databases matches the current kernel templates", "[tuning]") {
    int checked = 0;
    for (const test::ShippedEntry& shipped : test::shipped_entries()) {
        const auto op = test::op_for(shipped.entry.key);
        INFO(shipped.file << ": " << op->describe());
        const DeviceInfo device = DeviceInfo::for_arch(shipped.entry.key.arch);
        CHECK(shipped.entry.key.template_hash == tuning::kernel_template_hash(op->model(), shipped.entry.config, device));
        ++checked;
    }
    CHECK(checked > 0);
}

// A fleet's database is whole: every benchmark problem (tools/workloads/tune/) that the H100's
// database was tuned on, the H200's was tuned on too, so that an H200 serves none of them from
// another GPU's configs. Problems are compared by the key their op makes (flags in its order).
TEST_CASE("the H200's shipped database covers every benchmark problem the H100's does", "[tuning]") {
    std::set<TuningKey> tuned_on_h100, tuned_on_h200;
    for (const test::ShippedEntry& shipped : test::shipped_entries()) {
        std::set<TuningKey>* fleet = shipped.file == "h100-sxm.json" ? &tuned_on_h100
                                     : shipped.file == "h200.json"   ? &tuned_on_h200
                                                                     : nullptr;
        TuningKey problem = shipped.entry.key;
        problem.template_hash.clear();
        if (fleet) fleet->insert(problem);
    }
    REQUIRE(!tuned_on_h100.empty());
    int benchmark_problems = 0;
    const std::filesystem::path dir = std::filesystem::path(TILEOPS_TEST_SOURCE_DIR) / "tools/workloads/tune";
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(file.path());
        const nlohmann::json workload = nlohmann::json::parse(in);  // outlives the loop over its problems
        for (const nlohmann::json& problem : workload.at("problems")) {
            const auto op = detail::make_op({problem.at("op").get<std::string>(),
                                             problem.at("shape").get<std::vector<long long>>(),
                                             problem.at("dtype").get<std::string>(), problem.value("flags", "")});
            const TuningKey key = op->model().tuning_key("sm_90a", "");
            if (!tuned_on_h100.count(key)) continue;
            INFO(file.path().filename().string() << ": " << key.to_string());
            CHECK(tuned_on_h200.count(key) == 1);
            ++benchmark_problems;
        }
    }
    CHECK(benchmark_problems > 200);
}

TEST_CASE("a tunable no config of the op has (a misspelling) makes an entry invalid, by name", "[tuning]") {
    using namespace tileops;
    const auto op = detail::make_op({"rmsnorm", {1024, 4096}, "bf16", ""});
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    Config config = op->model().heuristic(hopper);
    CHECK_FALSE(tuning::unknown_tunable_reason(op->model(), config, hopper).has_value());
    config["prefech"] = 1;  // "prefetch" misspelled: the op would run with its default
    const auto why = tuning::unknown_tunable_reason(op->model(), config, hopper);
    REQUIRE(why.has_value());
    CHECK(why->find("unknown tunable 'prefech'") != std::string::npos);
    CHECK(why->find("prefetch") != std::string::npos);  // the names it knows are listed

    // Through a database entry of that exact shape and a current template hash: refused as invalid.
    config.erase("prefech");
    TuningEntry entry;
    entry.key = op->model().tuning_key("sm_90a", tuning::kernel_template_hash(op->model(), config, hopper));
    entry.config = config;
    entry.median_us = 10;
    CHECK_FALSE(tuning::stale_entry_reason(entry).has_value());
    entry.config["prefech"] = 1;
    const auto stale = tuning::stale_entry_reason(entry);
    REQUIRE(stale.has_value());
    CHECK(stale->find("unknown tunable 'prefech'") != std::string::npos);
}
