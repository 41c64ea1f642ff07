#include "tileops/tuning_db.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tileops/error.hpp"
#include "util/file_util.hpp"
#include "util/json_keys.hpp"
#include "util/log.hpp"

namespace tileops {
namespace {

using nlohmann::json;

constexpr size_t kMaxRank = 8;
constexpr long long kMaxDim = 1LL << 40;
constexpr size_t kMaxString = 4096;
constexpr size_t kMaxRunnersUp = 64;

auto key_tuple(const TuningKey& k) { return std::tie(k.op, k.shape, k.dtype, k.flags, k.arch, k.template_hash); }

// An entry that cannot be read: names the field, e.g. "entries[3].config.vec: expected integer, got string".
struct EntryError {
    std::string message;
};

// What a JSON value is, in the words of an error message: integers and floats are told apart.
const char* type_name(const json& value) {
    if (value.is_number_integer()) return "integer";
    if (value.is_number_float()) return "float";
    return value.type_name();
}

const json& member(const json& object, const char* name, const std::string& path) {
    auto it = object.find(name);
    if (it == object.end()) throw EntryError{fmt::format("{}.{}: missing", path, name)};
    return *it;
}

// A string from the file that will be printed (list, show, logs) must not drive the terminal: no
// control characters (escape sequences start with one) and no NUL, which would cut messages.
void check_printable(const std::string& value, const std::string& what) {
    if (const int code = util::first_control_character(value); code >= 0)
        throw EntryError{fmt::format("{}: holds control character 0x{:02x}", what, code)};
}

std::string get_string(const json& object, const char* name, const std::string& path, bool required = true) {
    auto it = object.find(name);
    if (it == object.end()) {
        if (required) throw EntryError{fmt::format("{}.{}: missing", path, name)};
        return {};
    }
    if (!it->is_string()) throw EntryError{fmt::format("{}.{}: expected string, got {}", path, name, type_name(*it))};
    std::string value = it->get<std::string>();
    if (value.size() > kMaxString) throw EntryError{fmt::format("{}.{}: longer than {} characters", path, name, kMaxString)};
    check_printable(value, fmt::format("{}.{}", path, name));
    return value;
}

long long get_integer(const json& value, const std::string& path, long long lo, long long hi) {
    if (!value.is_number_integer())
        throw EntryError{fmt::format("{}: expected integer, got {}", path, type_name(value))};
    // Unsigned values above the signed range are refused rather than wrapped.
    if (value.is_number_unsigned() && value.get<unsigned long long>() > static_cast<unsigned long long>(hi))
        throw EntryError{fmt::format("{}: {} is out of range [{}, {}]", path, value.dump(), lo, hi)};
    long long v = value.get<long long>();
    if (v < lo || v > hi) throw EntryError{fmt::format("{}: {} is out of range [{}, {}]", path, v, lo, hi)};
    return v;
}

double get_number(const json& object, const char* name, const std::string& path, bool required = true) {
    auto it = object.find(name);
    if (it == object.end()) {
        if (required) throw EntryError{fmt::format("{}.{}: missing", path, name)};
        return 0;
    }
    if (!it->is_number()) throw EntryError{fmt::format("{}.{}: expected number, got {}", path, name, type_name(*it))};
    double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) throw EntryError{fmt::format("{}.{}: {} is not a finite number >= 0", path, name, v)};
    return v;
}

Config parse_config(const json& value, const std::string& path) {
    if (!value.is_object()) throw EntryError{fmt::format("{}: expected object, got {}", path, type_name(value))};
    Config config;
    for (auto it = value.begin(); it != value.end(); ++it) {
        if (it.key().size() > 64) throw EntryError{fmt::format("{}: a tunable name is longer than 64 characters", path)};
        check_printable(it.key(), path + ": a tunable name");
        // Every tunable is a count or size in [0, 2^20] (kMaxConfigValue, core/op_model.hpp): a file
        // holding anything else is refused here, not rewritten by merge and refused at run time.
        config[it.key()] = get_integer(it.value(), path + "." + it.key(), 0, 1LL << 20);
    }
    if (config.empty()) throw EntryError{fmt::format("{}: empty config", path)};
    return config;
}

TuningEntry parse_entry(const json& item, const std::string& path) {
    if (!item.is_object()) throw EntryError{fmt::format("{}: expected object, got {}", path, type_name(item))};
    TuningEntry e;
    e.key.op = get_string(item, "op", path);
    if (e.key.op.empty()) throw EntryError{fmt::format("{}.op: empty", path)};
    const json& shape = member(item, "shape", path);
    if (!shape.is_array()) throw EntryError{fmt::format("{}.shape: expected array, got {}", path, type_name(shape))};
    if (shape.empty() || shape.size() > kMaxRank)
        throw EntryError{fmt::format("{}.shape: rank {} is not in [1, {}]", path, shape.size(), kMaxRank)};
    for (size_t d = 0; d < shape.size(); ++d)
        e.key.shape.push_back(get_integer(shape[d], fmt::format("{}.shape[{}]", path, d), 1, kMaxDim));
    e.key.dtype = get_string(item, "dtype", path);
    e.key.flags = get_string(item, "flags", path, false);
    e.key.arch = get_string(item, "arch", path);
    e.key.template_hash = get_string(item, "template_hash", path);
    e.config = parse_config(member(item, "config", path), path + ".config");
    e.median_us = get_number(item, "median_us", path);
    e.spread_us = get_number(item, "spread_us", path, false);
    e.throughput = get_number(item, "throughput", path, false);
    if (item.contains("throughput_unit")) e.throughput_unit = get_string(item, "throughput_unit", path);
    if (auto it = item.find("runners_up"); it != item.end()) {
        if (!it->is_array())
            throw EntryError{fmt::format("{}.runners_up: expected array, got {}", path, type_name(*it))};
        if (it->size() > kMaxRunnersUp)
            throw EntryError{fmt::format("{}.runners_up: {} entries, at most {}", path, it->size(), kMaxRunnersUp)};
        for (size_t r = 0; r < it->size(); ++r) {
            const std::string rpath = fmt::format("{}.runners_up[{}]", path, r);
            const json& runner = (*it)[r];
            if (!runner.is_object()) throw EntryError{fmt::format("{}: expected object, got {}", rpath, type_name(runner))};
            e.runners_up.push_back({parse_config(member(runner, "config", rpath), rpath + ".config"),
                                    get_number(runner, "median_us", rpath)});
        }
    }
    if (auto it = item.find("candidates_tried"); it != item.end())
        e.candidates_tried = static_cast<int>(get_integer(*it, path + ".candidates_tried", 0, 1 << 30));
    if (auto it = item.find("candidates_failed"); it != item.end())
        e.candidates_failed = static_cast<int>(get_integer(*it, path + ".candidates_failed", 0, 1 << 30));
    if (auto it = item.find("candidates_skipped"); it != item.end())
        e.candidates_skipped = static_cast<int>(get_integer(*it, path + ".candidates_skipped", 0, 1 << 30));
    e.stability = get_number(item, "stability", path, false);
    if (e.stability > 1) throw EntryError{fmt::format("{}.stability: {} is not a fraction in [0, 1]", path, e.stability)};
    // Optional: files written by hand may state the NVRTC once, in their metadata.
    e.nvrtc_version = get_string(item, "nvrtc_version", path, false);
    e.tuned_at = get_string(item, "tuned_at", path, false);
    e.device = get_string(item, "device", path, false);
    return e;
}

json config_json(const Config& config) {
    json object = json::object();
    for (const auto& [name, value] : config) object[name] = value;
    return object;
}

json entry_json(const TuningEntry& e) {
    json runners = json::array();
    for (const auto& r : e.runners_up) runners.push_back({{"config", config_json(r.config)}, {"median_us", r.median_us}});
    return {{"op", e.key.op},
            {"shape", e.key.shape},
            {"dtype", e.key.dtype},
            {"flags", e.key.flags},
            {"arch", e.key.arch},
            {"template_hash", e.key.template_hash},
            {"config", config_json(e.config)},
            {"median_us", e.median_us},
            {"spread_us", e.spread_us},
            {"throughput", e.throughput},
            {"throughput_unit", e.throughput_unit},
            {"runners_up", runners},
            {"candidates_tried", e.candidates_tried},
            {"candidates_failed", e.candidates_failed},
            {"candidates_skipped", e.candidates_skipped},
            {"stability", e.stability},
            {"nvrtc_version", e.nvrtc_version},
            {"tuned_at", e.tuned_at},
            {"device", e.device}};
}

// 1-based line and column of a byte offset.
std::pair<size_t, size_t> line_column(std::string_view text, size_t byte) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < std::min(byte, text.size()); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return {line, column};
}

