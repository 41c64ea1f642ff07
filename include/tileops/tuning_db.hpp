// The tuning database: JSON files of tuned configs keyed by op, shape, dtype, flags, arch and the
// content hash of the kernel template they were tuned with. See README.md for the format.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tileops/export.hpp"

namespace tileops {

// A kernel config: named integer tunables, e.g. {"threads_per_row": 256, "vec": 8, "items": 4}.
using Config = std::map<std::string, long long>;

struct TILEOPS_EXPORT TuningKey {
    std::string op;                // "rmsnorm"
    std::vector<long long> shape;  // {8192, 4096}
    std::string dtype;             // "bf16" or "bf16->fp32"
    std::string flags;             // "" or e.g. "residual"
    std::string arch;              // "sm_90a" (sm_90a != sm_90)
    // Content hash of the kernel template the entry's config selects, with what it includes
    // (TemplateRegistry::template_hash): editing one kernel retires only the entries tuned on it.
    // Empty in a key that looks a problem up (its config, and so its kernel, is not known yet).
    std::string template_hash;

    // "rmsnorm 8192x4096 bf16 [residual] sm_90a" (the template hash is left out: it is long).
    std::string to_string() const;
    friend TILEOPS_EXPORT bool operator==(const TuningKey& a, const TuningKey& b);
    friend TILEOPS_EXPORT bool operator<(const TuningKey& a, const TuningKey& b);  // field by field, in declaration order
};

struct RunnerUp {
    Config config;
    double median_us = 0;
};

struct TuningEntry {
    TuningKey key;
    Config config;
    double median_us = 0;       // the winner's median time
    double spread_us = 0;       // interquartile range of its timings
    double throughput = 0;      // in throughput_unit
    std::string throughput_unit = "GB/s";
    std::vector<RunnerUp> runners_up;
    int candidates_tried = 0;    // the configs of the search space (or its sample) the tune had
    int candidates_failed = 0;   // failed to compile, run or match the reference
    int candidates_skipped = 0;  // never timed: the tune's time budget ran out first
    double stability = 0;       // fraction of interleaved re-timing rounds the winner was fastest
    std::string nvrtc_version;  // the NVRTC the entry was tuned with; empty: the file's metadata says
    std::string tuned_at;       // ISO 8601 UTC
    std::string device;         // GPU name
};

struct TuningDbMeta {
    int format_version = 1;
    std::string library_version;
    std::string gpu_name;
    std::string arch;
    std::string driver;
    std::string nvrtc_version;
    std::string created_at;
    std::vector<std::string> sources;  // the files merged into this one (parse and merge keep it sorted, unique)
};

// An entry that was not loaded, and why.
struct RejectedEntry {
    std::string source;  // file name
    size_t index = 0;    // position in "entries"
    std::string reason;
};

// Returns why an entry must not be used (config invalid for the op or device, ...), or nullopt.
// A validator that throws rejects the entry with the exception's message as the reason.
using EntryValidator = std::function<std::optional<std::string>(const TuningEntry&)>;

// Selects entries; an empty field matches everything.
struct TILEOPS_EXPORT TuningFilter {
    std::string op;
    std::string arch;
    std::string dtype;
    bool matches(const TuningEntry& entry) const;
};

class TILEOPS_EXPORT TuningDb {
public:
    static constexpr int kFormatVersion = 1;

    TuningDb() = default;

    // Throws FileError naming the file (and line/column or field) for a file that cannot be read
    // or is not a tuning database at all: not JSON, top level not an object, format_version
    // missing or not this library's, "metadata" or "entries" of the wrong type. An entry that is
    // malformed (wrong type, missing field, out of range: e.g. "entries[3].config.vec: expected
    // integer, got string") or that `validator` rejects is skipped with a spdlog warning naming
    // the file and the entry, and listed in rejected(); the rest loads. Only the first
    // kMaxRejectedListed are warned about and listed (a file of millions of bad entries would
    // otherwise take gigabytes and as many log lines); rejected_count() counts them all.
    static TuningDb load(const std::filesystem::path& path, const EntryValidator& validator = {});
    static TuningDb parse(std::string_view json_text, const std::string& source_name,
                          const EntryValidator& validator = {});
    // Pretty JSON in a stable order (entries sorted by key), so diffs are readable.
    std::string to_json() const;

