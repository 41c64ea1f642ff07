// The tuning database (TuningDb): JSON round trips, lookups (exact, nearest shape), parsing that
// names the file, line, column, entry and field of what is wrong, hostile input, the validator,
// upsert and merge semantics, save() from several processes at once (and killed midway). The
// config resolver that reads these files has its own tests (test_config_resolver.cpp). No GPU is
// involved.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "support/log_capture.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "util/file_util.hpp"
#include "util/json_keys.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::WithinAbs;
using nlohmann::json;
using tileops::Config;
using tileops::FileError;
using tileops::InvalidArgument;
using tileops::TuningDb;
using tileops::TuningEntry;
using tileops::TuningKey;
using tileops::test::LogCapture;
using tileops::test::TempDir;

namespace {

fs::path fixture(const std::string& name) { return fs::path(TILEOPS_TEST_SOURCE_DIR) / "tests" / "data" / "tuning" / name; }

TuningKey make_key(std::string op, std::vector<long long> shape, std::string dtype = "bf16", std::string flags = "",
                   std::string arch = "sm_90a", std::string hash = "h1") {
    return TuningKey{std::move(op), std::move(shape), std::move(dtype), std::move(flags), std::move(arch), std::move(hash)};
}

// An entry with its provenance (spread, throughput, NVRTC, tuned_at, device) filled in.
TuningEntry make_entry(TuningKey key, double median_us, Config config = {{"vec", 8}}, std::string device = "GPU A") {
    TuningEntry e;
    e.key = std::move(key);
    e.config = std::move(config);
    e.median_us = median_us;
    e.spread_us = median_us / 50;
    e.throughput = median_us > 0 ? 1000.0 / median_us : 0.0;
    e.nvrtc_version = "13.0";
    e.tuned_at = "2026-11-22T12:00:00Z";
    e.device = std::move(device);
    return e;
}

// An entry with only the fields a file must hold (bf16, no flags, sm_90a, template "hash-1").
TuningEntry entry_of(const std::string& op, std::vector<long long> shape, double median_us, Config config = {{"vec", 8}}) {
    TuningEntry e;
    e.key = make_key(op, std::move(shape), "bf16", "", "sm_90a", "hash-1");
    e.config = std::move(config);
    e.median_us = median_us;
    return e;
}

TuningDb make_db(const std::vector<TuningEntry>& entries, std::string arch = "sm_90a", std::string nvrtc = "13.0") {
    TuningDb db;
    db.meta().arch = std::move(arch);
    db.meta().nvrtc_version = std::move(nvrtc);
    for (const TuningEntry& e : entries) db.upsert(e);
    return db;
}

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out.good());
}

// The message of whatever `f` throws.
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no exception)";
}

// The FileError message of parsing `text` (fails the test when it parses or throws anything else).
std::string file_error_of(std::string_view text, const std::string& source = "input.json") {
    try {
        (void)TuningDb::parse(text, source);
    } catch (const FileError& e) {
        return e.what();
    }
    FAIL("parsing did not throw FileError: " << text.substr(0, 200));
    return {};
}

