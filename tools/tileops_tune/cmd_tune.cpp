// tileops-tune tune: autotunes problems on one GPU or several side by side, each GPU's candidates
// in a worker process with a watchdog (tune_worker.hpp), and merges the winners into a database.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/autotuner.hpp"
#include "cuda/device.hpp"
#include "jit/compiler.hpp"
#include "jit/kernel_builder.hpp"
#include "tileops/tileops.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/output.hpp"
#include "tileops_tune/problems.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "tileops_tune/worker_runner.hpp"
#include "util/clock.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"

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
                                          db_path, db.rejected_count(),
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

// The GPUs to tune on: --devices (ordinals, or "all"), else --device.
std::vector<int> tuning_devices(const cxxopts::ParseResult& args) {
    if (!args.count("devices")) return {args["device"].as<int>()};
    if (args.count("device")) throw InvalidArgument("give --device or --devices, not both");
    const std::string text = args["devices"].as<std::string>();
    std::vector<int> devices;
    if (text == "all") {
        const int count = cuda::device_count();
        if (count == 0) throw Unsupported("--devices all: no GPU is visible (is the driver installed?)");
        for (int d = 0; d < count; ++d) devices.push_back(d);
        return devices;
    }
    for (const std::string& item : detail::split_flags(text)) {
        if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
            throw InvalidArgument(fmt::format("--devices: '{}' is not a GPU ordinal (give e.g. 0,1 or all)", item));
        const int d = std::stoi(item);
        if (std::find(devices.begin(), devices.end(), d) != devices.end())
            throw InvalidArgument(fmt::format("--devices: GPU {} is named twice", d));
        devices.push_back(d);
    }
    if (devices.empty()) throw InvalidArgument("--devices: give GPU ordinals (e.g. 0,1) or all");
    return devices;
}

// The tuned GPUs, which must be of one model: a database holds one model's configs.
std::vector<DeviceInfo> same_model_devices(const std::vector<int>& devices) {
    std::vector<DeviceInfo> infos;
    for (int d : devices) {
        infos.push_back(cuda::query_device(d));
        if (infos.back().name != infos.front().name || infos.back().arch() != infos.front().arch())
            throw InvalidArgument(fmt::format("GPU {} ({}, {}) and GPU {} ({}, {}) differ: a database holds one GPU "
                                              "model's configs, so tune each model into its own",
                                              devices.front(), infos.front().name, infos.front().arch(), d,
                                              infos.back().name, infos.back().arch()));
    }
    return infos;
}

// The order the GPUs take the problems in: the most bytes first, so that no GPU is left with a
// large problem while the others have finished (a problem's time grows with what it moves).
// Problems whose op cannot be made keep their place at the end; tuning them reports why.
std::vector<size_t> largest_first(const std::vector<detail::ProblemSpec>& problems) {
    std::vector<double> bytes(problems.size(), 0.0);
    for (size_t p = 0; p < problems.size(); ++p) {
        try {
            for (const detail::OperandSpec& operand : detail::make_op(problems[p])->model().operands())
                bytes[p] += operand.bytes();
        } catch (const std::exception&) {
        }
    }
    std::vector<size_t> order(problems.size());
    for (size_t p = 0; p < order.size(); ++p) order[p] = p;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
    return order;
}

