#include "tuning/config_choice.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/error.hpp"
#include "tuning/shipped_db_dirs.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"

namespace tileops::tuning {
namespace fs = std::filesystem;

std::string to_string(ConfigSource source) {
    switch (source) {
        case ConfigSource::memory: return "memory";
        case ConfigSource::user_db: return "user database";
        case ConfigSource::shipped_db: return "shipped database";
        case ConfigSource::other_fleet_db: return "another GPU's shipped database";
        case ConfigSource::nearest: return "nearest tuned shape";
        case ConfigSource::heuristic: return "heuristic";
    }
    return "unknown";
}

ConfigResolver::ConfigResolver(ResolverOptions options) : options_(std::move(options)) {
    if (options_.user_dbs.empty()) {
        if (auto list = util::env("TILEOPS_TUNING_DB")) {
            std::stringstream stream(*list);
            std::string path;
            while (std::getline(stream, path, ':'))
                if (!path.empty()) options_.user_dbs.push_back(path);
        }
    }
    if (options_.shipped_dirs.empty()) options_.shipped_dirs = default_shipped_dirs();
    if (std::isnan(options_.max_distance))
        throw InvalidArgument("tileops: ResolverOptions::max_distance is NaN");
    if (options_.max_distance < 0) {
        options_.max_distance = 1.0;
        if (auto value = util::env("TILEOPS_TUNING_MAX_DISTANCE")) {
            // A plain decimal >= 0 ("1.5", "2e3") or "inf" (any distance); std::stod alone would also
            // take hex ("0x10"), leading spaces and "nan".
            double parsed = -1;
            size_t used = 0;
            const bool decimal = !value->empty() && value->find_first_not_of("0123456789.eE+-") == std::string::npos &&
                                 (std::isdigit(static_cast<unsigned char>(value->front())) || value->front() == '.');
            if (*value == "inf") {
                parsed = std::numeric_limits<double>::infinity(), used = value->size();
            } else if (decimal) {
                try {
                    parsed = std::stod(*value, &used);
                } catch (...) {
                    used = 0;
                }
            }
            if (used != value->size() || std::isnan(parsed) || parsed < 0)
                throw InvalidArgument(
                    fmt::format("tileops: TILEOPS_TUNING_MAX_DISTANCE='{}' is not a number >= 0", *value));
            options_.max_distance = parsed;
        }
    }
}

// The words of a GPU model's name that tell fleets apart: "NVIDIA H100 80GB HBM3" -> H100, 80GB, HBM3.
static std::set<std::string> model_words(const std::string& name) {
    std::set<std::string> words;
    std::stringstream in(name);
    for (std::string word; in >> word;)
        if (word != "NVIDIA") words.insert(word);
    return words;
}

// How near another fleet's GPU model is to `gpu`: the words their names share (an H100 PCIe shares
// "H100" with the H100 SXM, an H200 shares nothing with either).
static size_t fleet_nearness(const std::string& gpu, const std::string& other) {
    const std::set<std::string> a = model_words(gpu), b = model_words(other);
    return static_cast<size_t>(std::count_if(a.begin(), a.end(), [&](const std::string& w) { return b.count(w) > 0; }));
}

// Entries in memory are found by problem, whatever kernel their config selects.
static TuningKey problem_key(TuningKey key) {
    key.template_hash.clear();
    return key;
}

void ConfigResolver::remember(const TuningEntry& entry) {
    std::lock_guard lock(mutex_);
    memory_[problem_key(entry.key)] = entry;
}

void ConfigResolver::load_once() {
    if (loaded_) return;
    // User databases were asked for by name: a missing or broken one is an error (thrown from
    // choose(); nothing is kept, so the next call tries again).
    std::vector<LoadedDb> user;
    for (const std::string& path : options_.user_dbs) user.push_back({path, TuningDb::load(path)});
    for (const auto& [origin, text] : options_.bundled_dbs) {
        TuningDb db = TuningDb::parse(text, origin);
        if (db.meta().arch.empty() || db.meta().arch == options_.arch) user.push_back({origin, std::move(db)});
    }
    std::vector<LoadedDb> shipped;
    // Shipped databases: every file of this arch; a broken one is skipped with a warning.
    std::set<fs::path> seen;
    bool any_dir = false;
    size_t files = 0;
    for (const std::string& dir : options_.shipped_dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) continue;
        any_dir = true;
        for (const auto& file : fs::directory_iterator(dir, ec)) {
            if (file.path().extension() != ".json") continue;
            ++files;
            if (!seen.insert(file.path().filename()).second) continue;  // an earlier directory's file of that name wins
            try {
                TuningDb db = TuningDb::load(file.path());
                if (db.meta().arch == options_.arch) shipped.push_back({file.path().string(), std::move(db)});
            } catch (const std::exception& e) {
                util::logger().warn("tileops: skipping shipped tuning database: {}", e.what());
            }
        }
    }
    if (!any_dir && !options_.shipped_dirs.empty())
        util::logger().warn("tileops: no shipped tuning databases found (looked in {}): configs come from the "
                            "heuristic unless TILEOPS_TUNING_DB names a database",
                            fmt::format("{}", fmt::join(options_.shipped_dirs, ", ")));
    else if (any_dir && files == 0)  // e.g. TILEOPS_SHIPPED_DB_DIR naming the directory above
        util::logger().warn("tileops: the shipped tuning database directory ({}) holds no databases (*.json): configs "
                            "come from the heuristic unless TILEOPS_TUNING_DB names a database",
                            fmt::format("{}", fmt::join(options_.shipped_dirs, ", ")));
    // Deterministic whatever order the directories list their files in.
    std::stable_sort(shipped.begin(), shipped.end(), [](const LoadedDb& a, const LoadedDb& b) {
        return fs::path(a.path).filename() < fs::path(b.path).filename();
    });
    // This GPU's fleet (and databases that name no GPU) first; the other fleets of the arch
    // after it, nearest first, for what this fleet's databases lack.
    std::vector<LoadedDb> own, others;
    for (LoadedDb& db : shipped) {
        const std::string& fleet = db.db.meta().gpu_name;
        const bool mine = options_.gpu_name.empty() || fleet.empty() || fleet == options_.gpu_name;
        (mine ? own : others).push_back(std::move(db));
    }
    std::stable_sort(others.begin(), others.end(), [&](const LoadedDb& a, const LoadedDb& b) {
        return fleet_nearness(options_.gpu_name, a.db.meta().gpu_name) >
               fleet_nearness(options_.gpu_name, b.db.meta().gpu_name);
    });
    user_ = std::move(user);
    shipped_ = std::move(own);
    other_fleets_ = std::move(others);
    loaded_ = true;
}

