// Which config an op runs with: the lookup order of the runtime and tileops-tune explain.
//
//   1. in-process memory (configs the autotuner or the program registered),
//   2. user databases (RuntimeOptions::tuning_dbs or TILEOPS_TUNING_DB; earlier files win),
//   3. the shipped database for this arch (tuning_db/*.json whose metadata arch matches), of
//      this GPU model's fleet (metadata gpu_name) first, then of the nearest other fleet of the
//      arch (an H200 without its own entry gets the H100's),
//   4. the nearest tuned shape of the same op/dtype/flags/arch (log2-space distance, at most
//      TILEOPS_TUNING_MAX_DISTANCE, default 1.0: e.g. one dimension off by a factor of two)
//      whose config the op accepts for this shape (the validator: OpModel::invalid_reason, and
//      neighbour_misfit for a config that runs but would serve this shape badly),
//   5. the op's heuristic.
// Entries tuned with another version of the kernel template their config selects (content hash),
// another NVRTC (the entry's nvrtc_version,
// else its file's metadata) or found in a user database whose metadata names another arch are
// stale: never used, reported once (spdlog warn, once per file and entry) and listed by
// stale_entries(). Entries the op rejects (invalid config for this device) are skipped the same way,
// but silently where the entry is only a nearest-shape candidate (its config need not fit).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tileops/tuning_db.hpp"

namespace tileops::tuning {

// Why an entry tuned with another version of its op's kernel template is never used.
inline constexpr const char* kStaleTemplateReason = "tuned with another version of the kernel template";
// How the reason for an entry whose config the op rejects starts.
inline constexpr const char* kInvalidHere = "invalid here: ";

enum class ConfigSource { memory, user_db, shipped_db, other_fleet_db, nearest, heuristic };
std::string to_string(ConfigSource source);

// The content hash of the kernel template a config selects (see TuningKey::template_hash).
using KernelHash = std::function<std::string(const Config&)>;

struct ConfigChoice {
    Config config;
    ConfigSource source = ConfigSource::heuristic;
    std::string origin;       // the database file; empty for memory and heuristic (the source says which)
    double distance = 0;      // for `nearest`: the log2-space distance to the tuned shape
    std::string explanation;  // one line for logs and explain()
};

struct ResolverOptions {
    std::string arch;
    // The GPU model (DeviceInfo::name): its fleet's shipped databases come before other fleets'
    // of the arch. Empty: no fleet is preferred (shipped databases in file-name order).
    std::string gpu_name;
    std::string nvrtc_version;
    std::vector<std::string> user_dbs;  // empty: TILEOPS_TUNING_DB
    // Databases given as text (a fleet bundle's): searched after user_dbs, as they are; each is
    // (where it came from, JSON text).
    std::vector<std::pair<std::string, std::string>> bundled_dbs;
    std::vector<std::string> shipped_dirs;  // empty: default_shipped_dirs() (tuning/shipped_db_dirs.hpp)
    double max_distance = -1;           // < 0: TILEOPS_TUNING_MAX_DISTANCE, else 1.0 (log2 units)
};

class ConfigResolver {
public:
    // Reads TILEOPS_TUNING_DB / TILEOPS_TUNING_MAX_DISTANCE where the options leave them open
    // (InvalidArgument for a distance that is not a number >= 0). Databases load on first use.
    explicit ConfigResolver(ResolverOptions options);

    // Registers a tuned entry in memory (first in the lookup order).
    void remember(const TuningEntry& entry);

    // The first of: memory (exact key), user databases (exact, earlier file first), shipped
    // databases of this GPU's fleet (exact), those of other fleets (exact, nearest fleet first),
    // the nearest usable tuned shape (user and this fleet's, then other fleets'; see
    // TuningDb::nearest), the heuristic. Thread-safe; the heuristic is called without the lock.
    // `valid` returns why an entry's config cannot run this problem here; it is called with the
    // resolver's lock held, so it must not call back into the resolver. `kernel_hash` gives the
    // content hash of the kernel template a config selects now (called after `valid` accepted
    // the config, also under the lock); an entry with another hash is stale. Without it, an
    // entry is stale when its hash differs from key.template_hash. Throws FileError when a user
    // database cannot be read or is not a tuning database.
    ConfigChoice choose(const TuningKey& key, const std::function<Config()>& heuristic, const EntryValidator& valid,
                        const KernelHash& kernel_hash = {});

    // Entries not used so far ("file: key: why", stale or invalid), each once.
    std::vector<std::string> stale_entries() const;
    const ResolverOptions& options() const noexcept { return options_; }

private:
    struct LoadedDb {
        std::string path;
        TuningDb db;
    };
    void load_once();
    std::optional<ConfigChoice> lookup(const TuningKey& key, const EntryValidator& valid, const KernelHash& kernel_hash);
    static std::optional<std::string> invalid_reason(const TuningEntry& entry, const EntryValidator& valid);
    // Why `entry` cannot serve `key`: a config the op refuses, or tuned on another version of the
    // kernel its config selects (kernel_hash; without it, key.template_hash); nullopt when it can.
    static std::optional<std::string> unusable_reason(const TuningEntry& entry, const TuningKey& key,
                                                      const EntryValidator& valid, const KernelHash& kernel_hash);
    void report(const std::string& origin, const TuningEntry& entry, const std::string& why);
    // The usable exact match in `db`, reporting stale or rejected look-alikes once.
    const TuningEntry* exact(const LoadedDb& db, const TuningKey& key, const EntryValidator& valid,
                             const KernelHash& kernel_hash);
    // Whether `entry` may serve `key`; reports why not (once), except a config that does not fit a
    // shape it was not tuned for (exact_shape false: a nearest-shape candidate).
    bool usable(const LoadedDb& db, const TuningEntry& entry, const TuningKey& key, const EntryValidator& valid,
                const KernelHash& kernel_hash, bool exact_shape);

    ResolverOptions options_;
    mutable std::mutex mutex_;
    bool loaded_ = false;
    std::map<TuningKey, TuningEntry> memory_;
    std::vector<LoadedDb> user_;
    std::vector<LoadedDb> shipped_;       // this GPU's fleet (or every fleet, without a gpu_name)
    std::vector<LoadedDb> other_fleets_;  // the arch's other fleets, nearest first
    std::set<std::string> reported_;
    std::vector<std::string> stale_;
};

}  // namespace tileops::tuning