// nlohmann's message without its own "[json.exception...] parse error at line L, column C: " prefix.
std::string parse_error_detail(const std::string& what) {
    const size_t column = what.find("column ");
    if (column == std::string::npos) return what;
    const size_t colon = what.find(": ", column);
    return colon == std::string::npos ? what : what.substr(colon + 2);
}

// Where a number literal that overflowed a double is in the text (nlohmann reports no position
// for it): the first occurrence of the literal, as "line:column", or empty.
std::string overflow_position(std::string_view text, const std::string& what) {
    const size_t open = what.find('\'');
    const size_t close = open == std::string::npos ? std::string::npos : what.find('\'', open + 1);
    if (close == std::string::npos || close == open + 1) return {};
    const size_t at = text.find(std::string_view(what).substr(open + 1, close - open - 1));
    if (at == std::string_view::npos) return {};
    auto [line, column] = line_column(text, at);
    return fmt::format("{}:{}", line, column);
}

TuningDbMeta parse_meta(const json& root, const std::string& source) {
    TuningDbMeta meta;
    auto version = root.find("format_version");
    if (version == root.end() || !version->is_number_integer())
        throw FileError(fmt::format("{}: not a tileops tuning database (no integer \"format_version\")", source));
    if (version->get<long long>() != TuningDb::kFormatVersion)
        throw FileError(fmt::format("{}: format_version {} is not supported (this library reads {})", source,
                                    version->dump(), TuningDb::kFormatVersion));
    auto it = root.find("metadata");
    if (it == root.end()) return meta;
    if (!it->is_object()) throw FileError(fmt::format("{}: metadata: expected object, got {}", source, type_name(*it)));
    try {
        meta.library_version = get_string(*it, "library_version", "metadata", false);
        meta.gpu_name = get_string(*it, "gpu_name", "metadata", false);
        meta.arch = get_string(*it, "arch", "metadata", false);
        meta.driver = get_string(*it, "driver", "metadata", false);
        meta.nvrtc_version = get_string(*it, "nvrtc_version", "metadata", false);
        meta.created_at = get_string(*it, "created_at", "metadata", false);
        if (auto sources = it->find("sources"); sources != it->end()) {
            if (!sources->is_array()) throw EntryError{"metadata.sources: expected a list of strings"};
            for (const auto& s : *sources) {
                if (!s.is_string()) throw EntryError{"metadata.sources: expected a list of strings"};
                check_printable(s.get<std::string>(), "metadata.sources");
                meta.sources.push_back(s.get<std::string>());
            }
            std::sort(meta.sources.begin(), meta.sources.end());
            meta.sources.erase(std::unique(meta.sources.begin(), meta.sources.end()), meta.sources.end());
        }
    } catch (const EntryError& e) {
        throw FileError(fmt::format("{}: {}", source, e.message));
    }
    return meta;
}