void ConfigResolver::report(const std::string& origin, const TuningEntry& entry, const std::string& why) {
    std::string line = fmt::format("{}: {}: {}", origin, entry.key.to_string(), why);
    if (reported_.insert(line).second) {
        util::logger().warn("tileops: ignoring tuning entry {}", line);
        stale_.push_back(std::move(line));
    }
}

std::optional<std::string> ConfigResolver::invalid_reason(const TuningEntry& entry, const EntryValidator& valid) {
    if (!valid) return std::nullopt;
    try {
        if (auto reason = valid(entry)) return kInvalidHere + *reason;
    } catch (const std::exception& e) {
        return fmt::format("{}validator failed: {}", kInvalidHere, e.what());
    }
    return std::nullopt;
}

std::optional<std::string> ConfigResolver::unusable_reason(const TuningEntry& entry, const TuningKey& key,
                                                           const EntryValidator& valid, const KernelHash& kernel_hash) {
    // The config is checked before its kernel's hash is asked for: only a config the op accepts
    // selects a kernel.
    if (!kernel_hash)
        return entry.key.template_hash != key.template_hash ? std::optional(fmt::format("stale: {}", kStaleTemplateReason))
                                                            : invalid_reason(entry, valid);
    if (auto why = invalid_reason(entry, valid)) return why;
    try {
        if (entry.key.template_hash != kernel_hash(entry.config)) return fmt::format("stale: {}", kStaleTemplateReason);
    } catch (const std::exception& e) {
        return fmt::format("{}{}", kInvalidHere, e.what());
    }
    return std::nullopt;
}

bool ConfigResolver::usable(const LoadedDb& db, const TuningEntry& entry, const TuningKey& key,
                            const EntryValidator& valid, const KernelHash& kernel_hash, bool exact_shape) {
    // Stale: tuned with another NVRTC (the entry's own version, else its file's), in a file made
    // for another arch, or on another version of the kernel template its config selects. Never
    // used.
    const std::string& tuned_nvrtc = entry.nvrtc_version.empty() ? db.db.meta().nvrtc_version : entry.nvrtc_version;
    std::optional<std::string> why;
    if (!options_.nvrtc_version.empty() && !tuned_nvrtc.empty() && tuned_nvrtc != options_.nvrtc_version)
        why = fmt::format("stale: tuned with NVRTC {}, this is {}", tuned_nvrtc, options_.nvrtc_version);
    else if (!db.db.meta().arch.empty() && db.db.meta().arch != key.arch)
        why = fmt::format("stale: the database is for {}, not {}", db.db.meta().arch, key.arch);
    else
        why = unusable_reason(entry, key, valid, kernel_hash);
    if (!why) return true;
    // A config tuned for a near shape may simply not fit this one (a row too long for its slots):
    // nothing wrong with the entry, so no warning. Stale entries are reported wherever met.
    if (!exact_shape && why->rfind(kInvalidHere, 0) == 0 && why->find("validator failed") == std::string::npos) {
        util::logger().debug("tileops: {}: {} does not fit: {}", key.to_string(), entry.key.to_string(), *why);
        return false;
    }
    report(db.path, entry, *why);
    return false;
}