    // Merges this database into the file at `path` (created if missing) under an exclusive lock,
    // keeping the faster entry per key, and writes it atomically: concurrent savers lose nothing.
    // Refuses (FileError) to overwrite a file it cannot parse, and (InvalidArgument) to mix in a
    // database whose metadata names another arch; entries of the file that are malformed are
    // dropped from it, with a warning.
    void save(const std::filesystem::path& path) const;

    // Keeps the faster of `entry` and an existing entry with the same key. Throws
    // InvalidArgument for an entry the file format could not hold (what parse would reject: empty
    // op, rank 0 or > 8, a dimension < 1, a time that is NaN, infinite or negative, ...).
    void upsert(TuningEntry entry);
    const TuningEntry* find(const TuningKey& key) const;
    // The entry of the same op, dtype, flags, arch, template hash (any, when key.template_hash is
    // empty) and rank whose shape is nearest
    // to key.shape; nullopt when none is within max_distance (inclusive). The distance is the
    // Euclidean distance between the log2 of the dimensions:
    //     sqrt(sum_d (log2(entry.shape[d]) - log2(key.shape[d]))^2)
    // so 1.0 is one dimension off by a factor of two. Equal distances go to the smaller key.
    // A key with a dimension < 1 has no nearest entry.
    std::optional<std::pair<const TuningEntry*, double>> nearest(const TuningKey& key, double max_distance) const;
    // The same, skipping entries `accept` refuses (called nearest first, until one is accepted).
    std::optional<std::pair<const TuningEntry*, double>> nearest(
        const TuningKey& key, double max_distance, const std::function<bool(const TuningEntry&)>& accept) const;
    // log2-space distance between two shapes of the same rank (+inf when the ranks differ or a
    // dimension is < 1).
    static double shape_distance(const std::vector<long long>& a, const std::vector<long long>& b);

    // The faster entry per key; commutative (ties are broken on the entries' content) and
    // idempotent. Every entry keeps its own device, tuned_at and nvrtc_version. The merged
    // metadata lists the union of both sources (sorted); other metadata fields are kept when equal
    // and joined ("a, b", sorted) when not; created_at is the later one. Throws InvalidArgument
    // naming both archs (and sources) when both name different archs in their metadata.
    static TuningDb merge(const TuningDb& a, const TuningDb& b);

    const std::vector<TuningEntry>& entries() const noexcept { return entries_; }  // sorted by key
    std::vector<const TuningEntry*> select(const TuningFilter& filter) const;
    const TuningDbMeta& meta() const noexcept { return meta_; }
    TuningDbMeta& meta() noexcept { return meta_; }
    static constexpr size_t kMaxRejectedListed = 100;
    const std::vector<RejectedEntry>& rejected() const noexcept { return rejected_; }  // the first ones
    size_t rejected_count() const noexcept { return rejected_count_; }

    // Same metadata and entries (rejected() is not compared).
    friend TILEOPS_EXPORT bool operator==(const TuningDb& a, const TuningDb& b);

private:
    void insert_checked(TuningEntry entry);  // upsert for an entry already known to be valid

    TuningDbMeta meta_;
    std::vector<TuningEntry> entries_;
    std::vector<RejectedEntry> rejected_;
    size_t rejected_count_ = 0;
};

TILEOPS_EXPORT bool operator==(const TuningEntry& a, const TuningEntry& b);
TILEOPS_EXPORT bool operator==(const RunnerUp& a, const RunnerUp& b);
TILEOPS_EXPORT bool operator==(const TuningDbMeta& a, const TuningDbMeta& b);

// True when `a` should be kept over `b` for the same key: faster, or on a tie the smaller in a
// fixed order of their content.
TILEOPS_EXPORT bool better_entry(const TuningEntry& a, const TuningEntry& b);

}  // namespace tileops

template <>
struct TILEOPS_EXPORT std::hash<tileops::TuningKey> {
    std::size_t operator()(const tileops::TuningKey& key) const noexcept;
};