// What tuning one problem gave: its line of the --json output, its table row, its entry.
struct ProblemOutcome {
    nlohmann::json result;
    std::vector<std::string> row;
    std::optional<TuningEntry> entry;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The tuned candidate with `config`, or null.
const tuning::CandidateOutcome* candidate_with(const tuning::TuneResult& result, const Config& config) {
    for (const tuning::CandidateOutcome& c : result.candidates)
        if (c.config == config) return &c;
    return nullptr;
}

// The table's note on a tuned problem: whether the heuristic stayed, how the config the runtime
// ran the problem with before (`current`, where not its heuristic) did, and how many candidates
// the budget left untimed (they are not failures, and are not listed one by one).
std::string note_of(const tuning::TuneResult& result, const std::optional<tuning::ConfigChoice>& current) {
    std::vector<std::string> parts;
    if (result.heuristic_kept) parts.push_back("heuristic kept");
    if (current) {
        const tuning::CandidateOutcome* c = candidate_with(result, current->config);
        const std::string was = fmt::format("the config before ({})", to_string(current->source));
        if (result.entry.config == current->config) parts.push_back(was + " kept");
        else if (c && c->ok) parts.push_back(fmt::format("{}: {:.2f} us", was, c->median_us));
        else parts.push_back(was + " failed");
    }
    if (const int skipped = result.entry.candidates_skipped; skipped > 0)
        parts.push_back(fmt::format("{} untimed (budget)", skipped));
    return fmt::format("{}", fmt::join(parts, "; "));
}

// `start`: when the tune began; the outcome says when this problem started and how long it took.
// `current`: the runtime's config for the problem before this tune, where not its heuristic.
ProblemOutcome outcome_of(const std::string& name, const std::function<tuning::TuneResult()>& tune,
                          const std::optional<tuning::ConfigChoice>& current, Clock::time_point start) {
    const double started = seconds_since(start);
    const auto began = Clock::now();
    ProblemOutcome outcome;
    try {
        tuning::TuneResult result = tune();
        nlohmann::json failed = nlohmann::json::array(), skipped = nlohmann::json::array(), timed = nlohmann::json::array();
        for (const auto& c : result.candidates) {
            if (c.skipped) skipped.push_back({{"config", config_json(c.config)}, {"why", c.failure}});
            else if (!c.ok) failed.push_back({{"config", config_json(c.config)}, {"why", c.failure}});
            else timed.push_back({{"config", config_json(c.config)}, {"median_us", c.median_us}});
        }
        outcome.result = {{"problem", name},
                          {"entry", entry_json(result.entry)},
                          {"heuristic_median_us", result.heuristic_median_us},
                          {"heuristic_kept", result.heuristic_kept},
                          {"failed", failed},
                          {"skipped", skipped},
                          {"timed", timed}};
        if (current) {
            nlohmann::json before = {{"config", config_json(current->config)}, {"source", to_string(current->source)}};
            if (const tuning::CandidateOutcome* c = candidate_with(result, current->config); c && c->ok)
                before["median_us"] = c->median_us;
            outcome.result["runtime_config_before"] = before;
        }
        const TuningEntry& e = result.entry;
        outcome.row = {name,
                       config_text(e.config),
                       fmt::format("{:.2f}", e.median_us),
                       fmt::format("{:.2f}", result.heuristic_median_us),
                       fmt::format("{:.0f} {}", e.throughput, e.throughput_unit),
                       fmt::format("{}/{}", e.candidates_failed, e.candidates_tried),
                       note_of(result, current)};
        outcome.entry = e;
    } catch (const std::exception& e) {
        outcome.result = {{"problem", name}, {"error", e.what()}};
        outcome.row = {name, std::string("FAILED: ") + e.what(), "", "", "", "", ""};
    }
    outcome.result["started_s"] = started;
    outcome.result["seconds"] = seconds_since(began);
    return outcome;
}

// What the runtime would run each problem with today when that is not its heuristic: an entry of
// the target database (what --skip-tuned leaves out), another fleet's shipped one, a nearby
// shape's. The tuner times it right after the heuristic whatever the budget, so that a short tune
// never replaces it, untimed, with something slower. Found before any tuning: the target
// database changes as results are saved.
std::vector<std::optional<tuning::ConfigChoice>> runtime_choices(const std::vector<detail::ProblemSpec>& problems,
                                                                 const DeviceInfo& device, const std::string& db_path,
                                                                 bool db_exists) {
    tuning::ConfigResolver resolver = make_resolver(device.arch(), db_exists ? std::vector<std::string>{db_path}
                                                                             : std::vector<std::string>{},
                                                    device.name);
    std::vector<std::optional<tuning::ConfigChoice>> choices(problems.size());
    for (size_t p = 0; p < problems.size(); ++p) {
        try {
            auto op = detail::make_op(problems[p]);
            tuning::ConfigChoice choice = tuning::choose_config(resolver, op->model(), device);
            if (choice.source != tuning::ConfigSource::heuristic) choices[p] = std::move(choice);
        } catch (const std::exception&) {
            // tuning it reports what is wrong
        }
    }
    return choices;
}

// Whether the problem's op reads a batch's sequence lengths or a grouped GEMM's group offsets
// (what --lengths draws).
bool has_lengths(const detail::ProblemSpec& spec) {
    const auto op = detail::make_op(spec);
    const auto operands = op->model().operands();
    return std::any_of(operands.begin(), operands.end(), [](const detail::OperandSpec& o) {
        return o.fill == detail::OperandFill::sequence_lengths || o.fill == detail::OperandFill::even_offsets;
    });
}

}  // namespace