// CPU time used by the calling thread.
double thread_cpu_seconds() {
    timespec now{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// How many times slower than an optimized build this build runs the library: AddressSanitizer,
// UBSan and -O0 (the asan preset has all three) cost about an order of magnitude.
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
constexpr double kSlowBuild = 10;
#else
constexpr double kSlowBuild = 1;
#endif

// A full entry with every field set, including awkward strings and extreme (but valid) values.
TuningEntry full_entry() {
    TuningEntry e = make_entry(make_key("rmsnorm", {8192, 4096}, "bf16->fp32", "residual"), 42.125,
                               {{"threads_per_row", 256}, {"vec", 8}, {"items", 1LL << 20}});
    e.spread_us = 0.5;
    e.throughput = 3158.25;
    e.throughput_unit = "TFLOP/s";
    e.runners_up = {{{{"threads_per_row", 512}, {"vec", 8}}, 44.0}, {{{"threads_per_row", 128}, {"vec", 4}}, 50.5}};
    e.candidates_tried = 27;
    e.candidates_failed = 13;
    e.stability = 0.8125;
    e.tuned_at = "2026-11-22T12:46:40Z";
    e.device = "NVIDIA \"H100\" 80GB\\HBM3 \xc3\xa9";  // quotes, a backslash, UTF-8 (control characters are refused)
    return e;
}

// A well-formed entry as JSON, for tests that break one field of it.
json good_entry_json(long long rows = 64) {
    return {{"op", "rmsnorm"},
            {"shape", {rows, 4096}},
            {"dtype", "bf16"},
            {"flags", ""},
            {"arch", "sm_90a"},
            {"template_hash", "hash-1"},
            {"config", {{"threads_per_row", 256}, {"vec", 8}}},
            {"median_us", 2.5}};
}

std::string db_text(const json& entries, const json& metadata = json::object()) {
    return json{{"format_version", 1}, {"metadata", metadata}, {"entries", entries}}.dump();
}

// A file of two entries: good_entry_json() with the raw JSON text `raw_value` (which may be
// invalid JSON) as `field`, then a good neighbour of 128 rows.
std::string entry_with(const std::string& field, const std::string& raw_value) {
    json e = good_entry_json();
    e.erase(field);
    std::string text = e.dump();  // "{...}"
    text.insert(1, "\"" + field + "\": " + raw_value + (e.empty() ? "" : ","));
    return R"({"format_version": 1, "entries": [)" + text + "," + good_entry_json(128).dump() + "]}";
}

// The reason the first entry of an entry_with() text is rejected for; the neighbour must load.
std::string rejected_reason(const std::string& text) {
    TuningDb db = TuningDb::parse(text, "hostile.json");
    REQUIRE(db.entries().size() == 1);  // the good neighbour
    REQUIRE(db.rejected().size() == 1);
    CHECK(db.rejected()[0].index == 0);
    return db.rejected()[0].reason;
}

// Parses hostile text: the only acceptable failure is FileError. Loaded databases must also
// serialize and answer lookups. Returns whether it loaded.
bool survives(std::string_view text) {
    try {
        TuningDb db = TuningDb::parse(text, "hostile.json");
        const std::string again = db.to_json();
        TuningDb reparsed = TuningDb::parse(again, "hostile-again.json");
        CHECK(reparsed.entries().size() == db.entries().size());
        for (const TuningEntry& e : db.entries()) {
            CHECK(db.find(e.key) == &e);
            (void)db.nearest(e.key, 1.0);
        }
        return true;
    } catch (const FileError&) {
        return false;
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Keys, entries, round trips

TEST_CASE("tuning_db: keys compare, order and hash on every field", "[tuning_db]") {
    const TuningKey base = make_key("rmsnorm", {8192, 4096}, "bf16", "residual", "sm_90a", "h1");
    std::vector<TuningKey> variants = {base, base, base, base, base, base, base};
    variants[1].op = "layernorm";
    variants[2].shape = {8192, 4097};
    variants[3].dtype = "fp16";
    variants[4].flags = "";
    variants[5].arch = "sm_90";  // sm_90a and sm_90 are different archs
    variants[6].template_hash = "h2";
    std::unordered_set<TuningKey> set;
    for (const TuningKey& k : variants) set.insert(k);
    CHECK(set.size() == variants.size());
    for (size_t i = 1; i < variants.size(); ++i) {
        CHECK_FALSE(variants[i] == base);
        CHECK(((variants[i] < base) != (base < variants[i])));  // a strict order tells them apart
    }
    TuningKey copy = base;
    CHECK(copy == base);
    CHECK_FALSE(copy < base);
    CHECK(std::hash<TuningKey>()(copy) == std::hash<TuningKey>()(base));
    CHECK(make_key("a", {1}, "bf16", "", "sm_120") != make_key("a", {1}, "bf16", "", "sm_121"));
    CHECK(base.to_string() == "rmsnorm 8192x4096 bf16 [residual] sm_90a");
    CHECK(variants[4].to_string() == "rmsnorm 8192x4096 bf16 sm_90a");
}

TEST_CASE("tuning_db: to_json then parse reproduces every field, in a stable key order", "[tuning_db]") {
    TuningDb db;
    db.meta().library_version = "0.1.0";
    db.meta().gpu_name = "NVIDIA H100 80GB HBM3";
    db.meta().arch = "sm_90a";
    db.meta().driver = "13.0";
    db.meta().nvrtc_version = "13.0";
    db.meta().created_at = "2026-11-22T12:44:27Z";
    db.meta().sources = {"a.json", "b.json"};

    // Every field set; a time that needs all 17 significant digits, a tiny runner-up time.
    TuningEntry full = entry_of("rmsnorm", {8192, 4096}, 42.123456789012345,
                                {{"cluster", 1}, {"items", 4}, {"threads_per_row", 256}, {"vec", 8}});
    full.key.flags = "residual";
    full.spread_us = 0.1;
    full.throughput = 3158.25;
    full.throughput_unit = "GB/s";
    full.runners_up = {{{{"vec", 4}, {"items", 8}}, 44.5}, {{{"vec", 2}, {"items", 16}}, 1e-7}};
    full.candidates_tried = 27;
    full.candidates_failed = 3;
    full.stability = 0.9;
    full.nvrtc_version = "13.0";
    full.tuned_at = "2026-11-22T12:46:40Z";
    full.device = "NVIDIA H100 80GB HBM3";
    TuningEntry mixed = entry_of("softmax", {1, 128256}, 123456.789, {{"threads_per_row", 1024}, {"vec", 0}});
    mixed.key.dtype = "bf16->fp32";
    mixed.throughput_unit = "GFLOP/s";
    TuningEntry rank3 = entry_of("add", {2, 3, 5}, 0.0);
    TuningEntry rank8 = make_entry(make_key("add", {1, 2, 3, 4, 5, 6, 7, 8}), 0.0);
    rank8.nvrtc_version = "";  // optional: the file's metadata then says
    // Inserted out of key order: the file lists entries sorted by key.
    const std::vector<TuningEntry> entries = {
        mixed, full, full_entry(), rank3,
        make_entry(make_key("softmax", {1LL << 40}, "fp32"), 1e300, {{"block", 1LL << 20}}), rank8};
    for (const TuningEntry& e : entries) db.upsert(e);
    REQUIRE(db.entries().size() == 6);

    const std::string text = db.to_json();
    TuningDb back = TuningDb::parse(text, "roundtrip.json");
    CHECK(back.rejected().empty());
    REQUIRE(back.entries().size() == 6);
    CHECK(back == db);
    CHECK(back.meta() == db.meta());
    CHECK(back.to_json() == text);  // stable: a second round trip writes the same bytes
    for (size_t i = 1; i < back.entries().size(); ++i) CHECK(back.entries()[i - 1].key < back.entries()[i].key);
    for (const TuningEntry& e : entries) {
        const TuningEntry* found = back.find(e.key);
        REQUIRE(found != nullptr);
        CHECK(*found == e);
    }

    // Field by field as well, so that operator== cannot hide a field the format loses.
    const TuningEntry* full_back = back.find(full.key);
    REQUIRE(full_back != nullptr);
    CHECK(full_back->config == full.config);
    CHECK(full_back->median_us == full.median_us);  // doubles survive exactly
    CHECK(full_back->spread_us == 0.1);
    CHECK(full_back->throughput == 3158.25);
    REQUIRE(full_back->runners_up.size() == 2);
    CHECK(full_back->runners_up[0].config == full.runners_up[0].config);
    CHECK(full_back->runners_up[1].median_us == 1e-7);
    CHECK(full_back->candidates_tried == 27);
    CHECK(full_back->candidates_failed == 3);
    CHECK(full_back->stability == 0.9);
    CHECK(full_back->nvrtc_version == "13.0");
    CHECK(full_back->tuned_at == "2026-11-22T12:46:40Z");
    CHECK(full_back->device == "NVIDIA H100 80GB HBM3");
    const TuningEntry* mixed_back = back.find(mixed.key);
    REQUIRE(mixed_back != nullptr);
    CHECK(mixed_back->key.dtype == "bf16->fp32");
    CHECK(mixed_back->throughput_unit == "GFLOP/s");
    CHECK(mixed_back->config.at("vec") == 0);

    // The comparison is not vacuous: one changed field makes the databases differ.
    TuningDb changed = TuningDb::parse(text, "roundtrip.json");
    TuningEntry replaced = *changed.find(full.key);
    replaced.device = "another GPU";
    replaced.median_us = 1.0;  // faster, so it replaces the entry
    changed.upsert(replaced);
    CHECK_FALSE(changed == db);
    TuningDb other_meta = TuningDb::parse(text, "roundtrip.json");
    other_meta.meta().gpu_name = "other";
    CHECK_FALSE(other_meta == db);

    // The same entries inserted in another order serialize byte for byte the same.
    TuningDb reversed;
    reversed.meta() = db.meta();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) reversed.upsert(*it);
    CHECK(reversed.to_json() == text);

    // save into a new file then load: the same database.
    TempDir tmp;
    db.save(tmp.path() / "db.json");
    CHECK(TuningDb::load(tmp.path() / "db.json") == db);
}

TEST_CASE("tuning_db: optional fields left out of a file take their defaults", "[tuning_db]") {
    TuningDb db = TuningDb::load(fixture("valid_sm90a.json"));
    CHECK(db.rejected().empty());
    REQUIRE(db.entries().size() == 3);
    CHECK(db.meta().arch == "sm_90a");
    CHECK(db.meta().sources == std::vector<std::string>{"tileops-tune on NVIDIA H100 80GB HBM3"});

    const TuningEntry* rms = db.find(make_key("rmsnorm", {8192, 4096}, "bf16", "residual", "sm_90a", "aaaa"));
    REQUIRE(rms != nullptr);
    CHECK(rms->config == Config{{"items", 2}, {"threads_per_row", 256}, {"vec", 8}});
    CHECK(rms->median_us == 42.5);
    REQUIRE(rms->runners_up.size() == 1);
    CHECK(rms->runners_up[0].median_us == 44.0);
    CHECK(rms->candidates_tried == 27);
    CHECK(rms->stability == 0.9);

    const TuningEntry* softmax = db.find(make_key("softmax", {16384, 1024}, "fp32", "", "sm_90a", "bbbb"));
    REQUIRE(softmax != nullptr);
    CHECK(softmax->key.flags.empty());
    CHECK(softmax->nvrtc_version.empty());
    CHECK(softmax->runners_up.empty());
    CHECK(softmax->throughput_unit == "GB/s");

    CHECK(db.find(make_key("silu_mul", {1, 14336}, "bf16->fp32", "", "sm_90a", "cccc")) != nullptr);
    CHECK(db.find(make_key("silu_mul", {1, 14336}, "bf16->fp32", "", "sm_90", "cccc")) == nullptr);
    CHECK(TuningDb::parse(db.to_json(), "again") == db);

    // An entry with the required fields only.
    TuningDb minimal = TuningDb::parse(db_text(json::array({good_entry_json()})), "minimal.json");
    REQUIRE(minimal.entries().size() == 1);
    const TuningEntry& m = minimal.entries()[0];
    CHECK(m.spread_us == 0);
    CHECK(m.throughput_unit == "GB/s");
    CHECK(m.runners_up.empty());
    CHECK(m.nvrtc_version.empty());
}

TEST_CASE("tuning_db: upsert keeps the faster entry and refuses entries the format cannot hold", "[tuning_db]") {
    TuningDb db;
    TuningEntry slow = entry_of("rmsnorm", {1024, 4096}, 20.0, {{"vec", 4}});
    slow.device = "slow GPU";
    TuningEntry fast = slow;
    fast.median_us = 10.0;
    fast.config = {{"vec", 8}};
    fast.device = "fast GPU";

    db.upsert(slow);
    db.upsert(fast);  // faster: replaces
    REQUIRE(db.entries().size() == 1);
    CHECK(db.find(slow.key)->device == "fast GPU");
    db.upsert(slow);  // slower: ignored
    CHECK(db.find(slow.key)->device == "fast GPU");
    CHECK(db.find(slow.key)->config == Config{{"vec", 8}});

    // A different key is a different entry.
    TuningEntry other_hash = slow;
    other_hash.key.template_hash = "hash-2";
    db.upsert(other_hash);
    CHECK(db.entries().size() == 2);
    TuningKey missing = slow.key;
    missing.flags = "residual";
    CHECK(db.find(missing) == nullptr);

    // Equal times: the winner does not depend on the order of the upserts.
    TuningEntry tie_a = entry_of("softmax", {64, 64}, 5.0, {{"vec", 2}});
    TuningEntry tie_b = entry_of("softmax", {64, 64}, 5.0, {{"vec", 4}});
    TuningDb ab, ba;
    ab.upsert(tie_a);
    ab.upsert(tie_b);
    ba.upsert(tie_b);
    ba.upsert(tie_a);
    CHECK(ab == ba);
    CHECK(tileops::better_entry(tie_a, tie_b) != tileops::better_entry(tie_b, tie_a));
    CHECK_FALSE(tileops::better_entry(tie_a, tie_a));
    CHECK(tileops::better_entry(fast, slow));
    CHECK_FALSE(tileops::better_entry(slow, fast));
    // better_entry ranks a NaN time last instead of comparing it.
    TuningEntry nan_time = slow;
    nan_time.median_us = std::numeric_limits<double>::quiet_NaN();
    CHECK(tileops::better_entry(slow, nan_time));
    CHECK_FALSE(tileops::better_entry(nan_time, slow));

    // What parse would refuse, upsert refuses, naming the field, and the database is unchanged.
    CHECK(error_of([] { TuningDb().upsert(entry_of("layernorm", {8, 8}, 1.0)); }) == "(no exception)");
    struct Invalid {
        const char* what;
        std::function<void(TuningEntry&)> breaks;
        const char* names;
    };
    const std::vector<Invalid> invalid = {
        {"empty op", [](TuningEntry& e) { e.key.op.clear(); }, "op: empty"},
        {"op too long", [](TuningEntry& e) { e.key.op = std::string(5000, 'o'); }, "op: longer than"},
        {"rank 0", [](TuningEntry& e) { e.key.shape.clear(); }, "shape: rank 0"},
        {"rank 9", [](TuningEntry& e) { e.key.shape.assign(9, 2); }, "shape: rank 9"},
        {"zero dimension", [](TuningEntry& e) { e.key.shape = {0, 4096}; }, "shape[0]"},
        {"zero second dimension", [](TuningEntry& e) { e.key.shape = {64, 0}; }, "shape[1]"},
        {"negative dimension", [](TuningEntry& e) { e.key.shape = {-8, 4096}; }, "shape[0]"},
        {"NaN time", [](TuningEntry& e) { e.median_us = std::numeric_limits<double>::quiet_NaN(); }, "median_us"},
        {"infinite time", [](TuningEntry& e) { e.median_us = std::numeric_limits<double>::infinity(); }, "median_us"},
        {"negative time", [](TuningEntry& e) { e.median_us = -1; }, "median_us"},
        {"NaN spread", [](TuningEntry& e) { e.spread_us = std::nan(""); }, "spread_us"},
        {"negative spread", [](TuningEntry& e) { e.spread_us = -0.5; }, "spread_us"},
        {"empty config", [](TuningEntry& e) { e.config.clear(); }, "config: empty"},
        {"config value too large", [](TuningEntry& e) { e.config["vec"] = 1LL << 40; }, "config.vec"},
        {"stability above 1", [](TuningEntry& e) { e.stability = 1.5; }, "stability"},
        {"negative candidates", [](TuningEntry& e) { e.candidates_tried = -1; }, "candidates_tried"},
        {"NaN runner-up", [](TuningEntry& e) { e.runners_up = {{{{"vec", 2}}, std::nan("")}}; }, "runners_up[0].median_us"},
    };
    const TuningDb before = db;
    for (const Invalid& c : invalid) {
        CAPTURE(c.what);
        TuningEntry bad = entry_of("layernorm", {8, 8}, 1.0);
        c.breaks(bad);
        CHECK_THROWS_AS(db.upsert(bad), InvalidArgument);
        CHECK_THAT(error_of([&] { db.upsert(bad); }), ContainsSubstring(c.names));
    }
    CHECK(db == before);
}

TEST_CASE("tuning_db: entries filter by op, arch and dtype", "[tuning_db]") {
    TuningDb db = make_db({make_entry(make_key("rmsnorm", {1, 8}), 1), make_entry(make_key("rmsnorm", {1, 8}, "fp32"), 1),
                           make_entry(make_key("softmax", {1, 8}), 1),
                           make_entry(make_key("rmsnorm", {1, 8}, "bf16", "", "sm_80"), 1)},
                          "");
    CHECK(db.select({}).size() == 4);
    CHECK(db.select({"rmsnorm", "", ""}).size() == 3);
    CHECK(db.select({"rmsnorm", "sm_90a", ""}).size() == 2);
    CHECK(db.select({"rmsnorm", "sm_90a", "fp32"}).size() == 1);
    CHECK(db.select({"", "sm_80", ""}).size() == 1);
    CHECK(db.select({"", "sm_90", ""}).empty());
    for (const TuningEntry* e : db.select({"", "", "bf16"})) CHECK(e->key.dtype == "bf16");
}

// ---------------------------------------------------------------------------------------------
// Nearest shape

TEST_CASE("tuning_db: nearest picks the closest shape in log2 space within the distance", "[tuning_db]") {
    TuningDb db;
    db.upsert(entry_of("rmsnorm", {1024, 4096}, 1.0, {{"id", 1}}));
    db.upsert(entry_of("rmsnorm", {4096, 4096}, 1.0, {{"id", 2}}));
    db.upsert(entry_of("rmsnorm", {256, 1024}, 1.0, {{"id", 3}}));
    const TuningKey key = db.entries()[0].key;
    auto with_shape = [&](std::vector<long long> shape) {
        TuningKey k = key;
        k.shape = std::move(shape);
        return k;
    };

    auto nearest_id = [&](std::vector<long long> shape, double max_distance) -> std::optional<long long> {
        const TuningKey k = with_shape(std::move(shape));
        auto near = db.nearest(k, max_distance);
        if (!near) return std::nullopt;
        // The reported distance is the log2-space Euclidean distance.
        CHECK_THAT(near->second, WithinAbs(TuningDb::shape_distance(near->first->key.shape, k.shape), 1e-12));
        return near->first->config.at("id");
    };

    // Exact shape: distance 0.
    auto exact = db.nearest(db.entries()[0].key, 0.0);
    REQUIRE(exact);
    CHECK(exact->second == 0.0);

    // 3000 rows: log2(4096/3000) = 0.45 from id 2, log2(3000/1024) = 1.55 from id 1.
    const TuningKey k3000 = with_shape({3000, 4096});
    const double d3000 = std::log2(4096.0 / 3000.0);
    auto near = db.nearest(k3000, 1.0);
    REQUIRE(near);
    CHECK(near->first->config.at("id") == 2);
    CHECK_THAT(near->second, WithinAbs(d3000, 1e-12));

    // The cut-off is inclusive.
    CHECK_FALSE(db.nearest(k3000, d3000 - 1e-9).has_value());
    CHECK(db.nearest(k3000, d3000 + 1e-9).has_value());
    CHECK_FALSE(db.nearest(k3000, 0.0).has_value());

    // Both dimensions count: sqrt(1^2 + 1^2) from id 3 at 512x2048.
    const TuningKey k512 = with_shape({512, 2048});
    auto diag = db.nearest(k512, 2.0);
    REQUIRE(diag);
    CHECK(diag->first->config.at("id") == 3);
    CHECK_THAT(diag->second, WithinAbs(std::sqrt(2.0), 1e-12));
    CHECK_FALSE(db.nearest(k512, 1.41));  // the cut-off applies to the Euclidean distance
    CHECK(TuningDb::shape_distance({512, 2048}, {256, 1024}) == std::sqrt(2.0));

    // The maximum distance is inclusive; equal distances go to the smaller key (1024 < 4096 rows).
    CHECK(nearest_id({2048, 4096}, 1.0) == 1);
    CHECK(nearest_id({2048, 4096}, 0.999) == std::nullopt);
    CHECK(nearest_id({1 << 20, 1 << 20}, 1.0) == std::nullopt);
    CHECK(nearest_id({1 << 20, 1 << 20}, std::numeric_limits<double>::infinity()) == 2);
    CHECK(nearest_id({2048, 4096}, std::numeric_limits<double>::quiet_NaN()) == std::nullopt);

    // accept() refuses the nearest: the next one within reach comes, or none.
    const TuningKey k2048 = with_shape({2048, 4096});
    std::vector<long long> asked;
    auto second = db.nearest(k2048, 1.0, [&](const TuningEntry& e) {
        asked.push_back(e.config.at("id"));
        return e.config.at("id") != 1;
    });
    REQUIRE(second);
    CHECK(second->first->config.at("id") == 2);
    CHECK(asked == std::vector<long long>{1, 2});
    CHECK_FALSE(db.nearest(k2048, 1.0, [](const TuningEntry&) { return false; }));
    auto not_2 = [](const TuningEntry& e) { return e.config.at("id") != 2; };
    auto skipped = db.nearest(k3000, 2.0, not_2);
    REQUIRE(skipped.has_value());
    CHECK(skipped->first->config.at("id") == 1);
    CHECK_THAT(skipped->second, WithinAbs(std::log2(3000.0 / 1024.0), 1e-12));
    CHECK_FALSE(db.nearest(k3000, 1.0, not_2).has_value());

    // Every other part of the key must match exactly.
    const std::vector<std::pair<const char*, std::function<void(TuningKey&)>>> mismatches = {
        {"op", [](TuningKey& k) { k.op = "layernorm"; }},
        {"dtype", [](TuningKey& k) { k.dtype = "fp16"; }},
        {"flags", [](TuningKey& k) { k.flags = "residual"; }},
        {"arch", [](TuningKey& k) { k.arch = "sm_90"; }},  // sm_90 is not sm_90a
        {"template_hash", [](TuningKey& k) { k.template_hash = "hash-2"; }},
        {"rank", [](TuningKey& k) { k.shape = {1024, 4096, 1}; }},
        {"rank 1", [](TuningKey& k) { k.shape = {1024}; }},
    };
    for (const auto& [what, change] : mismatches) {
        CAPTURE(what);
        TuningKey k = key;
        change(k);
        CHECK_FALSE(db.nearest(k, 1e9));
        // ... and an entry with that key is found (so the mismatch, not the data, decides).
        TuningDb single;
        TuningEntry e = entry_of("rmsnorm", {1024, 4096}, 1.0);
        e.key = k;
        single.upsert(e);
        CHECK(single.nearest(k, 0.0));
        CHECK_FALSE(single.nearest(key, 1e9));
    }

    // Degenerate queries find nothing, however far the search reaches.
    CHECK_FALSE(db.nearest(with_shape({0, 4096}), INFINITY).has_value());  // a dimension < 1
    CHECK_FALSE(db.nearest(with_shape({-4096, 4096}), INFINITY).has_value());
    CHECK_FALSE(db.nearest(with_shape({}), INFINITY).has_value());
    CHECK(std::isinf(TuningDb::shape_distance({1, 2}, {1})));
    CHECK(std::isinf(TuningDb::shape_distance({1, 0}, {1, 1})));
}

// ---------------------------------------------------------------------------------------------
// Parsing: structural errors throw, local errors reject one entry

TEST_CASE("tuning_db: malformed JSON is a FileError naming the file, line and column", "[tuning_db]") {
    const std::string malformed = fixture("malformed.json").string();
    const std::string message = error_of([&] { TuningDb::load(malformed); });
    CHECK_THAT(message, ContainsSubstring(malformed + ":5:"));
    CHECK_THROWS_AS(TuningDb::load(malformed), FileError);
    // The error is on line 5 at the unexpected "dtype" (columns 45 to 51).
    const size_t at = message.find(malformed + ":5:") + malformed.size() + 3;
    const int column = std::stoi(message.substr(at));
    CHECK(column >= 45);
    CHECK(column <= 51);

    // The fixture has a trailing comma before "]" on line 7, column 3.
    const fs::path trailing_comma = fixture("syntax_trailing_comma.json");
    REQUIRE(fs::exists(trailing_comma));
    try {
        (void)TuningDb::load(trailing_comma);
        FAIL("load accepted a file with a JSON syntax error");
    } catch (const FileError& e) {
        CHECK_THAT(e.what(), ContainsSubstring(trailing_comma.string() + ":7:3:"));
        CHECK_THAT(e.what(), ContainsSubstring("invalid JSON"));
    }

    // In-memory text: the error position is counted in lines and columns of the text.
    CHECK_THAT(file_error_of("{\n  \"a\": 1,\n  \"b\": x\n}", "bad.json"), ContainsSubstring("bad.json:3:8: invalid JSON"));
    CHECK_THAT(file_error_of("{\n  \"format_version\": 1,\n  \"entries\": [}\n", "inline.json"),
               ContainsSubstring("inline.json:3:15:"));
    CHECK_THAT(file_error_of("{]", "first.json"), ContainsSubstring("first.json:1:2:"));
    CHECK_THAT(file_error_of("{\"format_version\": 1,\n", "cut.json"), ContainsSubstring("cut.json:2:"));
    CHECK_THAT(file_error_of("{\"format_version\": 1,", "cut.json"), ContainsSubstring("cut.json:1:22:"));
    CHECK_THAT(file_error_of("", "empty.json"), ContainsSubstring("empty.json:1:1:"));
    CHECK_THAT(file_error_of("{\"format_version\": 1,\n \"x\": NaN}", "nan.json"), ContainsSubstring("nan.json:2:"));
    // A number too large for a double has no position from the JSON parser; the message still
    // names where the literal is.
    CHECK_THAT(file_error_of("{\"format_version\": 1,\n \"x\": 1e400}", "big.json"),
               ContainsSubstring("big.json:2:7: invalid JSON"));
    CHECK_THROWS_AS(TuningDb::parse("{\"x\": -1e400}", "big.json"), FileError);

    // A file that cannot be read names its path.
    CHECK_THAT(error_of([] { TuningDb::load("/nonexistent/dir/db.json"); }), ContainsSubstring("/nonexistent/dir/db.json"));
    CHECK_THROWS_AS(TuningDb::load("/nonexistent/dir/db.json"), FileError);
}

TEST_CASE("tuning_db: FIFOs, devices, huge files and NUL bytes are refused, never waited on or read to the end",
          "[tuning_db]") {
    TempDir dir;
    const std::string valid = TuningDb().to_json();
    REQUIRE_NOTHROW(TuningDb::parse(valid, "valid.json"));

    // A FIFO with no writer: opening it to read would block every command.
    const fs::path fifo = dir.path() / "fifo.json";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THAT(error_of([&] { TuningDb::load(fifo); }), ContainsSubstring("fifo.json") && ContainsSubstring("not a regular file"));
    // A link to a device that never ends.
    const fs::path zero = dir.path() / "zero.json";
    fs::create_symlink("/dev/zero", zero);
    CHECK_THAT(error_of([&] { TuningDb::load(zero); }), ContainsSubstring("not a regular file"));
    // A (sparse) file past the size cap is refused before it is read.
    const fs::path huge = dir.path() / "huge.json";
    { std::ofstream(huge) << valid; }
    fs::resize_file(huge, tileops::util::kMaxReadBytes + 1);
    CHECK_THAT(error_of([&] { TuningDb::load(huge); }), ContainsSubstring("allowed"));
    // Merging into any of them is refused too, and leaves them as they were.
    CHECK_THROWS_AS(TuningDb().save(fifo), FileError);
    CHECK(fs::is_fifo(fifo));

    // Bytes after a NUL are not ignored: the file is refused, naming where.
    std::string with_nul = valid;
    with_nul += std::string(1, '\0') + "garbage{{{";
    CHECK_THAT(file_error_of(with_nul, "nul.json"), ContainsSubstring("nul.json:") && ContainsSubstring("NUL byte"));
    const fs::path nul_file = dir.path() / "nul.json";
    { std::ofstream(nul_file, std::ios::binary) << with_nul; }
    CHECK_THROWS_AS(TuningDb::load(nul_file), FileError);

    // read_file itself: the cap counts what is read, not what stat said.
    std::string why;
    CHECK_FALSE(tileops::util::read_file(nul_file, 4, &why).has_value());
    CHECK_THAT(why, ContainsSubstring("allowed"));
    CHECK(tileops::util::read_file(nul_file, with_nul.size()) == with_nul);
}

TEST_CASE("tuning_db: a file that is not a tuning database is a FileError naming it", "[tuning_db]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"[]", "expected a JSON object at the top, got array"},
        {"[{\"format_version\": 1}]", "expected a JSON object at the top, got array"},
        {"\"tuning\"", "expected a JSON object at the top, got string"},
        {"42", "expected a JSON object at the top, got integer"},
        {"null", "expected a JSON object at the top"},
        {"{}", "format_version"},
        {R"({"entries": []})", "format_version"},
        {R"({"format_version": "1", "entries": []})", "format_version"},
        {R"({"format_version": 1.0, "entries": []})", "format_version"},
        {R"({"format_version": null})", "format_version"},
        {R"({"format_version": 2, "entries": []})", "format_version 2 is not supported"},
        {R"({"format_version": 0})", "format_version 0 is not supported"},
        {R"({"format_version": -1})", "format_version -1 is not supported"},
        {R"({"format_version": 18446744073709551615})", "not supported"},
        {R"({"format_version": -9223372036854775808})", "not supported"},
        {R"({"format_version": 1, "metadata": []})", "metadata: expected object, got array"},
        {R"({"format_version": 1, "metadata": {"arch": 90}})", "metadata.arch: expected string, got integer"},
        {R"({"format_version": 1, "metadata": {"sources": "one"}})", "metadata.sources"},
        {R"({"format_version": 1, "metadata": {"sources": [1]}})", "metadata.sources"},
        {R"({"format_version": 1, "entries": {}})", "entries: expected a list, got object"},
        {R"({"format_version": 1, "entries": "none"})", "entries: expected a list, got string"},
    };
    for (const auto& [text, reason] : cases) {
        CAPTURE(text);
        const std::string message = error_of([&] { TuningDb::parse(text, "not-a-db.json"); });
        CHECK_THAT(message, ContainsSubstring("not-a-db.json"));
        CHECK_THAT(message, ContainsSubstring(reason));
        CHECK_THROWS_AS(TuningDb::parse(text, "not-a-db.json"), FileError);
    }
    // Through load(), the message names the path.
    TempDir dir;
    write_text(dir.path() / "wrong-version.json", R"({"format_version": 7, "entries": []})");
    try {
        (void)TuningDb::load(dir.path() / "wrong-version.json");
        FAIL("format_version 7 was accepted");
    } catch (const FileError& e) {
        CHECK_THAT(e.what(), ContainsSubstring((dir.path() / "wrong-version.json").string()));
        CHECK_THAT(e.what(), ContainsSubstring("format_version 7"));
    }
    // The smallest valid database.
    TuningDb empty = TuningDb::parse("{\"format_version\": 1}", "min.json");
    CHECK(empty.entries().empty());
    CHECK(empty.rejected().empty());
}

TEST_CASE("tuning_db: malformed entries are rejected by index and field with a warning, the rest loads",
          "[tuning_db]") {
    struct Fixture {
        const char* file;
        std::vector<TuningKey> loaded;
        std::vector<std::pair<size_t, std::string>> rejected;
    };
    const std::vector<Fixture> fixtures = {
        {"bad_entries.json",
         {make_key("rmsnorm", {4096, 4096}, "bf16", "", "sm_90a", "aaaa"),
          make_key("layernorm", {4096, 4096}, "bf16", "", "sm_90a", "dddd")},
         {
             {1, "entries[1].config.vec: expected integer, got string"},
             {2, "entries[2].shape: rank 9 is not in [1, 8]"},
             {3, "entries[3].shape[1]: -4096 is out of range"},
             {4, "entries[4].median_us: missing"},
             {5, "entries[5]: expected object, got string"},
             {6, "entries[6].median_us: -3 is not a finite number >= 0"},
             {7, "entries[7].arch: expected string, got integer"},
             {8, "entries[8].shape[1]: expected integer, got float"},
             {9, "entries[9].config.vec: 9223372036854775808 is out of range"},
         }},
        {"entry_field_errors.json",
         {make_key("rmsnorm", {64, 4096}, "bf16", "", "sm_90a", "h1"),
          make_key("softmax", {128, 1024}, "fp32", "", "sm_90a", "h2")},
         {
             {1, "entries[1].config.vec: expected integer, got string"},
             {2, "entries[2].shape[1]: -4096 is out of range"},
             {3, "entries[3].median_us: expected number, got string"},
             {4, "entries[4].op: missing"},
             {6, "entries[6].dtype: expected string, got integer"},
             {7, "entries[7].runners_up[0].median_us: missing"},
             {8, "entries[8].stability"},
             {9, "entries[9].template_hash: expected string, got null"},
             {10, "entries[10].shape: expected array, got string"},
         }},
    };
    for (const Fixture& f : fixtures) {
        CAPTURE(f.file);
        LogCapture log(spdlog::level::warn);
        const std::string path = fixture(f.file).string();
        TuningDb db = TuningDb::load(path);

        REQUIRE(db.entries().size() == f.loaded.size());
        for (const TuningKey& key : f.loaded) CHECK(db.find(key) != nullptr);
        CHECK(db.meta().arch == "sm_90a");
        REQUIRE(db.rejected().size() == f.rejected.size());
        for (size_t i = 0; i < f.rejected.size(); ++i) {
            const tileops::RejectedEntry& r = db.rejected()[i];
            INFO(r.reason);
            CHECK(r.source == path);
            CHECK(r.index == f.rejected[i].first);
            CHECK_THAT(r.reason, ContainsSubstring(f.rejected[i].second));
            // One warning per rejected entry, naming the file and the entry.
            CHECK(log.lines_with({"warn", path, f.rejected[i].second}) == 1);
        }
        CHECK(log.count("skipping tuning entry") == f.rejected.size());
        CHECK(log.count(path) == f.rejected.size());
        // As the brief puts it: "<file>: entries[3].config.vec: expected integer, got string".
        CHECK_THAT(log.text(), ContainsSubstring(path + ": entries[1].config.vec: expected integer, got string"));
    }
}

TEST_CASE("tuning_db: a file of many malformed entries lists and warns about the first 100, counts them all",
          "[tuning_db]") {
    // 200000 entries of two bytes each: listing and logging every one took hundreds of bytes of
    // memory and a log line per byte of the file.
    std::string text = R"({"format_version": 1, "metadata": {"arch": "sm_90a"}, "entries": [)";
    for (int i = 0; i < 200000; ++i) text += i == 0 ? "1" : ",1";
    text += "]}";
    LogCapture log(spdlog::level::warn);
    const TuningDb db = TuningDb::parse(text, "many.json");
    CHECK(db.entries().empty());
    CHECK(db.rejected_count() == 200000);
    REQUIRE(db.rejected().size() == TuningDb::kMaxRejectedListed);
    CHECK(db.rejected().back().index == TuningDb::kMaxRejectedListed - 1);
    CHECK(log.count("skipping tuning entry") == TuningDb::kMaxRejectedListed);
    CHECK(log.lines_with({"warn", "199900 more malformed tuning entries of many.json"}) == 1);
}

TEST_CASE("tuning_db: a file of more JSON values than any database holds is refused before it is parsed",
          "[tuning_db]") {
    // "[1,1,1,..." within the file-size bound parsed into a tree about 40 times its size.
    std::string text = R"({"format_version": 1, "entries": [)";
    text.reserve(2 * tileops::util::kMaxJsonValues + 64);
    for (size_t i = 0; i < tileops::util::kMaxJsonValues; ++i) text += "1,";
    text += "1]}";
    CHECK_THROWS_WITH(TuningDb::parse(text, "tiny_values.json"),
                      ContainsSubstring("tiny_values.json: more than 16777216 JSON values"));
}

TEST_CASE("tuning_db: each malformed field of an entry is named; the next entry still loads", "[tuning_db]") {
    struct Case {
        const char* what;
        std::function<void(json&)> breaks;
        const char* reason;
    };
    const std::string long_text(10000, 'x');
    const std::vector<Case> cases = {
        {"op not a string", [](json& e) { e["op"] = 5; }, "entries[0].op: expected string, got integer"},
        {"op empty", [](json& e) { e["op"] = ""; }, "entries[0].op: empty"},
        {"op missing", [](json& e) { e.erase("op"); }, "entries[0].op: missing"},
        {"shape missing", [](json& e) { e.erase("shape"); }, "entries[0].shape: missing"},
        {"shape rank 0", [](json& e) { e["shape"] = json::array(); }, "entries[0].shape: rank 0"},
        {"shape rank 9", [](json& e) { e["shape"] = {1, 2, 3, 4, 5, 6, 7, 8, 9}; }, "entries[0].shape: rank 9"},
        {"shape zero", [](json& e) { e["shape"] = {0, 4096}; }, "entries[0].shape[0]: 0 is out of range"},
        {"shape negative", [](json& e) { e["shape"] = {64, -1}; }, "entries[0].shape[1]: -1 is out of range"},
        {"shape float", [](json& e) { e["shape"] = {64, 4096.5}; }, "entries[0].shape[1]: expected integer, got float"},
        {"shape bool", [](json& e) { e["shape"] = {true, 4096}; }, "entries[0].shape[0]: expected integer, got boolean"},
        {"shape too large", [](json& e) { e["shape"] = {64, (1LL << 40) + 1}; }, "entries[0].shape[1]"},
        {"dtype missing", [](json& e) { e.erase("dtype"); }, "entries[0].dtype: missing"},
        {"flags not a string", [](json& e) { e["flags"] = json::array(); }, "entries[0].flags: expected string, got array"},
        {"arch missing", [](json& e) { e.erase("arch"); }, "entries[0].arch: missing"},
        {"template_hash number", [](json& e) { e["template_hash"] = 1.5; }, "entries[0].template_hash: expected string, got float"},
        {"config missing", [](json& e) { e.erase("config"); }, "entries[0].config: missing"},
        {"config array", [](json& e) { e["config"] = {1, 2}; }, "entries[0].config: expected object, got array"},
        {"config empty", [](json& e) { e["config"] = json::object(); }, "entries[0].config: empty config"},
        {"config value string", [](json& e) { e["config"]["vec"] = "8"; }, "entries[0].config.vec: expected integer, got string"},
        {"config value float", [](json& e) { e["config"]["vec"] = 8.5; }, "entries[0].config.vec: expected integer, got float"},
        {"config value null", [](json& e) { e["config"]["vec"] = nullptr; }, "entries[0].config.vec: expected integer, got null"},
        {"config value huge", [](json& e) { e["config"]["vec"] = 1LL << 40; }, "entries[0].config.vec"},
        {"median missing", [](json& e) { e.erase("median_us"); }, "entries[0].median_us: missing"},
        {"median string", [](json& e) { e["median_us"] = "2.5"; }, "entries[0].median_us: expected number, got string"},
        {"median negative", [](json& e) { e["median_us"] = -2.5; }, "entries[0].median_us"},
        {"spread string", [](json& e) { e["spread_us"] = "wide"; }, "entries[0].spread_us: expected number, got string"},
        {"throughput object", [](json& e) { e["throughput"] = json::object(); }, "entries[0].throughput: expected number, got object"},
        {"throughput_unit null", [](json& e) { e["throughput_unit"] = nullptr; }, "entries[0].throughput_unit"},
        {"runners_up object", [](json& e) { e["runners_up"] = json::object(); }, "entries[0].runners_up: expected array, got object"},
        {"runner-up not an object", [](json& e) { e["runners_up"] = {7}; }, "entries[0].runners_up[0]: expected object, got integer"},
        {"runner-up config", [](json& e) { e["runners_up"] = {{{"config", {{"vec", "x"}}}, {"median_us", 1.0}}}; },
         "entries[0].runners_up[0].config.vec: expected integer, got string"},
        {"candidates_tried negative", [](json& e) { e["candidates_tried"] = -1; }, "entries[0].candidates_tried"},
        {"candidates_failed float", [](json& e) { e["candidates_failed"] = 1.5; }, "entries[0].candidates_failed: expected integer, got float"},
        {"stability above 1", [](json& e) { e["stability"] = 1.5; }, "entries[0].stability"},
        {"nvrtc_version number", [](json& e) { e["nvrtc_version"] = 13; }, "entries[0].nvrtc_version: expected string, got integer"},
        {"device too long", [long_text](json& e) { e["device"] = long_text; }, "entries[0].device: longer than"},
        // Strings reach the terminal (list, show) and logs: an escape sequence would clear the
        // screen or set the window title, a NUL cut the message.
        {"device with an escape", [](json& e) { e["device"] = "H100\x1b[2J"; },
         "entries[0].device: holds control character 0x1b"},
        {"flags with a NUL", [](json& e) { e["flags"] = std::string("page16\0x", 8); }, "entries[0].flags: holds control character 0x00"},
        {"tuned_at with a DEL", [](json& e) { e["tuned_at"] = "2026\x7f"; }, "entries[0].tuned_at: holds control character 0x7f"},
        {"tunable name with a bell", [](json& e) { e["config"]["v\aec"] = 8; }, "a tunable name: holds control character 0x07"},
        {"entry is a string", [](json& e) { e = "not an entry"; }, "entries[0]: expected object, got string"},
        {"entry is null", [](json& e) { e = nullptr; }, "entries[0]: expected object, got null"},
    };
    LogCapture log(spdlog::level::warn);  // keeps the expected warnings out of the test output
    for (const Case& c : cases) {
        CAPTURE(c.what);
        json broken = good_entry_json(64);
        c.breaks(broken);
        TuningDb db = TuningDb::parse(db_text(json::array({broken, good_entry_json(128)})), "fields.json");
        REQUIRE(db.rejected().size() == 1);
        CHECK(db.rejected()[0].index == 0);
        CHECK(db.rejected()[0].source == "fields.json");
        CHECK_THAT(db.rejected()[0].reason, ContainsSubstring(c.reason));
        REQUIRE(db.entries().size() == 1);
        CHECK(db.entries()[0].key.shape == std::vector<long long>{128, 4096});
    }
}

TEST_CASE("tuning_db: hostile input never crashes and fails only with FileError", "[tuning_db]") {
    LogCapture log(spdlog::level::warn);  // thousands of warnings, kept off the terminal

    SECTION("numbers out of every range") {
        // Integers beyond 64 bits become doubles: not integers any more.
        CHECK_THAT(rejected_reason(entry_with("shape", "[64, 99999999999999999999999999]")),
                   ContainsSubstring("entries[0].shape[1]: expected integer, got float"));
        CHECK_THAT(rejected_reason(entry_with("shape", "[64, 18446744073709551615]")),
                   ContainsSubstring("entries[0].shape[1]: 18446744073709551615 is out of range"));
        CHECK_THAT(rejected_reason(entry_with("shape", "[64, 9223372036854775807]")), ContainsSubstring("entries[0].shape[1]"));
        CHECK_THAT(rejected_reason(entry_with("config", R"({"vec": -9223372036854775808})")),
                   ContainsSubstring("entries[0].config.vec"));
        CHECK_THAT(rejected_reason(entry_with("config", R"({"vec": 18446744073709551615})")),
                   ContainsSubstring("entries[0].config.vec"));
        // Tunables are counts and sizes in [0, 2^20], as the ops read them.
        CHECK_THAT(rejected_reason(entry_with("config", R"({"vec": -8})")), ContainsSubstring("entries[0].config.vec"));
        CHECK_THAT(rejected_reason(entry_with("config", R"({"vec": 1048577})")), ContainsSubstring("entries[0].config.vec"));
        CHECK_THAT(rejected_reason(entry_with("candidates_tried", "9223372036854775807")),
                   ContainsSubstring("entries[0].candidates_tried"));
        CHECK_THAT(rejected_reason(entry_with("median_us", "-1e308")), ContainsSubstring("entries[0].median_us"));
        // 1e308 is a finite time: it loads and survives a round trip.
        TuningDb big = TuningDb::parse(entry_with("median_us", "1e308"), "hostile.json");
        REQUIRE(big.entries().size() == 2);
        CHECK(big.entries()[0].median_us == 1e308);
        CHECK(TuningDb::parse(big.to_json(), "again.json") == big);
        CHECK(survives(entry_with("spread_us", "4.9e-324")));
        CHECK(survives(entry_with("median_us", "-0.0")));
        // Beyond a double: the whole file is refused, naming where.
        CHECK_THAT(file_error_of(entry_with("median_us", "1e400"), "hostile.json"), ContainsSubstring("1e400"));
        CHECK_THAT(file_error_of(entry_with("median_us", "-1e400"), "hostile.json"), ContainsSubstring("hostile.json:1:"));
    }

    SECTION("NaN and infinity, spelled every way") {
        for (const char* spelled : {"\"NaN\"", "\"nan\"", "\"Infinity\"", "\"-inf\"", "\"1e400\""})
            CHECK_THAT(rejected_reason(entry_with("median_us", spelled)),
                       ContainsSubstring("entries[0].median_us: expected number, got string"));
        for (const char* bare : {"NaN", "nan", "Infinity", "-Infinity", "inf", "1e", "--1", "0x10", "01"})
            CHECK_FALSE(survives(entry_with("median_us", bare)));
    }

    SECTION("very deep nesting") {
        const int depth = 100000;
        const std::string deep = std::string(depth, '[') + std::string(depth, ']');
        const std::string deep_objects = [&] {
            std::string s;
            for (int i = 0; i < depth; ++i) s += "{\"a\":";
            s += "1";
            s += std::string(depth, '}');
            return s;
        }();
        CHECK_THAT(rejected_reason(entry_with("config", "{\"vec\": " + deep + "}")),
                   ContainsSubstring("entries[0].config.vec: expected integer, got array"));
        CHECK_THAT(rejected_reason(entry_with("shape", deep)), ContainsSubstring("entries[0].shape"));
        CHECK_THAT(rejected_reason(entry_with("median_us", deep_objects)), ContainsSubstring("entries[0].median_us"));
        // Deep nesting in a field the format does not know is ignored.
        json e = good_entry_json();
        std::string text = e.dump();
        text.insert(1, "\"extra\": " + deep + ",");
        TuningDb db = TuningDb::parse(R"({"format_version": 1, "entries": [)" + text + "]}", "hostile.json");
        CHECK(db.entries().size() == 1);
        CHECK(db.rejected().empty());
        CHECK(survives(R"({"format_version": 1, "metadata": {"extra": )" + deep_objects + "}}"));
    }

    SECTION("ranks and sizes far beyond what the format holds") {
        std::string rank100 = "[";
        for (int d = 0; d < 100; ++d) rank100 += (d ? ",2" : "2");
        rank100 += "]";
        CHECK_THAT(rejected_reason(entry_with("shape", rank100)), ContainsSubstring("entries[0].shape: rank 100"));
        const std::string long_string = "\"" + std::string(10000, 'x') + "\"";
        CHECK_THAT(rejected_reason(entry_with("op", long_string)), ContainsSubstring("entries[0].op: longer than"));
        CHECK_THAT(rejected_reason(entry_with("template_hash", long_string)), ContainsSubstring("entries[0].template_hash"));
        CHECK_THAT(rejected_reason(entry_with("config", "{" + long_string + ": 8}")),
                   ContainsSubstring("entries[0].config: a tunable name is longer than"));
        std::string many_runners = "[";
        for (int r = 0; r < 1000; ++r) many_runners += std::string(r ? "," : "") + R"({"config": {"vec": 4}, "median_us": 1})";
        many_runners += "]";
        CHECK_THAT(rejected_reason(entry_with("runners_up", many_runners)), ContainsSubstring("entries[0].runners_up"));
        // A long metadata field is a broken file, not a crash.
        CHECK_FALSE(survives(R"({"format_version": 1, "metadata": {"gpu_name": )" + long_string + "}}"));
        // A long unknown key, and many entries, load.
        CHECK(survives(R"({"format_version": 1, )" + long_string + R"(: 1, "entries": []})"));
        json entries = json::array();
        for (int i = 1; i <= 2000; ++i) entries.push_back(good_entry_json(i));
        TuningDb many = TuningDb::parse(db_text(entries), "many.json");
        CHECK(many.entries().size() == 2000);
    }

    SECTION("odd bytes") {
        CHECK(survives(entry_with("op", R"("rms\u0000norm\n\t\"\\")")));
        CHECK(survives(entry_with("device", R"("\ud83d\ude80 caf\u00e9")")));
        CHECK_FALSE(survives(entry_with("device", "\"\xff\xfe\"")));           // invalid UTF-8
        CHECK_FALSE(survives(entry_with("device", "\"\\ud800\"")));              // lone surrogate
        CHECK_FALSE(survives(entry_with("device", std::string("\"a") + '\x01' + "b\"")));  // raw control character
        CHECK_FALSE(survives("\xef\xbb"));
        CHECK(survives("\xef\xbb\xbf{\"format_version\": 1}"));  // a byte order mark is allowed
    }

    SECTION("values that reject only their own entry") {
        // Each of these rejects the entry it is in; the file and the neighbour entry load.
        const std::vector<std::pair<std::string, std::string>> rejected_fields = {
            {"shape", "[64, -9223372036854775808]"},
            {"shape", "[64, 1e300]"},
            {"shape", "[64, \"64\"]"},
            {"shape", "[0]"},
            {"shape", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]"},
            {"shape", "\"64x64\""},
            {"median_us", "null"},
            {"median_us", "-0.5"},
            {"median_us", "1e308, \"spread_us\": -1e308"},  // a valid time, a spread that is not
            {"config", "{\"vec\": 1.5}"},
            {"config", "{\"vec\": true}"},
            {"config", "{\"vec\": 4294967296}"},
            {"config", "[8]"},
            {"candidates_tried", "99999999999"},
            {"runners_up", "[1]"},
            {"op", "\"" + std::string(1 << 20, 'x') + "\""},
            {"dtype", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"},
        };
        for (const auto& [field, value] : rejected_fields) {
            INFO(field << ": " << value.substr(0, 120));
            std::optional<TuningDb> db;
            CHECK_NOTHROW(db.emplace(TuningDb::parse(entry_with(field, value), "hostile.json")));
            if (!db) continue;
            CHECK(db->entries().size() == 1);  // the neighbour
            REQUIRE(db->rejected().size() == 1);
            CHECK(db->rejected()[0].index == 0);
            CHECK_THAT(db->rejected()[0].reason, ContainsSubstring("entries[0]"));
        }
        // Extreme but valid values load.
        TuningDb ok = TuningDb::parse(
            "{\"format_version\": 1, \"entries\": [{\"op\": \"rmsnorm\", \"shape\": [1099511627776, 1], \"dtype\": "
            "\"bf16\", \"arch\": \"sm_90a\", \"template_hash\": \"h\", \"config\": {\"vec\": 8}, \"median_us\": 1e300}]}",
            "ok.json");
        CHECK(ok.entries().size() == 1);
        CHECK(ok.rejected().empty());
    }

    SECTION("structural damage is a FileError, never anything else") {
        const std::vector<std::string> structural = {
            std::string(200000, '['),                              // never closed
            std::string(200000, '[') + std::string(200000, ']'),  // top level is not an object
            std::string(200000, '{'),
            "{\"format_version\": 1, \"metadata\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
            "{\"format_version\": 1, \"entries\": [" + std::string(1 << 16, '"'),
            "{\"format_version\": 1, \"median_us\": Infinity}",
            "{\"format_version\": 1, \"median_us\": 2e308}",
            std::string("{\"format_version\": 1\0, \"entries\": []}", 35),  // a NUL byte
            "\xff\xfe\x00\x01",
            "{\"format_version\": 1, \"entries\": [], \"x\": \"\xc3\x28\"}",
        };
        for (const std::string& text : structural) {
            INFO(text.substr(0, 80));
            CHECK_THROWS_AS(TuningDb::parse(text, "structural.json"), FileError);
        }
    }

    SECTION("every truncation and thousands of random corruptions of a valid file") {
        std::string valid = read_text(fixture("entry_field_errors.json"));
        while (!valid.empty() && std::isspace(static_cast<unsigned char>(valid.back()))) valid.pop_back();
        REQUIRE(valid.size() > 100);
        size_t loaded = 0;
        for (size_t n = 0; n < valid.size(); ++n) loaded += survives(std::string_view(valid).substr(0, n));
        CHECK(loaded == 0);  // every proper prefix is incomplete JSON
        std::mt19937_64 rng(20261122);
        const std::string interesting = "{}[],:\"\\0123456789-+.eE ntfux";
        size_t loaded_mutants = 0;
        for (int round = 0; round < 3000; ++round) {
            std::string text = valid;
            const int edits = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < edits; ++k) {
                const size_t at = rng() % text.size();
                const char c = (rng() % 4 == 0) ? static_cast<char>(rng() % 256) : interesting[rng() % interesting.size()];
                switch (rng() % 3) {
                    case 0: text[at] = c; break;
                    case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
                    default: text.erase(at, 1 + rng() % 8); break;
                }
                if (text.empty()) text = "{";
            }
            loaded_mutants += survives(text);
        }
        CHECK(loaded_mutants > 0);  // some corruptions only break one entry

        // Another file, other edits: parse succeeds (possibly rejecting entries) or throws
        // FileError; whatever loads can be used and written again.
        const std::string valid_sm90a = read_text(fixture("valid_sm90a.json"));
        std::mt19937 random(12345);
        const std::string alphabet = "{}[],:\"\\0123456789-+.eE tfnul\xff";
        size_t parsed = 0, failed = 0;
        for (int round = 0; round < 1500; ++round) {
            std::string text = valid_sm90a;
            const int edits = 1 + static_cast<int>(random() % 4);
            for (int k = 0; k < edits; ++k) {
                const size_t at = random() % text.size();
                switch (random() % 4) {
                    case 0: text[at] = alphabet[random() % alphabet.size()]; break;
                    case 1: text.erase(at, 1 + random() % 8); break;
                    case 2: text.insert(at, 1, alphabet[random() % alphabet.size()]); break;
                    default: text.resize(at); break;
                }
                if (text.empty()) text = "{";
            }
            try {
                TuningDb db = TuningDb::parse(text, "fuzz.json");
                ++parsed;
                CHECK(db.entries().size() + db.rejected().size() <= 3);
                CHECK(TuningDb::parse(db.to_json(), "fuzz2.json") == db);
                for (const TuningEntry& e : db.entries()) (void)db.nearest(e.key, 1.0);
            } catch (const FileError&) {
                ++failed;
            } catch (const std::exception& e) {
                FAIL("round " << round << ": not a FileError: " << e.what());
            }
        }
        CHECK(parsed > 0);
        CHECK(failed > 0);
    }
}

TEST_CASE("tuning_db: a key repeated in one object is refused, not silently dropped", "[tuning_db]") {
    const std::string entries_twice = R"({"format_version": 1, "entries": [], "entries": []})";
    CHECK_THROWS_AS(TuningDb::parse(entries_twice, "joined.json"), tileops::FileError);
    CHECK_THAT(error_of([&] { TuningDb::parse(entries_twice, "joined.json"); }),
               ContainsSubstring("joined.json: the key \"entries\" appears twice"));
    json db = json::parse(make_db({make_entry(make_key("add", {8}), 1.0, {{"vec", 4}})}).to_json());
    std::string text = db.dump();
    const std::string config = R"("config":{"vec":4})";
    REQUIRE(text.find(config) != std::string::npos);
    text.replace(text.find(config), config.size(), R"("config":{"vec":4,"vec":8})");
    // Inside an entry: that entry is rejected, the file loads.
    const TuningDb loaded = TuningDb::parse(text, "db.json");
    CHECK(loaded.entries().empty());
    REQUIRE(loaded.rejected().size() == 1);
    CHECK_THAT(loaded.rejected()[0].reason, ContainsSubstring("entries[0]: the key \"vec\" appears twice"));
    CHECK_THAT(error_of([&] { TuningDb::parse(R"({"format_version": 1, "metadata": {"arch": "sm_80", "arch": "sm_90a"}})",
                                              "meta.json"); }),
               ContainsSubstring("the key \"arch\" appears twice"));
    // The same key in different objects is fine.
    CHECK_NOTHROW(TuningDb::parse(json::parse(make_db({make_entry(make_key("add", {8}), 1.0),
                                                       make_entry(make_key("add", {16}), 1.0)})
                                                  .to_json())
                                      .dump(),
                                  "two.json"));
}

TEST_CASE("tuning_db: the validator rejects entries with a reason and a warning, the rest loads", "[tuning_db]") {
    LogCapture log;
    // From a file: a reason or an exception rejects the entry.
    const fs::path valid_file = fixture("valid_sm90a.json");
    size_t calls = 0;
    TuningDb db = TuningDb::load(valid_file, [&](const TuningEntry& e) -> std::optional<std::string> {
        ++calls;
        if (e.key.op == "softmax") return "threads_per_row 128 cannot run here";
        if (e.key.op == "silu_mul") throw std::runtime_error("validator blew up");
        return std::nullopt;
    });
    CHECK(calls == 3);
    REQUIRE(db.entries().size() == 1);
    CHECK(db.entries()[0].key.op == "rmsnorm");
    REQUIRE(db.rejected().size() == 2);
    CHECK(db.rejected()[0].index == 1);
    CHECK_THAT(db.rejected()[0].reason, ContainsSubstring("entries[1] (softmax 16384x1024 fp32 sm_90a)"));
    CHECK_THAT(db.rejected()[0].reason, ContainsSubstring("threads_per_row 128 cannot run here"));
    CHECK(db.rejected()[1].index == 2);
    CHECK_THAT(db.rejected()[1].reason, ContainsSubstring("validator blew up"));
    CHECK(log.lines_with({"warn", valid_file.string(), "entries[1]", "cannot run here"}) == 1);
    CHECK(log.lines_with({"warn", valid_file.string(), "entries[2]", "validator blew up"}) == 1);

    // In memory: a malformed entry never reaches the validator.
    json entries = json::array();
    for (long long rows : {64, 128, 256}) {
        json e = good_entry_json(rows);
        e["config"]["vec"] = rows == 128 ? 16 : 8;
        entries.push_back(e);
    }
    entries.push_back("malformed");
    int validated = 0;
    tileops::EntryValidator validator = [&](const TuningEntry& e) -> std::optional<std::string> {
        ++validated;
        if (e.config.at("vec") > 8) return "vec 16 is wider than 16 bytes";
        return std::nullopt;
    };
    TuningDb parsed = TuningDb::parse(db_text(entries), "validated.json", validator);
    CHECK(validated == 3);
    REQUIRE(parsed.entries().size() == 2);
    CHECK(parsed.entries()[0].key.shape[0] == 64);
    CHECK(parsed.entries()[1].key.shape[0] == 256);
    REQUIRE(parsed.rejected().size() == 2);
    CHECK(parsed.rejected()[0].index == 1);
    CHECK_THAT(parsed.rejected()[0].reason, ContainsSubstring("entries[1]"));
    CHECK_THAT(parsed.rejected()[0].reason, ContainsSubstring("rmsnorm 128x4096 bf16 sm_90a"));
    CHECK_THAT(parsed.rejected()[0].reason, ContainsSubstring("vec 16 is wider than 16 bytes"));
    CHECK(parsed.rejected()[1].index == 3);
    CHECK_THAT(log.text(), ContainsSubstring("validated.json"));
    CHECK_THAT(log.text(), ContainsSubstring("vec 16 is wider"));

    // A validator that throws rejects the entry with the exception's message.
    tileops::EntryValidator throwing = [](const TuningEntry& e) -> std::optional<std::string> {
        if (e.key.shape[0] == 256) throw std::runtime_error("cannot check 256 rows");
        return std::nullopt;
    };
    TuningDb partly = TuningDb::parse(db_text(entries), "validated.json", throwing);
    CHECK(partly.entries().size() == 2);
    REQUIRE(partly.rejected().size() == 2);
    CHECK(partly.rejected()[0].index == 2);
    CHECK_THAT(partly.rejected()[0].reason, ContainsSubstring("validator failed: cannot check 256 rows"));

    // load() passes the validator on; entries keep their index among malformed ones.
    TuningDb from_file = TuningDb::load(fixture("entry_field_errors.json"),
                                        [](const TuningEntry& e) -> std::optional<std::string> {
                                            if (e.key.op == "softmax") return "no softmax here";
                                            return std::nullopt;
                                        });
    REQUIRE(from_file.entries().size() == 1);
    CHECK(from_file.entries()[0].key.op == "rmsnorm");
    bool named = false;
    for (const auto& r : from_file.rejected())
        if (r.index == 5) named = r.reason.find("no softmax here") != std::string::npos;
    CHECK(named);
}

// ---------------------------------------------------------------------------------------------
// Merge

namespace {

// Random databases over a small pool of keys, with times from a small set so that ties happen.
TuningDb random_db(std::mt19937& random, const std::string& source) {
    const std::vector<std::string> ops = {"rmsnorm", "softmax"};
    const std::vector<std::vector<long long>> shapes = {{1024, 4096}, {4096, 4096}, {8192}};
    const std::vector<std::string> devices = {"GPU A", "GPU B", "GPU C"};
    TuningDb db;
    db.meta().arch = "sm_90a";
    db.meta().sources = {source};
    db.meta().created_at = "2026-11-2" + std::to_string(random() % 10) + "T00:00:00Z";
    const int n = static_cast<int>(random() % 8);
    for (int i = 0; i < n; ++i) {
        TuningEntry e = make_entry(make_key(ops[random() % ops.size()], shapes[random() % shapes.size()]),
                                   1.0 + static_cast<double>(random() % 3), {{"vec", 1LL << (random() % 4)}},
                                   devices[random() % devices.size()]);
        e.tuned_at = "2026-11-22T12:00:0" + std::to_string(random() % 10) + "Z";
        db.upsert(e);
    }
    return db;
}

}  // namespace

TEST_CASE("tuning_db: merge is commutative, idempotent and keeps the faster entry with its provenance",
          "[tuning_db]") {
    std::mt19937 random(7);
    for (int round = 0; round < 100; ++round) {
        const TuningDb a = random_db(random, "a.json");
        const TuningDb b = random_db(random, "b.json");
        const TuningDb ab = TuningDb::merge(a, b);
        const TuningDb ba = TuningDb::merge(b, a);
        INFO("round " << round);
        CHECK(ab == ba);
        CHECK(ab.to_json() == ba.to_json());
        CHECK(TuningDb::merge(a, a) == a);
        CHECK(TuningDb::merge(ab, ab) == ab);
        CHECK(TuningDb::merge(ab, a) == ab);  // absorbing what is already in
        CHECK(ab.meta().sources == std::vector<std::string>{"a.json", "b.json"});

        std::set<TuningKey> keys;
        for (const auto* db : {&a, &b})
            for (const TuningEntry& e : db->entries()) keys.insert(e.key);
        REQUIRE(ab.entries().size() == keys.size());
        for (const TuningKey& key : keys) {
            const TuningEntry* in_a = a.find(key);
            const TuningEntry* in_b = b.find(key);
            const TuningEntry* merged = ab.find(key);
            REQUIRE(merged != nullptr);
            const double fastest = std::min(in_a ? in_a->median_us : INFINITY, in_b ? in_b->median_us : INFINITY);
            CHECK(merged->median_us == fastest);
            // The kept entry is one of the inputs, whole: device and tuned_at travel with it.
            CHECK(((in_a && *merged == *in_a) || (in_b && *merged == *in_b)));
        }
    }
}

TEST_CASE("tuning_db: merge keeps the faster entry, joins the metadata and refuses different archs", "[tuning_db]") {
    TuningDb a, b;
    a.meta().arch = b.meta().arch = "sm_90a";
    a.meta().gpu_name = "GPU A";
    b.meta().gpu_name = "GPU B";
    a.meta().nvrtc_version = b.meta().nvrtc_version = "13.0";
    a.meta().created_at = "2026-01-01T00:00:00Z";
    b.meta().created_at = "2026-06-01T00:00:00Z";
    a.meta().sources = {"fleet a"};
    b.meta().sources = {"fleet b", "fleet c"};

    TuningEntry shared_a = entry_of("rmsnorm", {1024, 4096}, 12.0, {{"vec", 4}});
    shared_a.device = "GPU A";
    shared_a.tuned_at = "2026-01-01T00:01:00Z";
    TuningEntry shared_b = shared_a;
    shared_b.median_us = 9.0;
    shared_b.config = {{"vec", 8}};
    shared_b.device = "GPU B";
    shared_b.tuned_at = "2026-06-01T00:01:00Z";
    shared_b.nvrtc_version = "13.0";
    TuningEntry second_a = entry_of("softmax", {64, 1024}, 3.0);
    second_a.device = "GPU A";
    TuningEntry second_b = second_a;
    second_b.median_us = 4.0;
    second_b.device = "GPU B";
    TuningEntry tie_a = entry_of("gelu", {8, 8}, 1.0, {{"block", 128}});
    TuningEntry tie_b = entry_of("gelu", {8, 8}, 1.0, {{"block", 256}});
    a.upsert(shared_a);
    a.upsert(second_a);
    a.upsert(tie_a);
    a.upsert(entry_of("add", {4, 4}, 1.0));
    b.upsert(shared_b);
    b.upsert(second_b);
    b.upsert(tie_b);
    b.upsert(entry_of("mul", {4, 4}, 1.0));

    const TuningDb ab = TuningDb::merge(a, b);
    const TuningDb ba = TuningDb::merge(b, a);
    CHECK(ab == ba);
    CHECK(ab.to_json() == ba.to_json());
    CHECK(TuningDb::merge(a, a) == a);
    CHECK(TuningDb::merge(b, b) == b);
    CHECK(TuningDb::merge(ab, ab) == ab);
    CHECK(TuningDb::merge(ab, a).entries() == ab.entries());  // a's entries are all in ab already

    REQUIRE(ab.entries().size() == 5);
    const TuningEntry* shared = ab.find(shared_a.key);
    REQUIRE(shared != nullptr);
    CHECK(shared->median_us == 9.0);  // faster wins, with its own provenance
    CHECK(shared->config == Config{{"vec", 8}});
    CHECK(shared->device == "GPU B");
    CHECK(shared->tuned_at == "2026-06-01T00:01:00Z");
    CHECK(shared->nvrtc_version == "13.0");
    CHECK(ab.find(second_a.key)->device == "GPU A");
    CHECK(ab.find(tie_a.key)->config == (tileops::better_entry(tie_a, tie_b) ? tie_a.config : tie_b.config));

    CHECK(ab.meta().arch == "sm_90a");
    CHECK(ab.meta().sources == std::vector<std::string>{"fleet a", "fleet b", "fleet c"});
    CHECK(ab.meta().created_at == "2026-06-01T00:00:00Z");
    CHECK(ab.meta().gpu_name == "GPU A, GPU B");
    CHECK(ab.meta().nvrtc_version == "13.0");

    // Merging with an empty database keeps everything.
    CHECK(TuningDb::merge(a, TuningDb{}).entries() == a.entries());

    // Different archs in the metadata: refused, naming both with their sources.
    TuningDb a100 = make_db({make_entry(make_key("rmsnorm", {4096, 4096}, "bf16", "", "sm_80"), 1.0)}, "sm_80");
    a100.meta().sources = {"a100.json"};
    const std::string message = error_of([&] { TuningDb::merge(a, a100); });
    CHECK_THAT(message, ContainsSubstring("sm_90a (fleet a)"));
    CHECK_THAT(message, ContainsSubstring("sm_80 (a100.json)"));
    CHECK_THROWS_AS(TuningDb::merge(a100, a), InvalidArgument);
    TuningDb sm90 = b;
    sm90.meta().arch = "sm_90";  // not the same arch as sm_90a
    CHECK_THROWS_AS(TuningDb::merge(a, sm90), InvalidArgument);
    TuningDb no_arch = b;
    no_arch.meta().arch.clear();
    CHECK_NOTHROW(TuningDb::merge(a, no_arch));

    // A database that names no arch merges with any. The result names an arch only when all its
    // entries are of it (a file naming sm_80 would make its sm_90a entries unusable).
    TuningDb anonymous = make_db({make_entry(make_key("softmax", {64}), 1.0)}, "");
    TuningDb joined = TuningDb::merge(anonymous, a100);
    CHECK(joined.meta().arch.empty());
    CHECK(joined.entries().size() == 2);
    TuningDb anonymous_sm80 = make_db({make_entry(make_key("softmax", {64}, "bf16", "", "sm_80"), 1.0)}, "");
    CHECK(TuningDb::merge(anonymous_sm80, a100).meta().arch == "sm_80");
}

TEST_CASE("tuning_db: many entries in reverse key order load and merge in n log n", "[tuning_db]") {
    // Equal keys keep the faster entry. Inserting one entry at a time was quadratic (40k entries
    // took 46 s), and so was the parser callback of nlohmann::json 3.11 (20k entries: 65 s in the
    // asan build). In CPU time of this thread, so that other work on the machine does not count:
    // four times the entries take about 4.5 times as long in n log n, 16 times in n^2.
    auto load_and_merge = [](int n) {
        std::vector<TuningEntry> many;
        for (int i = 1; i <= n; ++i) many.push_back(make_entry(make_key("add", {i}), 2.0));
        json big = json::parse(make_db(many).to_json());
        std::reverse(big["entries"].begin(), big["entries"].end());
        big["entries"].push_back(json::parse(make_db({make_entry(make_key("add", {7}), 1.0, {{"vec", 2}})}).to_json())["entries"][0]);
        const std::string text = big.dump();
        const double start = thread_cpu_seconds();
        const TuningDb loaded = TuningDb::parse(text, "big.json");
        const TuningDb doubled = TuningDb::merge(loaded, loaded);
        const double seconds = thread_cpu_seconds() - start;
        CHECK(loaded.entries().size() == static_cast<size_t>(n));
        CHECK(doubled.entries().size() == static_cast<size_t>(n));
        REQUIRE(loaded.find(make_key("add", {7})) != nullptr);
        CHECK(loaded.find(make_key("add", {7}))->median_us == 1.0);
        return seconds;
    };
    const double quarter = load_and_merge(5000);
    const double full = load_and_merge(20000);
    INFO(fmt::format("CPU time: {:.2f} s for 5000 entries, {:.2f} s for 20000", quarter, full));
    CHECK(full < 8 * quarter);
    CHECK(full < 20.0 * kSlowBuild);
}

// ---------------------------------------------------------------------------------------------
// Saving into a shared file

TEST_CASE("tuning_db: save creates the file and merges into an existing one", "[tuning_db]") {
    TempDir dir;
    const fs::path path = dir.path() / "nested" / "fleet.json";
    TuningDb first;
    first.meta().arch = "sm_90a";
    first.meta().sources = {"first"};
    first.upsert(entry_of("rmsnorm", {1024, 4096}, 10.0, {{"vec", 4}}));
    first.upsert(entry_of("softmax", {64, 1024}, 3.0));
    first.save(path);
    REQUIRE(fs::exists(path));
    TuningDb on_disk = TuningDb::load(path);
    CHECK(on_disk.entries() == first.entries());
    CHECK(on_disk.meta().arch == "sm_90a");

    TuningDb second;
    second.meta().arch = "sm_90a";
    second.meta().sources = {"second"};
    second.upsert(entry_of("rmsnorm", {1024, 4096}, 8.0, {{"vec", 8}}));  // faster
    second.upsert(entry_of("softmax", {64, 1024}, 5.0, {{"vec", 2}}));    // slower
    second.upsert(entry_of("layernorm", {32, 32}, 1.0));                   // new
    second.save(path);
    TuningDb merged = TuningDb::load(path);
    CHECK(merged.entries().size() == 3);
    CHECK(merged.find(entry_of("rmsnorm", {1024, 4096}, 0).key)->config == Config{{"vec", 8}});
    CHECK(merged.find(entry_of("softmax", {64, 1024}, 0).key)->config == Config{{"vec", 8}});
    CHECK(merged.find(entry_of("layernorm", {32, 32}, 0).key) != nullptr);
    CHECK(merged.meta().sources == std::vector<std::string>{"first", "second"});
    CHECK(merged.entries() == TuningDb::merge(first, second).entries());

    // Saving the same database again changes nothing.
    const std::string before = read_text(path);
    second.save(path);
    CHECK(read_text(path) == before);
    // No temporary or lock files are left next to the database.
    for (const auto& file : fs::directory_iterator(path.parent_path())) CHECK(file.path() == path);
}

TEST_CASE("tuning_db: save refuses to overwrite a file it cannot use and leaves it unchanged", "[tuning_db]") {
    TempDir dir;
    const fs::path path = dir.path() / "fleet.json";
    TuningDb db;
    db.meta().arch = "sm_90a";
    db.upsert(entry_of("rmsnorm", {1024, 4096}, 10.0));

    const std::vector<std::string> unusable = {
        "{\"format_version\": 1, \"entries\": [",   // truncated JSON
        "not json at all\n",
        "[1, 2, 3]",                               // JSON, but not a database
        R"({"format_version": 99, "entries": []})",  // a future format
    };
    for (const std::string& content : unusable) {
        CAPTURE(content);
        write_text(path, content);
        CHECK_THROWS_AS(db.save(path), FileError);
        CHECK(read_text(path) == content);
    }
    // A database of another arch is not silently mixed in either.
    TuningDb sm80;
    sm80.meta().arch = "sm_80";
    TuningEntry e80 = entry_of("rmsnorm", {1024, 4096}, 10.0);
    e80.key.arch = "sm_80";
    sm80.upsert(e80);
    sm80.save(path.string() + ".sm80");
    fs::copy_file(path.string() + ".sm80", path, fs::copy_options::overwrite_existing);
    const std::string sm80_text = read_text(path);
    CHECK_THROWS_AS(db.save(path), InvalidArgument);
    CHECK(read_text(path) == sm80_text);
}

TEST_CASE("tuning_db: savers killed with SIGKILL at random moments never corrupt the file or lose a save",
          "[tuning_db][kill]") {
    // Rounds of four processes saving entries of their own into one database, one of them killed
    // at a random moment. A save a process finished (it writes a marker file after save() returns)
    // must be in the file; the file must always load, with nothing rejected.
    constexpr int kRounds = 12, kProcesses = 4, kSaves = 6;
    TempDir dir;
    const fs::path path = dir.path() / "fleet.json";
    make_db({make_entry(make_key("softmax", {64, 64}), 3.0)}).save(path);
    std::mt19937 random(36);
    for (int round = 0; round < kRounds; ++round) {
        CAPTURE(round);
        std::vector<pid_t> children;
        for (int p = 0; p < kProcesses; ++p) {
            const pid_t pid = ::fork();
            REQUIRE(pid >= 0);
            if (pid == 0) {  // child: never returns into Catch2
                spdlog::set_level(spdlog::level::off);
                int code = 0;
                try {
                    for (int s = 0; s < kSaves; ++s) {
                        TuningDb mine;
                        mine.meta().arch = "sm_90a";
                        mine.upsert(entry_of("rmsnorm", {round * 100 + p + 1, 1024LL * (s + 1)}, 1.0, {{"save", s}}));
                        mine.save(path);
                        std::ofstream(dir.path() / fmt::format("done-{}-{}-{}", round, p, s)) << "saved";
                    }
                } catch (...) {
                    code = 1;
                }
                ::_exit(code);
            }
            children.push_back(pid);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(random() % 40));
        ::kill(children[random() % kProcesses], SIGKILL);
        for (pid_t pid : children) {
            int status = 0;
            REQUIRE(::waitpid(pid, &status, 0) == pid);
            CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
        }
        const TuningDb now = TuningDb::load(path);
        REQUIRE(now.rejected().empty());
        for (int p = 0; p < kProcesses; ++p)
            for (int s = 0; s < kSaves; ++s)
                if (fs::exists(dir.path() / fmt::format("done-{}-{}-{}", round, p, s)))
                    CHECK(now.find(entry_of("rmsnorm", {round * 100 + p + 1, 1024LL * (s + 1)}, 0).key) != nullptr);
    }
    // After a later save no lock file stays. A killed saver's temporary file may (until it is ten
    // minutes old: a writer on another host could still own it), and nothing else.
    make_db({make_entry(make_key("softmax", {128, 128}), 3.0)}).save(path);
    for (const auto& file : fs::directory_iterator(dir.path())) {
        const std::string name = file.path().filename().string();
        INFO(name);
        CHECK((name == "fleet.json" || name.rfind("done-", 0) == 0 || name.rfind(".fleet.json.tmp.", 0) == 0));
    }
}

TEST_CASE("tuning_db: processes saving into one file at the same moment lose nothing", "[tuning_db]") {
    const int processes = GENERATE(2, 8);
    CAPTURE(processes);
    constexpr int kSaves = 4;           // saves per process
    constexpr int kEntriesPerSave = 5;  // distinct entries per save
    TempDir dir;
    const fs::path path = dir.path() / "shared.json";
    // Some entries are there before the processes start; they must survive too.
    const TuningKey earlier = make_key("softmax", {64, 64});
    make_db({make_entry(earlier, 3.0)}).save(path);

    // The processes start together (released by closing a pipe) and each saves kSaves databases
    // of kEntriesPerSave entries of its own, and one key they all save.
    int release[2];
    REQUIRE(::pipe(release) == 0);
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p) {
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            // Child: never returns into Catch2.
            int code = 0;
            try {
                ::close(release[1]);
                char byte;
                ssize_t got;
                do got = ::read(release[0], &byte, 1);  // blocks until the parent closes its end
                while (got < 0 && errno == EINTR);
                spdlog::set_level(spdlog::level::off);
                for (int s = 0; s < kSaves; ++s) {
                    TuningDb mine;
                    mine.meta().arch = "sm_90a";
                    mine.meta().sources = {"process " + std::to_string(p)};
                    for (int k = 0; k < kEntriesPerSave; ++k)
                        mine.upsert(entry_of("rmsnorm", {p + 1, 1024LL * (s * kEntriesPerSave + k + 1)}, 1.0 + k,
                                             {{"process", p}, {"save", s}}));
                    // The shared key: the fastest (process 0, first save) must win.
                    mine.upsert(entry_of("softmax", {4096, 4096}, 100.0 + p + s, {{"process", p}}));
                    mine.save(path);
                }
            } catch (...) {
                code = 1;
            }
            ::_exit(code);
        }
        children.push_back(pid);
    }
    ::close(release[0]);
    ::close(release[1]);  // all children start saving now
    for (pid_t pid : children) {
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }

    TuningDb result = TuningDb::load(path);
    CHECK(result.rejected().empty());
    CHECK(result.entries().size() == static_cast<size_t>(processes * kSaves * kEntriesPerSave + 2));
    CHECK(result.find(earlier) != nullptr);
    for (int p = 0; p < processes; ++p)
        for (int s = 0; s < kSaves; ++s)
            for (int k = 0; k < kEntriesPerSave; ++k) {
                CAPTURE(p, s, k);
                const TuningEntry* e = result.find(entry_of("rmsnorm", {p + 1, 1024LL * (s * kEntriesPerSave + k + 1)}, 0).key);
                REQUIRE(e != nullptr);
                CHECK(e->config == Config{{"process", p}, {"save", s}});
            }
    const TuningEntry* shared = result.find(entry_of("softmax", {4096, 4096}, 0).key);
    REQUIRE(shared != nullptr);
    CHECK(shared->median_us == 100.0);
    CHECK(shared->config.at("process") == 0);
    CHECK(result.meta().sources.size() == static_cast<size_t>(processes));
    CHECK(result.meta().arch == "sm_90a");
    // No temporary or lock files left next to it.
    for (const auto& file : fs::directory_iterator(dir.path())) CHECK(file.path().filename() == "shared.json");
}