const TuningEntry* ConfigResolver::exact(const LoadedDb& db, const TuningKey& key, const EntryValidator& valid,
                                         const KernelHash& kernel_hash) {
    for (const TuningEntry& e : db.db.entries()) {
        if (e.key.op != key.op || e.key.shape != key.shape || e.key.dtype != key.dtype || e.key.flags != key.flags ||
            e.key.arch != key.arch)
            continue;
        if (usable(db, e, key, valid, kernel_hash, true)) return &e;
    }
    return nullptr;
}

ConfigChoice ConfigResolver::choose(const TuningKey& key, const std::function<Config()>& heuristic,
                                    const EntryValidator& valid, const KernelHash& kernel_hash) {
    std::optional<ConfigChoice> choice = lookup(key, valid, kernel_hash);
    if (!choice) {
        // The heuristic runs outside the lock: it is the op's code.
        choice.emplace();
        choice->source = ConfigSource::heuristic;
        if (heuristic) choice->config = heuristic();
        choice->explanation = "no tuned entry for this shape, nor a near one whose config suits it";
    }
    util::logger().debug("tileops: {}: config from {}{}{}; {}", key.to_string(), to_string(choice->source),
                            choice->origin.empty() ? "" : " ", choice->origin, choice->explanation);
    return std::move(*choice);
}

std::optional<ConfigChoice> ConfigResolver::lookup(const TuningKey& key, const EntryValidator& valid,
                                                   const KernelHash& kernel_hash) {
    auto done = [](ConfigSource source, const Config& config, const std::string& origin, std::string explanation) {
        ConfigChoice choice;
        choice.source = source;
        choice.config = config;
        choice.origin = origin;
        choice.explanation = std::move(explanation);
        return choice;
    };
    std::lock_guard lock(mutex_);
    load_once();
    if (auto it = memory_.find(problem_key(key)); it != memory_.end()) {
        if (auto why = unusable_reason(it->second, key, valid, kernel_hash))
            report("memory", it->second, *why);
        else
            return done(ConfigSource::memory, it->second.config, "", "registered in this process");
    }
    for (const LoadedDb& db : user_)
        if (const TuningEntry* e = exact(db, key, valid, kernel_hash))
            return done(ConfigSource::user_db, e->config, db.path, fmt::format("tuned on {} at {}", e->device, e->tuned_at));
    for (const LoadedDb& db : shipped_)
        if (const TuningEntry* e = exact(db, key, valid, kernel_hash))
            return done(ConfigSource::shipped_db, e->config, db.path, fmt::format("tuned on {} at {}", e->device, e->tuned_at));
    for (const LoadedDb& db : other_fleets_)
        if (const TuningEntry* e = exact(db, key, valid, kernel_hash))
            return done(ConfigSource::other_fleet_db, e->config, db.path,
                        fmt::format("tuned on {} at {} (no shipped database of the {} holds it)", e->device,
                                    e->tuned_at, options_.gpu_name));
    // The nearest usable tuned shape over user and this fleet's databases, else over the other
    // fleets' (each database's nearest entry that is neither stale nor invalid); ties keep the
    // earlier database.
    const TuningEntry* best = nullptr;
    const LoadedDb* best_db = nullptr;
    double best_distance = 0;
    bool other_fleet = false;
    for (const auto& lists : {std::vector<const std::vector<LoadedDb>*>{&user_, &shipped_}, {&other_fleets_}}) {
        for (const auto* list : lists)
            for (const LoadedDb& db : *list) {
                auto near = db.db.nearest(key, options_.max_distance, [&](const TuningEntry& e) {
                    return usable(db, e, key, valid, kernel_hash, false);
                });
                if (!near) continue;
                if (best == nullptr || near->second < best_distance) {
                    best = near->first;
                    best_db = &db;
                    best_distance = near->second;
                }
            }
        if (best != nullptr) break;
        other_fleet = true;
    }
    if (best != nullptr) {
        ConfigChoice choice = done(ConfigSource::nearest, best->config, best_db->path,
                                   fmt::format("from {} at log2 distance {:.2f} (max {:.2f}){}", best->key.to_string(),
                                               best_distance, options_.max_distance,
                                               other_fleet ? fmt::format(", tuned on {} (no shipped database of "
                                                                         "the {} holds a shape near it)",
                                                                         best->device, options_.gpu_name)
                                                           : ""));
        choice.distance = best_distance;
        return choice;
    }
    return std::nullopt;
}

std::vector<std::string> ConfigResolver::stale_entries() const {
    std::lock_guard lock(mutex_);
    return stale_;
}

}  // namespace tileops::tuning