// Joins two metadata values: equal stays, else the sorted distinct values (commutative).
std::string join_values(const std::string& a, const std::string& b) {
    // Values already joined by an earlier merge are split again, so repeated merges and saves
    // keep one copy of each distinct value instead of growing the field.
    std::set<std::string> values;
    for (const std::string* side : {&a, &b}) {
        size_t start = 0;
        while (start <= side->size()) {
            size_t end = side->find(", ", start);
            if (end == std::string::npos) end = side->size();
            if (end > start) values.insert(side->substr(start, end - start));
            start = end + 2;
        }
    }
    std::string joined;
    for (const std::string& v : values) joined += (joined.empty() ? "" : ", ") + v;
    return joined;
}

// The merge message names each side by its sources when it has any.
std::string describe_side(const TuningDbMeta& meta) {
    if (meta.sources.empty()) return meta.arch;
    return fmt::format("{} ({})", meta.arch, fmt::join(meta.sources, ", "));
}

// Puts an entry through the file format's own checks (what parse would refuse, upsert refuses).
void check_entry(const TuningEntry& e) {
    try {
        (void)parse_entry(entry_json(e), "entry");
    } catch (const EntryError& error) {
        throw InvalidArgument(fmt::format("tileops: invalid tuning entry {}: {}", e.key.to_string(), error.message));
    }
}

void hash_combine(std::size_t& seed, std::size_t value) {
    seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

}  // namespace

bool TuningFilter::matches(const TuningEntry& entry) const {
    return (op.empty() || entry.key.op == op) && (arch.empty() || entry.key.arch == arch) &&
           (dtype.empty() || entry.key.dtype == dtype);
}

std::string TuningKey::to_string() const {
    std::string text = fmt::format("{} {} {}", op, fmt::join(shape, "x"), dtype);
    if (!flags.empty()) text += " [" + flags + "]";
    return text + " " + arch;
}

