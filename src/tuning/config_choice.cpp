#include "tuning/config_choice.hpp"

#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tileops/error.hpp"
#include "util/file_util.hpp"

namespace tileops::tuning {
namespace fs = std::filesystem;

std::string to_string(ConfigSource source) {
    switch (source) {
        case ConfigSource::memory: return "memory";
        case ConfigSource::user_db: return "user database";
        case ConfigSource::shipped_db: return "shipped database";
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
    if (options_.shipped_dirs.empty()) {
#ifdef TILEOPS_SHIPPED_DB_DIR
        options_.shipped_dirs.emplace_back(TILEOPS_SHIPPED_DB_DIR);
#endif
#ifdef TILEOPS_SOURCE_DB_DIR
        options_.shipped_dirs.emplace_back(TILEOPS_SOURCE_DB_DIR);
#endif
    }
    if (options_.max_distance < 0) {
        options_.max_distance = 1.0;
        if (auto value = util::env("TILEOPS_TUNING_MAX_DISTANCE")) {
            try {
                options_.max_distance = std::stod(*value);
            } catch (...) {
                throw InvalidArgument(fmt::format("tileops: TILEOPS_TUNING_MAX_DISTANCE='{}' is not a number", *value));
            }
        }
    }
}

void ConfigResolver::remember(const TuningEntry& entry) {
    std::lock_guard lock(mutex_);
    memory_[entry.key] = entry;
}

void ConfigResolver::load_once() {
    if (loaded_) return;
    // User databases were asked for by name: a missing or broken one is an error.
    for (const std::string& path : options_.user_dbs) user_.push_back({path, TuningDb::load(path)});
    // Shipped databases: every file of this arch; a broken one is skipped with a warning.
    std::set<fs::path> seen;
    for (const std::string& dir : options_.shipped_dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) continue;
        for (const auto& file : fs::directory_iterator(dir, ec)) {
            if (file.path().extension() != ".json") continue;
            if (!seen.insert(file.path().filename()).second) continue;  // installed copy wins over the source tree
            try {
                TuningDb db = TuningDb::load(file.path());
                if (db.meta().arch == options_.arch) shipped_.push_back({file.path().string(), std::move(db)});
            } catch (const std::exception& e) {
                spdlog::warn("tileops: skipping shipped tuning database: {}", e.what());
            }
        }
    }
    loaded_ = true;
}

bool ConfigResolver::usable(const LoadedDb& db, const TuningEntry& entry, const TuningKey& key,
                            const EntryValidator& valid) {
    std::string why;
    if (entry.key.template_hash != key.template_hash)
        why = "tuned with another version of the kernel template";
    else if (!options_.nvrtc_version.empty() && entry.nvrtc_version != options_.nvrtc_version)
        why = fmt::format("tuned with NVRTC {}, this is {}", entry.nvrtc_version, options_.nvrtc_version);
    else if (valid)
        if (auto reason = valid(entry)) why = "invalid here: " + *reason;
    if (why.empty()) return true;
    std::string report = fmt::format("{}: {}: {}", db.path, entry.key.to_string(), why);
    if (reported_.insert(report).second) {
        spdlog::warn("tileops: ignoring tuning entry {}", report);
        stale_.push_back(report);
    }
    return false;
}

const TuningEntry* ConfigResolver::exact(const LoadedDb& db, const TuningKey& key, const EntryValidator& valid) {
    for (const TuningEntry& e : db.db.entries()) {
        if (e.key.op != key.op || e.key.shape != key.shape || e.key.dtype != key.dtype || e.key.flags != key.flags ||
            e.key.arch != key.arch)
            continue;
        if (usable(db, e, key, valid)) return &e;
    }
    return nullptr;
}

ConfigChoice ConfigResolver::choose(const TuningKey& key, const std::function<Config()>& heuristic,
                                    const EntryValidator& valid) {
    std::lock_guard lock(mutex_);
    load_once();
    ConfigChoice choice;
    auto done = [&](ConfigSource source, const Config& config, const std::string& origin, std::string explanation) {
        choice.source = source;
        choice.config = config;
        choice.origin = origin;
        choice.explanation = std::move(explanation);
        spdlog::debug("tileops: {}: config from {} {} {}", key.to_string(), to_string(source), origin, choice.explanation);
        return choice;
    };
    if (auto it = memory_.find(key); it != memory_.end() && !(valid && valid(it->second)))
        return done(ConfigSource::memory, it->second.config, "", "registered in this process");
    for (const LoadedDb& db : user_)
        if (const TuningEntry* e = exact(db, key, valid))
            return done(ConfigSource::user_db, e->config, db.path, fmt::format("tuned on {} at {}", e->device, e->tuned_at));
    for (const LoadedDb& db : shipped_)
        if (const TuningEntry* e = exact(db, key, valid))
            return done(ConfigSource::shipped_db, e->config, db.path, fmt::format("tuned on {} at {}", e->device, e->tuned_at));
    // The nearest tuned shape over user then shipped databases; ties keep the earlier database.
    const TuningEntry* best = nullptr;
    const LoadedDb* best_db = nullptr;
    double best_distance = 0;
    for (const auto* list : {&user_, &shipped_})
        for (const LoadedDb& db : *list) {
            auto near = db.db.nearest(key, options_.max_distance);
            if (!near || !usable(db, *near->first, key, valid)) continue;
            if (best == nullptr || near->second < best_distance) {
                best = near->first;
                best_db = &db;
                best_distance = near->second;
            }
        }
    if (best != nullptr) {
        choice.distance = best_distance;
        return done(ConfigSource::nearest, best->config, best_db->path,
                    fmt::format("from {} at log2 distance {:.2f} (max {:.2f})", best->key.to_string(), best_distance,
                                options_.max_distance));
    }
    return done(ConfigSource::heuristic, heuristic(), "", "no tuned entry for this shape or a near one");
}

std::vector<std::string> ConfigResolver::stale_entries() const {
    std::lock_guard lock(mutex_);
    return stale_;
}

}  // namespace tileops::tuning
