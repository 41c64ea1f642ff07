// tileops-tune tune: autotunes problems on this GPU and merges the winners into a database.

#include <filesystem>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/autotuner.hpp"
#include "jit/compiler.hpp"
#include "tileops/tileops.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/output.hpp"
#include "tileops_tune/problems.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "util/clock.hpp"
#include "util/file_util.hpp"

namespace tileops::cli {
namespace {

// The database the results go into, checked before any tuning (not after hours of it): an
// existing file must parse without malformed entries (it is returned, for the arch check once the
// device is known), and the lock file beside it must be creatable (the directory is writable).
std::optional<TuningDb> open_target_db(const std::string& db_path) {
    (void)util::FileLock::try_lock(db_path + ".lock", util::FileLock::Mode::shared);
    std::error_code ec;
    if (!std::filesystem::exists(db_path, ec)) return std::nullopt;
    TuningDb db = TuningDb::load(db_path);
    // Saving rewrites the file without them: refuse, as merge does, rather than drop them unasked.
    if (!db.rejected().empty())
        throw InvalidArgument(fmt::format("{} holds {} malformed entries (the first: {}); fix them, or "
                                          "drop them with `tileops-tune merge --allow-rejected`, before tuning into it",
                                          db_path, db.rejected().size(),
                                          db.rejected().front().reason));
    return db;
}

// Saves the results; where that fails (the file changed or its disk filled meanwhile), writes
// them beside it instead, so that a long tune is never lost, and says where.
void save_results(const TuningDb& db, const std::string& db_path) {
    try {
        db.save(db_path);
    } catch (const std::exception& e) {
        const std::string rescue = fmt::format("{}.unsaved-{}.json", db_path, util::utc_timestamp());
        try {
            util::write_file_atomic(rescue, db.to_json());
        } catch (const std::exception& rescue_error) {
            throw FileError(fmt::format("tileops-tune: could not save into {} ({}), nor into {} ({}): the results are lost",
                                        db_path, e.what(), rescue, rescue_error.what()));
        }
        throw FileError(fmt::format("tileops-tune: could not save into {} ({}); the results are in {}: merge them "
                                    "with `tileops-tune merge`",
                                    db_path, e.what(), rescue));
    }
}

}  // namespace

int cmd_tune(int argc, char** argv) {
    return run_command(
        "tune", "Autotune problems on this GPU and write the results into a tuning database.", argc, argv,
        [](cxxopts::Options& options) {
            add_problem_options(options);
            options.add_options()("db", "the database the results are merged into (created if missing)",
                                  cxxopts::value<std::string>())(
                "budget", "seconds per problem", cxxopts::value<double>()->default_value("60"))(
                "max-candidates", "at most this many configs per problem (0: all)",
                cxxopts::value<int>()->default_value("0"))("random", "sample the search space randomly instead of exhaustively")(
                "seed", "random seed", cxxopts::value<uint64_t>()->default_value("1"))(
                "repeats", "timed runs per candidate", cxxopts::value<int>()->default_value("20"))(
                "device", "GPU ordinal", cxxopts::value<int>()->default_value("0"));
        },
        [](const cxxopts::ParseResult& args) {
            std::vector<detail::ProblemSpec> problems = problems_from(args);
            if (problems.empty()) throw InvalidArgument("nothing to tune: give --op/--shape or --workload");
            if (!args.count("db")) throw InvalidArgument("give the database to write with --db");
            const std::string db_path = args["db"].as<std::string>();
            const std::optional<TuningDb> existing = open_target_db(db_path);
            RuntimeOptions runtime_options;
            runtime_options.device = args["device"].as<int>();
            Runtime runtime(runtime_options);
            const DeviceInfo& device = runtime.device();

            tuning::TuneOptions tune;
            tune.budget_seconds = args["budget"].as<double>();
            tune.max_candidates = args["max-candidates"].as<int>();
            tune.exhaustive = !args.count("random");
            tune.seed = args["seed"].as<uint64_t>();
            tune.repeats = args["repeats"].as<int>();
            Progress progress(Progress::for_stderr(args.count("json") > 0));

            TuningDb db;
            TuningDbMeta& meta = db.meta();
            meta.library_version = tileops::version();
            meta.gpu_name = device.name;
            meta.arch = device.arch();
            meta.driver = fmt::format("{}.{}", device.driver_version / 1000, (device.driver_version % 1000) / 10);
            meta.nvrtc_version = jit::nvrtc_version();
            meta.created_at = util::utc_timestamp();
            meta.sources = {fmt::format("tileops-tune on {}", device.name)};
            if (existing) (void)TuningDb::merge(*existing, db);  // refuses a file of another arch now

            nlohmann::json results = nlohmann::json::array();
            std::vector<std::vector<std::string>> rows;
            int failures = 0;
            for (size_t p = 0; p < problems.size(); ++p) {
                const std::string name = describe(problems[p]);
                tune.progress = [&](const std::string& what, double fraction) {
                    progress.update(fmt::format("[{}/{}] {}: {}", p + 1, problems.size(), name, what),
                                    (p + fraction) / problems.size());
                };
                try {
                    auto op = detail::make_op(problems[p]);
                    tuning::TuneResult result = tuning::autotune(runtime, *op, tune);
                    db.upsert(result.entry);
                    nlohmann::json failed = nlohmann::json::array(), timed = nlohmann::json::array();
                    for (const auto& c : result.candidates) {
                        if (!c.ok) failed.push_back({{"config", config_json(c.config)}, {"why", c.failure}});
                        else timed.push_back({{"config", config_json(c.config)}, {"median_us", c.median_us}});
                    }
                    results.push_back({{"problem", name},
                                       {"entry", entry_json(result.entry)},
                                       {"heuristic_median_us", result.heuristic_median_us},
                                       {"heuristic_kept", result.heuristic_kept},
                                       {"failed", failed},
                                       {"timed", timed}});
                    rows.push_back({name, config_text(result.entry.config), fmt::format("{:.2f}", result.entry.median_us),
                                    fmt::format("{:.2f}", result.heuristic_median_us),
                                    fmt::format("{:.0f} {}", result.entry.throughput, result.entry.throughput_unit),
                                    fmt::format("{}/{}", result.entry.candidates_failed, result.entry.candidates_tried),
                                    result.heuristic_kept ? "heuristic kept" : ""});
                } catch (const std::exception& e) {
                    ++failures;
                    results.push_back({{"problem", name}, {"error", e.what()}});
                    rows.push_back({name, std::string("FAILED: ") + e.what(), "", "", "", "", ""});
                }
            }
            progress.done();
            save_results(db, db_path);
            if (args.count("json")) {
                fmt::print("{}\n", nlohmann::json({{"db", db_path}, {"results", results}}).dump(2));
            } else {
                print_table({"problem", "config", "us", "heuristic us", "throughput", "failed/tried", "note"}, rows);
                fmt::print("{} problem(s) tuned into {}; {} failed\n", problems.size() - failures, db_path, failures);
                for (const auto& r : results)
                    for (const auto& f : r.value("failed", nlohmann::json::array()))
                        fmt::print(stderr, "{}: candidate {} not used: {}\n", r["problem"].get<std::string>(),
                                   f["config"].dump(), f["why"].get<std::string>());
            }
            return failures == 0 ? 0 : 1;
        });
}

}  // namespace tileops::cli