bool operator==(const TuningKey& a, const TuningKey& b) { return key_tuple(a) == key_tuple(b); }
bool operator<(const TuningKey& a, const TuningKey& b) { return key_tuple(a) < key_tuple(b); }
bool operator==(const RunnerUp& a, const RunnerUp& b) { return a.config == b.config && a.median_us == b.median_us; }

bool operator==(const TuningEntry& a, const TuningEntry& b) { return entry_json(a) == entry_json(b); }

bool operator==(const TuningDbMeta& a, const TuningDbMeta& b) {
    return std::tie(a.format_version, a.library_version, a.gpu_name, a.arch, a.driver, a.nvrtc_version, a.created_at,
                    a.sources) == std::tie(b.format_version, b.library_version, b.gpu_name, b.arch, b.driver,
                                           b.nvrtc_version, b.created_at, b.sources);
}

bool operator==(const TuningDb& a, const TuningDb& b) { return a.meta_ == b.meta_ && a.entries_ == b.entries_; }

bool better_entry(const TuningEntry& a, const TuningEntry& b) {
    // A NaN time (only reachable by calling this directly: upsert and parse refuse it) ranks last.
    const double ta = std::isnan(a.median_us) ? INFINITY : a.median_us;
    const double tb = std::isnan(b.median_us) ? INFINITY : b.median_us;
    if (ta != tb) return ta < tb;
    return entry_json(a).dump() < entry_json(b).dump();
}

namespace {

// Sorts entries by key and keeps the better of each group of equal keys: n log n, where inserting
// one entry at a time into a sorted vector is quadratic (40k entries in reverse order: 46 s).
void sort_keeping_best(std::vector<TuningEntry>& entries) {
    std::stable_sort(entries.begin(), entries.end(), [](const TuningEntry& a, const TuningEntry& b) { return a.key < b.key; });
    std::vector<TuningEntry> kept;
    kept.reserve(entries.size());
    for (TuningEntry& e : entries) {
        if (!kept.empty() && kept.back().key == e.key) {
            if (better_entry(e, kept.back())) kept.back() = std::move(e);
        } else {
            kept.push_back(std::move(e));
        }
    }
    entries = std::move(kept);
}

}  // namespace

TuningDb TuningDb::parse(std::string_view text, const std::string& source, const EntryValidator& validator) {
    // The JSON parser stops at a NUL byte as at the end of the input: what follows would be
    // ignored, not refused.
    if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
        auto [line, column] = line_column(text, nul);
        throw FileError(fmt::format("{}:{}:{}: invalid JSON: a NUL byte", source, line, column));
    }
    util::JsonScan scan = util::scan_json(text);
    if (scan.values > util::kMaxJsonValues)
        throw FileError(fmt::format("{}: more than {} JSON values, more than any tuning database holds", source,
                                    util::kMaxJsonValues));
    json root;
    try {
        root = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
        // e.byte is the 1-based offset of the last byte read: where the error was found.
        auto [line, column] = line_column(text, e.byte == 0 ? 0 : e.byte - 1);
        throw FileError(fmt::format("{}:{}:{}: invalid JSON: {}", source, line, column, parse_error_detail(e.what())));
    } catch (const json::exception& e) {
        // A number too large for a double ("1e400") is an out_of_range error without a position.
        const std::string where = overflow_position(text, e.what());
        throw FileError(fmt::format("{}{}{}: invalid JSON: {}", source, where.empty() ? "" : ":", where, e.what()));
    }
    // JSON keeps only the last of repeated keys: a hand-joined file with two "entries" lists would
    // silently lose the first. A key repeated in the file's own objects refuses the file; one
    // repeated inside an entry rejects that entry.
    std::string repeated;                           // the first key repeated outside the entries
    std::map<size_t, std::string> repeated_in_entry;  // entry index -> the first key repeated in it
    for (util::RepeatedKey& r : scan.repeated) {
        const bool in_entry = r.where.size() >= 2 && r.where[0] == "entries" && !r.where[1].empty() &&
                              r.where[1].find_first_not_of("0123456789") == std::string::npos;  // not "entries": {...}
        if (in_entry)
            repeated_in_entry.emplace(std::stoul(r.where[1]), std::move(r.key));
        else if (repeated.empty())
            repeated = std::move(r.key);
    }
    if (!repeated.empty())
        throw FileError(fmt::format("{}: the key \"{}\" appears twice in one object (JSON would keep only the last)",
                                    source, repeated));
    if (!root.is_object()) throw FileError(fmt::format("{}: expected a JSON object at the top, got {}", source, type_name(root)));
    TuningDb db;
    db.meta_ = parse_meta(root, source);
    auto entries = root.find("entries");
    if (entries == root.end()) return db;
    if (!entries->is_array()) throw FileError(fmt::format("{}: entries: expected a list, got {}", source, type_name(*entries)));
    for (size_t i = 0; i < entries->size(); ++i) {
        const std::string path = fmt::format("entries[{}]", i);
        std::string reason;
        try {
            if (auto twice = repeated_in_entry.find(i); twice != repeated_in_entry.end())
                throw EntryError{fmt::format("{}: the key \"{}\" appears twice in one object", path, twice->second)};
            TuningEntry entry = parse_entry((*entries)[i], path);
            if (validator) {
                std::optional<std::string> why;
                try {
                    why = validator(entry);
                } catch (const std::exception& e) {
                    why = fmt::format("validator failed: {}", e.what());
                }
                if (why) reason = fmt::format("{} ({}): {}", path, entry.key.to_string(), *why);
            }
            if (reason.empty()) {
                db.entries_.push_back(std::move(entry));
                continue;
            }
        } catch (const EntryError& e) {
            reason = e.message;
        }
        if (db.rejected_count_++ < kMaxRejectedListed) {
            util::logger().warn("tileops: skipping tuning entry {}: {}", source, reason);
            db.rejected_.push_back({source, i, reason});
        }
    }
    if (db.rejected_count_ > kMaxRejectedListed)
        util::logger().warn("tileops: skipping {} more malformed tuning entries of {} (only the first {} are listed)",
                            db.rejected_count_ - kMaxRejectedListed, source, kMaxRejectedListed);
    sort_keeping_best(db.entries_);
    return db;
}

