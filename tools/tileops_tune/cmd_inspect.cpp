// tileops-tune list / show / merge: what a database holds, as a table or JSON; databases merged
// into one to ship.
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/output.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "tuning/op_config.hpp"
#include "util/file_util.hpp"

namespace tileops::cli {
namespace {

// A terminal's width: list cuts the config column to keep its lines within it.
constexpr size_t kListWidth = 140;

void add_db_argument(cxxopts::Options& options) {
    options.add_options()("db", "the database file", cxxopts::value<std::string>());
    options.parse_positional({"db"});
    options.positional_help("DB.json");
}

TuningDb load_db(const cxxopts::ParseResult& args) {
    check_filters(args);
    return TuningDb::load(input_file(args, "db", "the database file"));
}

}  // namespace

int cmd_list(int argc, char** argv) {
    return run_command(
        "list", "List a tuning database's entries.", argc, argv,
        [](cxxopts::Options& options) {
            add_db_argument(options);
            add_filter_options(options);
        },
        [](const cxxopts::ParseResult& args) {
            TuningDb db = load_db(args);
            std::vector<std::vector<std::string>> rows;
            nlohmann::json list = nlohmann::json::array();
            for (const TuningEntry& e : db.entries()) {
                if (!matches_filters(e, args)) continue;
                list.push_back(entry_json(e));
                // One short line per entry: the config cut to what the line leaves of kListWidth (show
                // prints it whole, and the device and time of tuning).
                rows.push_back({e.key.op, fmt::format("{}", fmt::join(e.key.shape, "x")), e.key.dtype, e.key.flags,
                                e.key.arch, config_text(e.config),
                                fmt::format("{:.2f}", e.median_us), fmt::format("{:.0f} {}", e.throughput, e.throughput_unit)});
            }
            if (args.count("json"))
                fmt::print("{}\n", list.dump(2));
            else
                print_table({"op", "shape", "dtype", "flags", "arch", "config", "us", "throughput"}, rows,
                            ShrinkColumn{5, kListWidth});
            return 0;
        });
}

int cmd_show(int argc, char** argv) {
    return run_command(
        "show", "Show a tuning database in full: metadata, entries with runners-up and provenance.", argc, argv,
        [](cxxopts::Options& options) {
            add_db_argument(options);
            add_filter_options(options);
        },
        [](const cxxopts::ParseResult& args) {
            TuningDb db = load_db(args);
            const TuningDbMeta& m = db.meta();
            nlohmann::json entries = nlohmann::json::array();
            for (const TuningEntry& e : db.entries())
                if (matches_filters(e, args)) entries.push_back(entry_json(e));
            if (args.count("json")) {
                nlohmann::json out = nlohmann::json::parse(db.to_json());
                out["entries"] = entries;
                fmt::print("{}\n", out.dump(2));
                return 0;
            }
            fmt::print("database {}\n  format {}, library {}, GPU {}, arch {}, driver {}, NVRTC {}, created {}\n  sources: {}\n",
                       args["db"].as<std::string>(), m.format_version, m.library_version, m.gpu_name, m.arch, m.driver,
                       m.nvrtc_version, m.created_at, fmt::join(m.sources, "; "));
            for (const TuningEntry& e : db.entries()) {
                if (!matches_filters(e, args)) continue;
                fmt::print("\n{}\n  config        {}\n  median        {:.2f} us (spread {:.2f} us), {:.0f} {}\n"
                           "  candidates    {} tried, {} failed, {} skipped (budget); stability {:.0f}%\n"
                           "  tuned         {} on {} (NVRTC {})\n"
                           "  template      {}\n",
                           e.key.to_string(), config_text(e.config), e.median_us, e.spread_us, e.throughput,
                           e.throughput_unit, e.candidates_tried, e.candidates_failed, e.candidates_skipped,
                           100 * e.stability, e.tuned_at, e.device, e.nvrtc_version, e.key.template_hash);
                for (const RunnerUp& r : e.runners_up)
                    fmt::print("  runner-up     {:.2f} us  {}\n", r.median_us, config_text(r.config));
            }
            return 0;
        });
}

int cmd_merge(int argc, char** argv) {
    return run_command(
        "merge", "Merge tuning databases into one, keeping the faster entry per key (never across archs).", argc, argv,
        [](cxxopts::Options& options) {
            options.add_options()("o,output", "the merged database to write", cxxopts::value<std::string>())(
                "drop-stale", "leave out entries this library would never use (tuned with another version of the "
                "kernel templates): what a database shipped with this version should hold")(
                "allow-rejected", "write the merge even when an input holds malformed entries (they are left out; "
                "without this flag such a merge writes nothing and exits 1)")(
                "inputs", "databases to merge", cxxopts::value<std::vector<std::string>>());
            options.parse_positional({"inputs"});
            options.positional_help("A.json B.json ...");
        },
        [](const cxxopts::ParseResult& args) {
            if (!args.count("output")) throw InvalidArgument("give the output file with -o");
            if (!args.count("inputs")) throw InvalidArgument("give the databases to merge");
            const std::string output = args["output"].as<std::string>();
            const auto inputs = args["inputs"].as<std::vector<std::string>>();
            for (const std::string& path : inputs) require_input_file(path);
            // The lock TuningDb::save takes: a tune writing into the output meanwhile is not lost.
            const std::filesystem::path lock_path(output + ".lock");
            util::FileLock lock(lock_path, util::FileLock::Mode::exclusive);
            lock.remove_on_release(lock_path);
            // Writing over a database that is not an input would drop what it holds unseen.
            std::error_code ec;
            if (std::filesystem::exists(output, ec)) {
                bool is_input = false;
                for (const std::string& path : inputs) is_input = is_input || std::filesystem::equivalent(path, output, ec);
                if (!is_input)
                    throw InvalidArgument(fmt::format("{} exists and is not one of the inputs: name it among them to "
                                                      "merge into it, or remove it first", output));
            }
            std::vector<TuningDb> dbs;
            nlohmann::json rejected = nlohmann::json::array();  // the entries listed; rejected_count counts all
            size_t rejected_count = 0;
            for (const std::string& path : inputs) {
                TuningDb db = TuningDb::load(path);
                for (const RejectedEntry& r : db.rejected()) {
                    rejected.push_back({{"file", path}, {"index", r.index}, {"why", r.reason}});
                    if (!args.count("json")) fmt::print(stderr, "rejected {}: entries[{}]: {}\n", path, r.index, r.reason);
                }
                rejected_count += db.rejected_count();
                if (db.rejected_count() > db.rejected().size() && !args.count("json"))
                    fmt::print(stderr, "rejected {}: {} more entries (only the first {} are listed)\n", path,
                               db.rejected_count() - db.rejected().size(), db.rejected().size());
                if (db.meta().sources.empty()) db.meta().sources = {path};
                dbs.push_back(std::move(db));
            }
            // Databases that name different archs never merge, whatever the order they are given in.
            for (size_t i = 0; i < dbs.size(); ++i)
                for (size_t j = i + 1; j < dbs.size(); ++j)
                    if (!dbs[i].meta().arch.empty() && !dbs[j].meta().arch.empty() &&
                        dbs[i].meta().arch != dbs[j].meta().arch)
                        throw InvalidArgument(fmt::format("cannot merge {} (arch {}) with {} (arch {})", inputs[i],
                                                          dbs[i].meta().arch, inputs[j], dbs[j].meta().arch));
            TuningDb merged;
            for (const TuningDb& db : dbs) merged = TuningDb::merge(merged, db);
            if (!rejected.empty() && !args.count("allow-rejected")) {
                if (args.count("json"))
                    fmt::print("{}\n", nlohmann::json({{"output", nullptr}, {"rejected", rejected}, {"rejected_count", rejected_count}})
                                   .dump(2));
                else
                    fmt::print(stderr, "{} malformed entries in the inputs: nothing written to {} (fix them, or merge "
                               "without them with --allow-rejected)\n", rejected_count, output);
                return 1;
            }
            nlohmann::json dropped = nlohmann::json::array();
            if (args.count("drop-stale")) {
                TuningDb kept;
                kept.meta() = merged.meta();
                for (const TuningEntry& e : merged.entries()) {
                    if (auto why = tuning::stale_entry_reason(e)) {
                        dropped.push_back({{"entry", e.key.to_string()}, {"why", *why}});
                        if (!args.count("json")) fmt::print(stderr, "dropped {}: {}\n", e.key.to_string(), *why);
                    } else {
                        kept.upsert(e);
                    }
                }
                merged = std::move(kept);
            }
            util::write_file_atomic(output, merged.to_json());
            if (args.count("json"))
                fmt::print("{}\n", nlohmann::json({{"output", output},
                                                   {"entries", merged.entries().size()},
                                                   {"dropped", dropped},
                                                   {"rejected", rejected},
                                                   {"rejected_count", rejected_count}})
                                       .dump(2));
            else
                fmt::print("{} entries written to {}{}\n", merged.entries().size(), output,
                           args.count("drop-stale") ? fmt::format(" ({} stale dropped)", dropped.size()) : "");
            return 0;
        });
}

}  // namespace tileops::cli