int cmd_tune(int argc, char** argv) {
    return run_command(
        "tune", "Autotune problems on one GPU or several and write the results into a tuning database.", argc, argv,
        [](cxxopts::Options& options) {
            add_problem_options(options);
            options.add_options()("db", "the database the results are merged into (created if missing)",
                                  cxxopts::value<std::string>())(
                "budget", "seconds per problem", cxxopts::value<double>()->default_value("60"))(
                "max-candidates", "at most this many configs per problem (0: all)",
                cxxopts::value<int>()->default_value("0"))("random", "sample the search space randomly instead of exhaustively")(
                "seed", "random seed", cxxopts::value<uint64_t>()->default_value("1"))(
                "lengths", "decode batches' sequence lengths, or contiguous grouped GEMMs' rows a group, while "
                           "timing: uniform (every one at the longest; even groups), one_long, long_tail or ragged "
                           "(seeded; see the README)",
                cxxopts::value<std::string>()->default_value("uniform"))(
                "repeats", "timed runs per candidate", cxxopts::value<int>()->default_value("20"))(
                "device", "GPU ordinal", cxxopts::value<int>()->default_value("0"))(
                "devices", "tune on these GPUs side by side, one worker each (e.g. 0,1, or all)",
                cxxopts::value<std::string>())(
                "candidate-timeout", "seconds a candidate may run before its worker is killed",
                cxxopts::value<double>()->default_value("60"))(
                "in-process", "run the candidates in this process: no worker, no watchdog (for debuggers)")(
                "skip-tuned", "leave out the problems --db already holds a usable entry for (resume a tune that "
                              "was cut short: results are saved as each problem ends)");
        },
        [](const cxxopts::ParseResult& args) {
            std::vector<detail::ProblemSpec> problems = problems_from(args);
            if (problems.empty()) throw InvalidArgument("nothing to tune: give --op/--shape or --workload");
            if (!args.count("db")) throw InvalidArgument("give the database to write with --db");
            const tuning::LengthSpread lengths = tuning::parse_length_spread(args["lengths"].as<std::string>());
            if (lengths != tuning::LengthSpread::uniform)
                for (size_t p = 0; p < problems.size(); ++p)
                    if (!has_lengths(problems[p]))
                        throw InvalidArgument(fmt::format("--lengths {}: problem {} ({}) has no sequence lengths or group "
                                                          "offsets (decode_attention, mla_decode and contiguous "
                                                          "gemm_grouped / gemm_fp8_grouped have)",
                                                          tuning::length_spread_name(lengths), p + 1, describe(problems[p])));
            const std::string db_path = args["db"].as<std::string>();
            const std::optional<TuningDb> existing = open_target_db(db_path);
            const std::vector<int> devices = tuning_devices(args);
            const bool in_process = args.count("in-process") > 0;
            if (in_process && devices.size() > 1)
                throw InvalidArgument("--in-process tunes on one GPU: give one device");
            const double candidate_timeout = args["candidate-timeout"].as<double>();
            if (!(candidate_timeout > 0 && candidate_timeout <= 86400))
                throw InvalidArgument("--candidate-timeout: give seconds, more than 0 and at most 86400");
            const std::vector<DeviceInfo> infos = same_model_devices(devices);
            const DeviceInfo& device = infos.front();
            std::vector<std::optional<tuning::ConfigChoice>> current =
                runtime_choices(problems, device, db_path, existing.has_value());
            if (args.count("skip-tuned") && existing) {
                const size_t before = problems.size();
                std::vector<detail::ProblemSpec> untuned;
                std::vector<std::optional<tuning::ConfigChoice>> untuned_current;
                for (size_t p = 0; p < before; ++p) {
                    if (current[p] && current[p]->source == tuning::ConfigSource::user_db) continue;  // tuned in db_path
                    untuned.push_back(std::move(problems[p]));
                    untuned_current.push_back(std::move(current[p]));
                }
                problems = std::move(untuned);
                current = std::move(untuned_current);
                fmt::print(stderr, "{} of {} problem(s) already tuned in {}: skipped\n", before - problems.size(), before,
                           db_path);
                if (problems.empty()) return 0;
            }

            tuning::TuneOptions tune;
            tune.lengths = lengths;
            tune.budget_seconds = args["budget"].as<double>();
            tune.max_candidates = args["max-candidates"].as<int>();
            tune.exhaustive = !args.count("random");
            tune.seed = args["seed"].as<uint64_t>();
            tune.repeats = args["repeats"].as<int>();
            // The GPUs tune side by side, so each compiles on its share of the cores.
            tune.compile_threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(devices.size()));
            Progress progress(Progress::for_stderr(args.count("json") > 0));

            TuningDb db;
            TuningDbMeta& meta = db.meta();
            meta.library_version = tileops::version();
            meta.gpu_name = device.name;
            meta.arch = device.arch();
            meta.driver = fmt::format("{}.{}", device.driver_version / 1000, (device.driver_version % 1000) / 10);
            meta.nvrtc_version = jit::nvrtc_version();
            meta.created_at = util::utc_timestamp();
            meta.sources = {fmt::format("tileops-tune on {}{}", device.name,
                                        tune.lengths == tuning::LengthSpread::uniform
                                            ? ""
                                            : ", lengths " + tuning::length_spread_name(tune.lengths))};
            if (existing) (void)TuningDb::merge(*existing, db);  // refuses a file of another arch now

            const auto start = Clock::now();
            std::vector<ProblemOutcome> outcomes(problems.size());
            // Each result is saved as its problem ends, so a tune that is killed keeps what it
            // measured (--skip-tuned resumes it); a failed save is retried once all have ended.
            std::mutex db_mutex;
            auto keep = [&](const ProblemOutcome& outcome) {
                if (!outcome.entry) return;
                std::lock_guard lock(db_mutex);
                db.upsert(*outcome.entry);
                try {
                    db.save(db_path);
                } catch (const std::exception& e) {
                    util::logger().warn("tileops-tune: could not save into {} yet ({}): retried at the end", db_path,
                                        e.what());
                }
            };
            std::vector<double> done(problems.size(), 0.0);
            std::mutex progress_mutex;
            auto progress_for = [&](size_t p, int gpu) {
                return [&, p, gpu](const std::string& what, double fraction) {
                    std::lock_guard lock(progress_mutex);
                    done[p] = fraction;
                    double total = 0;
                    for (double f : done) total += f;
                    const std::string where = devices.size() > 1 ? fmt::format("GPU {} ", gpu) : "";
                    progress.update(fmt::format("{}[{}/{}] {}: {}", where, p + 1, problems.size(), describe(problems[p]), what),
                                    total / problems.size());
                };
            };
            if (in_process) {
                RuntimeOptions runtime_options;
                runtime_options.device = devices.front();
                Runtime runtime(runtime_options);
                for (size_t p = 0; p < problems.size(); ++p) {
                    tuning::TuneOptions options = tune;
                    if (current[p]) options.always_timed = {current[p]->config};
                    options.progress = progress_for(p, devices.front());
                    outcomes[p] = outcome_of(describe(problems[p]), [&] {
                        auto op = detail::make_op(problems[p]);
                        return tuning::autotune(runtime, *op, options);
                    }, current[p], start);
                    keep(outcomes[p]);
                }
            } else {
                // One worker process per GPU; each GPU takes the next problem when it is free.
                jit::KernelBuilder builder(jit::DiskCache::default_directory(), jit::DiskCache::default_max_bytes(), true);
                const std::vector<size_t> order = largest_first(problems);
                std::atomic<size_t> next{0};
                auto tune_on = [&](size_t k) {
                    WorkerRunner worker(devices[k], candidate_timeout);
                    for (size_t n = next++; n < order.size(); n = next++) {
                        const size_t p = order[n];
                        tuning::TuneOptions options = tune;
                        if (current[p]) options.always_timed = {current[p]->config};
                        options.progress = progress_for(p, devices[k]);
                        const int restarts_before = worker.restarts();
                        outcomes[p] = outcome_of(describe(problems[p]), [&] {
                            auto op = detail::make_op(problems[p]);
                            worker.set_problem(problems[p], tune.seed, tune.lengths);
                            return tuning::autotune(op->model(), infos[k], builder, worker, options);
                        }, current[p], start);
                        outcomes[p].result["device"] = devices[k];
                        outcomes[p].result["worker_restarts"] = worker.restarts() - restarts_before;
                        keep(outcomes[p]);
                    }
                };
                std::vector<std::thread> threads;
                for (size_t k = 0; k < devices.size(); ++k) threads.emplace_back(tune_on, k);
                for (std::thread& t : threads) t.join();
            }

            nlohmann::json results = nlohmann::json::array();
            std::vector<std::vector<std::string>> rows;
            int failures = 0;
            for (ProblemOutcome& outcome : outcomes) {
                if (outcome.entry) db.upsert(*outcome.entry);
                else ++failures;
                results.push_back(std::move(outcome.result));
                rows.push_back(std::move(outcome.row));
            }
            progress.done();
            save_results(db, db_path);
            if (args.count("json")) {
                fmt::print("{}\n",
                           nlohmann::json({{"db", db_path}, {"results", results}, {"seconds", seconds_since(start)}}).dump(2));
            } else {
                print_table({"problem", "config", "us", "heuristic us", "throughput", "failed/tried", "note"}, rows);
                fmt::print("{} problem(s) tuned into {}; {} failed\n", problems.size() - failures, db_path, failures);
                size_t short_problems = 0, untimed = 0;
                for (const auto& r : results) {
                    for (const auto& f : r.value("failed", nlohmann::json::array()))
                        fmt::print(stderr, "{}: candidate {} not used: {}\n", r["problem"].get<std::string>(),
                                   f["config"].dump(), f["why"].get<std::string>());
                    const size_t skipped = r.value("skipped", nlohmann::json::array()).size();
                    short_problems += skipped > 0;
                    untimed += skipped;
                }
                if (short_problems > 0)
                    fmt::print(stderr,
                               "{} problem(s) ran out of their {} s budget with {} candidate(s) untimed; give --budget "
                               "more seconds to time every candidate\n",
                               short_problems, tune.budget_seconds, untimed);
            }
            return failures == 0 ? 0 : 1;
        });
}

}  // namespace tileops::cli