TuningDb TuningDb::load(const std::filesystem::path& path, const EntryValidator& validator) {
    std::string why;
    auto text = util::read_file(path, util::kMaxReadBytes, &why);
    if (!text) throw FileError(fmt::format("tileops: cannot read tuning database {}: {}", path.string(), why));
    return parse(*text, path.string(), validator);
}

std::string TuningDb::to_json() const {
    json entries = json::array();
    for (const TuningEntry& e : entries_) entries.push_back(entry_json(e));
    json root = {{"format_version", kFormatVersion},
                 {"metadata",
                  {{"library_version", meta_.library_version},
                   {"gpu_name", meta_.gpu_name},
                   {"arch", meta_.arch},
                   {"driver", meta_.driver},
                   {"nvrtc_version", meta_.nvrtc_version},
                   {"created_at", meta_.created_at},
                   {"sources", meta_.sources}}},
                 {"entries", entries}};
    return root.dump(2) + "\n";
}

void TuningDb::upsert(TuningEntry entry) {
    check_entry(entry);
    insert_checked(std::move(entry));
}

void TuningDb::insert_checked(TuningEntry entry) {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), entry.key,
                               [](const TuningEntry& e, const TuningKey& k) { return e.key < k; });
    if (it != entries_.end() && it->key == entry.key) {
        if (better_entry(entry, *it)) *it = std::move(entry);
        return;
    }
    entries_.insert(it, std::move(entry));
}

const TuningEntry* TuningDb::find(const TuningKey& key) const {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                               [](const TuningEntry& e, const TuningKey& k) { return e.key < k; });
    return it != entries_.end() && it->key == key ? &*it : nullptr;
}

double TuningDb::shape_distance(const std::vector<long long>& a, const std::vector<long long>& b) {
    if (a.size() != b.size()) return INFINITY;
    double sum = 0;
    for (size_t d = 0; d < a.size(); ++d) {
        if (a[d] < 1 || b[d] < 1) return INFINITY;
        const double diff = std::log2(static_cast<double>(a[d])) - std::log2(static_cast<double>(b[d]));
        sum += diff * diff;
    }
    return std::sqrt(sum);
}

std::optional<std::pair<const TuningEntry*, double>> TuningDb::nearest(const TuningKey& key, double max_distance) const {
    return nearest(key, max_distance, {});
}

std::optional<std::pair<const TuningEntry*, double>> TuningDb::nearest(
    const TuningKey& key, double max_distance, const std::function<bool(const TuningEntry&)>& accept) const {
    if (std::isnan(max_distance)) return std::nullopt;
    // Candidates within reach, nearest first; entries_ is sorted by key, so on equal distances
    // the lower address is the smaller key.
    std::vector<std::pair<double, const TuningEntry*>> within;
    for (const TuningEntry& e : entries_) {
        if (e.key.op != key.op || e.key.dtype != key.dtype || e.key.flags != key.flags || e.key.arch != key.arch ||
            (!key.template_hash.empty() && e.key.template_hash != key.template_hash) ||
            e.key.shape.size() != key.shape.size())
            continue;
        const double distance = shape_distance(e.key.shape, key.shape);
        if (std::isfinite(distance) && distance <= max_distance) within.emplace_back(distance, &e);
    }
    std::sort(within.begin(), within.end(), [](const auto& x, const auto& y) {
        return x.first != y.first ? x.first < y.first : std::less<const TuningEntry*>()(x.second, y.second);
    });
    for (const auto& [distance, e] : within)
        if (!accept || accept(*e)) return std::pair{e, distance};
    return std::nullopt;
}

std::vector<const TuningEntry*> TuningDb::select(const TuningFilter& filter) const {
    std::vector<const TuningEntry*> out;
    for (const TuningEntry& e : entries_)
        if (filter.matches(e)) out.push_back(&e);
    return out;
}

TuningDb TuningDb::merge(const TuningDb& a, const TuningDb& b) {
    if (!a.meta_.arch.empty() && !b.meta_.arch.empty() && a.meta_.arch != b.meta_.arch)
        throw InvalidArgument(fmt::format("tileops: cannot merge tuning databases of different archs: {} and {}",
                                          describe_side(a.meta_), describe_side(b.meta_)));
    TuningDb merged;
    TuningDbMeta& m = merged.meta_;
    m.library_version = join_values(a.meta_.library_version, b.meta_.library_version);
    m.gpu_name = join_values(a.meta_.gpu_name, b.meta_.gpu_name);
    m.arch = join_values(a.meta_.arch, b.meta_.arch);
    m.driver = join_values(a.meta_.driver, b.meta_.driver);
    m.nvrtc_version = join_values(a.meta_.nvrtc_version, b.meta_.nvrtc_version);
    m.created_at = std::max(a.meta_.created_at, b.meta_.created_at);
    std::set<std::string> sources(a.meta_.sources.begin(), a.meta_.sources.end());
    sources.insert(b.meta_.sources.begin(), b.meta_.sources.end());
    m.sources.assign(sources.begin(), sources.end());
    // A file that names an arch is used for that arch only: when a side that names none brings
    // entries of another arch, the merge names none either, so that every entry stays usable.
    for (const TuningDb* side : {&a, &b})
        for (const TuningEntry& e : side->entries_)
            if (!m.arch.empty() && e.key.arch != m.arch) m.arch.clear();
    merged.entries_ = a.entries_;
    merged.entries_.insert(merged.entries_.end(), b.entries_.begin(), b.entries_.end());
    sort_keeping_best(merged.entries_);
    return merged;
}

void TuningDb::save(const std::filesystem::path& path) const {
    const std::filesystem::path lock_path(path.string() + ".lock");
    util::FileLock lock(lock_path, util::FileLock::Mode::exclusive);
    lock.remove_on_release(lock_path);  // no lock file stays beside the database
    TuningDb on_disk;
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
        std::string why;
        auto text = util::read_file(path, util::kMaxReadBytes, &why);
        if (!text) throw FileError(fmt::format("tileops: cannot read {} to merge into it: {}", path.string(), why));
        on_disk = parse(*text, path.string());
        if (on_disk.rejected_count() > 0)
            util::logger().warn("tileops: rewriting tuning database {} drops its {} malformed entries", path.string(),
                                on_disk.rejected_count());
    }
    // Entries of other archs may share a file only when neither names an arch in its metadata.
    TuningDb merged = merge(on_disk, *this);
    util::write_file_atomic(path, merged.to_json());
}

}  // namespace tileops

std::size_t std::hash<tileops::TuningKey>::operator()(const tileops::TuningKey& key) const noexcept {
    std::size_t seed = std::hash<std::string>()(key.op);
    for (long long d : key.shape) tileops::hash_combine(seed, std::hash<long long>()(d));
    tileops::hash_combine(seed, std::hash<std::string>()(key.dtype));
    tileops::hash_combine(seed, std::hash<std::string>()(key.flags));
    tileops::hash_combine(seed, std::hash<std::string>()(key.arch));
    tileops::hash_combine(seed, std::hash<std::string>()(key.template_hash));
    return seed;
}
