// The tuning database and the config resolver: JSON round trips, lookups (exact, nearest shape),
// parsing that names the file, line, entry and field of what is wrong, hostile input, merge laws,
// concurrent saves from several processes, and the resolver's lookup order with stale and invalid
// entries. No GPU is involved.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <nlohmann/json.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "support/log_capture.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tuning/config_choice.hpp"
#include "util/file_util.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::WithinAbs;
using tileops::Config;
using tileops::FileError;
using tileops::InvalidArgument;
using tileops::TuningDb;
using tileops::TuningEntry;
using tileops::TuningKey;
using tileops::test::LogCapture;
using tileops::test::ScopedEnv;
using tileops::test::TempDir;
using tileops::tuning::ConfigResolver;
using tileops::tuning::ConfigSource;
using tileops::tuning::ResolverOptions;

namespace {

const fs::path kData = fs::path(TILEOPS_TEST_SOURCE_DIR) / "tests" / "data" / "tuning";

TuningKey make_key(std::string op, std::vector<long long> shape, std::string dtype = "bf16", std::string flags = "",
                   std::string arch = "sm_90a", std::string hash = "h1") {
    return TuningKey{std::move(op), std::move(shape), std::move(dtype), std::move(flags), std::move(arch), std::move(hash)};
}

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

TuningDb make_db(const std::vector<TuningEntry>& entries, std::string arch = "sm_90a", std::string nvrtc = "13.0") {
    TuningDb db;
    db.meta().arch = std::move(arch);
    db.meta().nvrtc_version = std::move(nvrtc);
    for (const TuningEntry& e : entries) db.upsert(e);
    return db;
}

void write_db(const fs::path& path, const TuningDb& db) { tileops::util::write_file_atomic(path, db.to_json()); }

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no exception)";
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
                               {{"threads_per_row", 256}, {"vec", 8}, {"items", -(1LL << 31)}});
    e.spread_us = 0.5;
    e.throughput = 3158.25;
    e.throughput_unit = "TFLOP/s";
    e.runners_up = {{{{"threads_per_row", 512}, {"vec", 8}}, 44.0}, {{{"threads_per_row", 128}, {"vec", 4}}, 50.5}};
    e.candidates_tried = 27;
    e.candidates_failed = 13;
    e.stability = 0.8125;
    e.tuned_at = "2026-11-22T12:46:40Z";
    e.device = "NVIDIA \"H100\" 80GB\nHBM3 \xc3\xa9";  // quotes, newline, UTF-8
    return e;
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

TEST_CASE("tuning_db: to_json then parse gives the same database, in a stable order", "[tuning_db]") {
    TuningDb db;
    db.meta().library_version = "0.1.0";
    db.meta().gpu_name = "NVIDIA H100 80GB HBM3";
    db.meta().arch = "sm_90a";
    db.meta().driver = "13.0";
    db.meta().nvrtc_version = "13.0";
    db.meta().created_at = "2026-11-22T12:44:27Z";
    db.meta().sources = {"a.json", "b.json"};
    std::vector<TuningEntry> entries = {full_entry(),
                                        make_entry(make_key("softmax", {1LL << 40}, "fp32"), 1e300, {{"block", 1LL << 31}}),
                                        make_entry(make_key("add", {1, 2, 3, 4, 5, 6, 7, 8}), 0.0)};
    entries[2].nvrtc_version = "";  // optional: the file's metadata then says
    for (const TuningEntry& e : entries) db.upsert(e);

    const std::string text = db.to_json();
    TuningDb back = TuningDb::parse(text, "roundtrip.json");
    CHECK(back.rejected().empty());
    REQUIRE(back.entries().size() == 3);
    CHECK(back == db);
    CHECK(back.meta() == db.meta());
    for (const TuningEntry& e : entries) {
        const TuningEntry* found = back.find(e.key);
        REQUIRE(found != nullptr);
        CHECK(*found == e);
    }
    CHECK(back.to_json() == text);

    // The same entries inserted in another order serialize byte for byte the same.
    TuningDb reversed;
    reversed.meta() = db.meta();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) reversed.upsert(*it);
    CHECK(reversed.to_json() == text);
    // Entries are sorted by key.
    for (size_t i = 1; i < back.entries().size(); ++i) CHECK(back.entries()[i - 1].key < back.entries()[i].key);

    // save into a new file then load: the same database.
    TempDir tmp;
    db.save(tmp.path() / "db.json");
    CHECK(TuningDb::load(tmp.path() / "db.json") == db);
}

TEST_CASE("tuning_db: the fixture file loads with defaults for optional fields", "[tuning_db]") {
    TuningDb db = TuningDb::load(kData / "valid_sm90a.json");
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
}

TEST_CASE("tuning_db: upsert keeps the faster entry and refuses entries the format cannot hold", "[tuning_db]") {
    TuningDb db;
    const TuningKey key = make_key("rmsnorm", {4096, 4096});
    db.upsert(make_entry(key, 20.0, {{"vec", 4}}));
    db.upsert(make_entry(key, 30.0, {{"vec", 2}}));  // slower: ignored
    REQUIRE(db.find(key) != nullptr);
    CHECK(db.find(key)->config == Config{{"vec", 4}});
    db.upsert(make_entry(key, 10.0, {{"vec", 8}}));  // faster: replaces
    CHECK(db.find(key)->config == Config{{"vec", 8}});
    CHECK(db.entries().size() == 1);

    auto refused = [](auto change) {
        TuningEntry e = make_entry(make_key("rmsnorm", {64, 64}), 5.0);
        change(e);
        TuningDb scratch;
        return error_of([&] { scratch.upsert(e); });
    };
    CHECK(refused([](TuningEntry&) {}) == "(no exception)");
    CHECK_THAT(refused([](TuningEntry& e) { e.median_us = std::nan(""); }), ContainsSubstring("median_us"));
    CHECK_THAT(refused([](TuningEntry& e) { e.median_us = INFINITY; }), ContainsSubstring("median_us"));
    CHECK_THAT(refused([](TuningEntry& e) { e.median_us = -1; }), ContainsSubstring("median_us"));
    CHECK_THAT(refused([](TuningEntry& e) { e.spread_us = std::nan(""); }), ContainsSubstring("spread_us"));
    CHECK_THAT(refused([](TuningEntry& e) { e.key.shape = {}; }), ContainsSubstring("shape"));
    CHECK_THAT(refused([](TuningEntry& e) { e.key.shape = std::vector<long long>(9, 2); }), ContainsSubstring("shape"));
    CHECK_THAT(refused([](TuningEntry& e) { e.key.shape = {64, 0}; }), ContainsSubstring("shape[1]"));
    CHECK_THAT(refused([](TuningEntry& e) { e.key.shape = {-64, 64}; }), ContainsSubstring("shape[0]"));
    CHECK_THAT(refused([](TuningEntry& e) { e.key.op = ""; }), ContainsSubstring("op"));
    CHECK_THAT(refused([](TuningEntry& e) { e.config = {}; }), ContainsSubstring("config"));
    CHECK_THAT(refused([](TuningEntry& e) { e.runners_up = {{{{"vec", 1}}, std::nan("")}}; }),
               ContainsSubstring("runners_up[0].median_us"));
    TuningEntry bad = make_entry(make_key("rmsnorm", {64, 64}), std::nan(""));
    CHECK_THROWS_AS(db.upsert(bad), InvalidArgument);
    CHECK(db.entries().size() == 1);  // nothing refused was stored
    // better_entry ranks a NaN time last instead of comparing it.
    CHECK(tileops::better_entry(make_entry(key, 1.0), bad));
    CHECK_FALSE(tileops::better_entry(bad, make_entry(key, 1.0)));
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

TEST_CASE("tuning_db: nearest shape by log2 distance, with a cut-off", "[tuning_db]") {
    TuningDb db = make_db({make_entry(make_key("rmsnorm", {1024, 4096}), 1, {{"v", 1}}),
                           make_entry(make_key("rmsnorm", {4096, 4096}), 1, {{"v", 2}}),
                           make_entry(make_key("rmsnorm", {8192, 8192}), 1, {{"v", 3}}),
                           // Same shape family but a different op, dtype, flags, arch, hash or rank:
                           make_entry(make_key("layernorm", {3000, 4096}), 1, {{"v", 9}}),
                           make_entry(make_key("rmsnorm", {3000, 4096}, "fp32"), 1, {{"v", 9}}),
                           make_entry(make_key("rmsnorm", {3000, 4096}, "bf16", "residual"), 1, {{"v", 9}}),
                           make_entry(make_key("rmsnorm", {3000, 4096}, "bf16", "", "sm_90"), 1, {{"v", 9}}),
                           make_entry(make_key("rmsnorm", {3000, 4096}, "bf16", "", "sm_90a", "h2"), 1, {{"v", 9}}),
                           make_entry(make_key("rmsnorm", {3000, 4096, 1}), 1, {{"v", 9}})},
                          "");
    const TuningKey query = make_key("rmsnorm", {3000, 4096});
    const double expected = std::log2(4096.0 / 3000.0);  // about 0.45: one dimension off by 1.37x

    auto near = db.nearest(query, 1.0);
    REQUIRE(near.has_value());
    CHECK(near->first->config == Config{{"v", 2}});
    CHECK_THAT(near->second, WithinAbs(expected, 1e-12));

    // The cut-off is inclusive.
    CHECK_FALSE(db.nearest(query, expected - 1e-9).has_value());
    CHECK(db.nearest(query, expected + 1e-9).has_value());
    CHECK_FALSE(db.nearest(query, 0.0).has_value());
    CHECK_FALSE(db.nearest(query, std::nan("")).has_value());

    // Two dimensions off: sqrt(dx^2 + dy^2) in log2 units.
    auto diag = db.nearest(make_key("rmsnorm", {16384, 16384}), 10.0);
    REQUIRE(diag.has_value());
    CHECK(diag->first->config == Config{{"v", 3}});
    CHECK_THAT(diag->second, WithinAbs(std::sqrt(2.0), 1e-12));
    CHECK_THAT(TuningDb::shape_distance({16384, 16384}, {8192, 8192}), WithinAbs(std::sqrt(2.0), 1e-12));

    // Equal distances go to the smaller key: {2048, 4096} is 1.0 from both {1024, 4096} and {4096, 4096}.
    auto tie = db.nearest(make_key("rmsnorm", {2048, 4096}), 1.0);
    REQUIRE(tie.has_value());
    CHECK(tie->first->key.shape == std::vector<long long>{1024, 4096});
    CHECK(tie->second == 1.0);

    // An exact match has distance 0.
    auto exact = db.nearest(make_key("rmsnorm", {8192, 8192}), 0.0);
    REQUIRE(exact.has_value());
    CHECK(exact->second == 0.0);

    // `accept` skips entries: the next nearest within reach is returned, or none.
    auto skipped = db.nearest(query, 2.0, [](const TuningEntry& e) { return e.config.at("v") != 2; });
    REQUIRE(skipped.has_value());
    CHECK(skipped->first->config == Config{{"v", 1}});
    CHECK_THAT(skipped->second, WithinAbs(std::log2(3000.0 / 1024.0), 1e-12));
    CHECK_FALSE(db.nearest(query, 1.0, [](const TuningEntry& e) { return e.config.at("v") != 2; }).has_value());

    // No match across op, dtype, flags, arch, template hash or rank; degenerate queries find nothing.
    CHECK_FALSE(db.nearest(make_key("softmax", {4096, 4096}), 100).has_value());
    CHECK_FALSE(db.nearest(make_key("rmsnorm", {4096}), 100).has_value());
    CHECK_FALSE(db.nearest(make_key("rmsnorm", {0, 4096}), INFINITY).has_value());
    CHECK_FALSE(db.nearest(make_key("rmsnorm", {-4096, 4096}), INFINITY).has_value());
    CHECK_FALSE(db.nearest(make_key("rmsnorm", {}), INFINITY).has_value());
    CHECK(std::isinf(TuningDb::shape_distance({1, 2}, {1})));
    CHECK(std::isinf(TuningDb::shape_distance({1, 0}, {1, 1})));
}

// ---------------------------------------------------------------------------------------------
// Parsing: structural errors throw, local errors reject one entry

TEST_CASE("tuning_db: malformed JSON is a FileError naming the file, line and column", "[tuning_db]") {
    const std::string fixture = (kData / "malformed.json").string();
    const std::string message = error_of([&] { TuningDb::load(fixture); });
    CHECK_THAT(message, ContainsSubstring(fixture + ":5:"));
    CHECK_THROWS_AS(TuningDb::load(fixture), FileError);
    // The error is on line 5 at the unexpected "dtype" (columns 45 to 51).
    const size_t at = message.find(fixture + ":5:") + fixture.size() + 3;
    const int column = std::stoi(message.substr(at));
    CHECK(column >= 45);
    CHECK(column <= 51);

    CHECK_THAT(error_of([] { TuningDb::parse("{\n  \"a\": 1,\n  \"b\": x\n}", "bad.json"); }),
               ContainsSubstring("bad.json:3:8: invalid JSON"));
    CHECK_THAT(error_of([] { TuningDb::parse("{]", "first.json"); }), ContainsSubstring("first.json:1:2:"));
    CHECK_THAT(error_of([] { TuningDb::parse("{\"format_version\": 1,\n", "cut.json"); }),
               ContainsSubstring("cut.json:2:"));
    CHECK_THAT(error_of([] { TuningDb::parse("", "empty.json"); }), ContainsSubstring("empty.json:1:1:"));
    CHECK_THAT(error_of([] { TuningDb::parse("{\"format_version\": 1,\n \"x\": NaN}", "nan.json"); }),
               ContainsSubstring("nan.json:2:"));
    // A number too large for a double: still a FileError with its position.
    CHECK_THAT(error_of([] { TuningDb::parse("{\"format_version\": 1,\n \"x\": 1e400}", "big.json"); }),
               ContainsSubstring("big.json:2:7: invalid JSON"));
    CHECK_THROWS_AS(TuningDb::parse("{\"x\": -1e400}", "big.json"), FileError);
    // A file that is not there.
    CHECK_THAT(error_of([] { TuningDb::load("/nonexistent/dir/db.json"); }), ContainsSubstring("/nonexistent/dir/db.json"));
    CHECK_THROWS_AS(TuningDb::load("/nonexistent/dir/db.json"), FileError);
}

TEST_CASE("tuning_db: a file that is not a tuning database is a FileError", "[tuning_db]") {
    struct Case {
        const char* text;
        const char* says;
    };
    const std::vector<Case> cases = {
        {"[]", "expected a JSON object"},
        {"null", "expected a JSON object"},
        {"42", "expected a JSON object"},
        {"{}", "format_version"},
        {"{\"entries\": []}", "format_version"},
        {"{\"format_version\": \"1\"}", "format_version"},
        {"{\"format_version\": 1.0}", "format_version"},
        {"{\"format_version\": 2}", "format_version 2 is not supported"},
        {"{\"format_version\": 18446744073709551615}", "not supported"},
        {"{\"format_version\": -9223372036854775808}", "not supported"},
        {"{\"format_version\": 1, \"entries\": {}}", "entries: expected a list"},
        {"{\"format_version\": 1, \"metadata\": []}", "metadata: expected object"},
        {"{\"format_version\": 1, \"metadata\": {\"arch\": 90}}", "metadata.arch: expected string, got integer"},
        {"{\"format_version\": 1, \"metadata\": {\"sources\": [1]}}", "metadata.sources"},
    };
    for (const Case& c : cases) {
        INFO(c.text);
        const std::string message = error_of([&] { TuningDb::parse(c.text, "not_a_db.json"); });
        CHECK_THAT(message, ContainsSubstring("not_a_db.json"));
        CHECK_THAT(message, ContainsSubstring(c.says));
        CHECK_THROWS_AS(TuningDb::parse(c.text, "not_a_db.json"), FileError);
    }
    // The smallest valid database.
    TuningDb empty = TuningDb::parse("{\"format_version\": 1}", "min.json");
    CHECK(empty.entries().empty());
    CHECK(empty.rejected().empty());
}

TEST_CASE("tuning_db: malformed entries are rejected by index and field, the rest loads", "[tuning_db]") {
    LogCapture log;
    const std::string fixture = (kData / "bad_entries.json").string();
    TuningDb db = TuningDb::load(fixture);

    REQUIRE(db.entries().size() == 2);
    CHECK(db.find(make_key("rmsnorm", {4096, 4096}, "bf16", "", "sm_90a", "aaaa")) != nullptr);
    CHECK(db.find(make_key("layernorm", {4096, 4096}, "bf16", "", "sm_90a", "dddd")) != nullptr);

    const std::vector<std::pair<size_t, std::string>> expected = {
        {1, "entries[1].config.vec: expected integer, got string"},
        {2, "entries[2].shape: rank 9 is not in [1, 8]"},
        {3, "entries[3].shape[1]: -4096 is out of range"},
        {4, "entries[4].median_us: missing"},
        {5, "entries[5]: expected object, got string"},
        {6, "entries[6].median_us: -3 is not a finite number >= 0"},
        {7, "entries[7].arch: expected string, got integer"},
        {8, "entries[8].shape[1]: expected integer, got float"},
        {9, "entries[9].config.vec: 9223372036854775808 is out of range"},
    };
    REQUIRE(db.rejected().size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        const tileops::RejectedEntry& r = db.rejected()[i];
        INFO(r.reason);
        CHECK(r.source == fixture);
        CHECK(r.index == expected[i].first);
        CHECK_THAT(r.reason, ContainsSubstring(expected[i].second));
        // One warning per rejected entry, naming the file and the entry.
        CHECK(log.lines_with({"warn", fixture, expected[i].second}) == 1);
    }
    // As the brief puts it: "<file>: entries[3].config.vec: expected integer, got string".
    CHECK_THAT(log.text(), ContainsSubstring(fixture + ": entries[1].config.vec: expected integer, got string"));
}

TEST_CASE("tuning_db: the validator rejects entries with a warning, the rest loads", "[tuning_db]") {
    LogCapture log;
    const fs::path fixture = kData / "valid_sm90a.json";
    size_t calls = 0;
    TuningDb db = TuningDb::load(fixture, [&](const TuningEntry& e) -> std::optional<std::string> {
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
    CHECK(log.lines_with({"warn", fixture.string(), "entries[1]", "cannot run here"}) == 1);
    CHECK(log.lines_with({"warn", fixture.string(), "entries[2]", "validator blew up"}) == 1);
}

TEST_CASE("tuning_db: hostile input never crashes and fails only with FileError", "[tuning_db]") {
    LogCapture log;  // thousands of warnings, kept off the terminal
    // A valid entry with `field_json` in place of the fields it names.
    auto entry_with = [](const std::string& field_json) {
        const std::vector<std::pair<std::string, std::string>> base = {
            {"op", "\"rmsnorm\""}, {"shape", "[64, 64]"},           {"dtype", "\"bf16\""},    {"arch", "\"sm_90a\""},
            {"template_hash", "\"h\""}, {"config", "{\"vec\": 8}"}, {"median_us", "1.0"}};
        std::string entry = "{" + field_json;
        for (const auto& [key, value] : base)
            if (field_json.rfind("\"" + key + "\":", 0) != 0 && field_json.find(", \"" + key + "\":") == std::string::npos)
                entry += ", \"" + key + "\": " + value;
        return "{\"format_version\": 1, \"entries\": [" + entry + "}]}";
    };
    // Each of these loads the file and rejects its one entry.
    const std::vector<std::string> rejected_fields = {
        "\"shape\": [64, 9223372036854775807]",
        "\"shape\": [64, -9223372036854775808]",
        "\"shape\": [64, 18446744073709551615]",
        "\"shape\": [64, 1099511627777]",  // 2^40 + 1
        "\"shape\": [64, 1e300]",
        "\"shape\": [64, \"64\"]",
        "\"shape\": [0]",
        "\"shape\": []",
        "\"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]",
        "\"shape\": \"64x64\"",
        "\"median_us\": \"NaN\"",
        "\"median_us\": null",
        "\"median_us\": -0.5",
        "\"median_us\": 1e308, \"spread_us\": -1e308",
        "\"stability\": 1.5",
        "\"config\": {\"vec\": 1.5}",
        "\"config\": {\"vec\": true}",
        "\"config\": {\"vec\": 4294967296}",
        "\"config\": {}",
        "\"config\": [8]",
        "\"candidates_tried\": -1",
        "\"candidates_tried\": 99999999999",
        "\"runners_up\": {}",
        "\"runners_up\": [1]",
        "\"runners_up\": [{\"config\": {\"vec\": \"x\"}, \"median_us\": 1}]",
        "\"op\": \"" + std::string(1 << 20, 'x') + "\"",
        "\"op\": \"\"",
        "\"dtype\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        "\"config\": {\"vec\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
    };
    for (const std::string& field : rejected_fields) {
        INFO(field.substr(0, 120));
        std::optional<TuningDb> db;
        CHECK_NOTHROW(db.emplace(TuningDb::parse(entry_with(field), "hostile.json")));
        if (!db) continue;
        CHECK(db->entries().empty());
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

    // Structural damage: a FileError, never anything else.
    const std::vector<std::string> structural = {
        std::string(200000, '['),
        std::string(200000, '[') + std::string(200000, ']'),
        std::string(200000, '{'),
        "{\"format_version\": 1, \"metadata\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
        "{\"format_version\": 1, \"entries\": [" + std::string(1 << 16, '"'),
        "{\"format_version\": 1, \"median_us\": Infinity}",
        "{\"format_version\": 1, \"median_us\": 2e308}",
        std::string("{\"format_version\": 1\0, \"entries\": []}", 35),
        "\xff\xfe\x00\x01",
        "{\"format_version\": 1, \"entries\": [], \"x\": \"\xc3\x28\"}",
    };
    for (const std::string& text : structural) {
        INFO(text.substr(0, 80));
        CHECK_THROWS_AS(TuningDb::parse(text, "structural.json"), FileError);
    }

    // Random damage to a valid file: parse succeeds (possibly rejecting entries) or throws
    // FileError; whatever loads can be used and written again.
    const std::string valid = *tileops::util::read_file(kData / "valid_sm90a.json");
    std::mt19937 random(12345);
    const std::string alphabet = "{}[],:\"\\0123456789-+.eE tfnul\xff";
    size_t loaded = 0, failed = 0;
    for (int round = 0; round < 1500; ++round) {
        std::string text = valid;
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
            ++loaded;
            CHECK(db.entries().size() + db.rejected().size() <= 3);
            CHECK(TuningDb::parse(db.to_json(), "fuzz2.json") == db);
            for (const TuningEntry& e : db.entries()) (void)db.nearest(e.key, 1.0);
        } catch (const FileError&) {
            ++failed;
        } catch (const std::exception& e) {
            FAIL("round " << round << ": not a FileError: " << e.what());
        }
    }
    CHECK(loaded > 0);
    CHECK(failed > 0);
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

TEST_CASE("tuning_db: a key repeated in one object is refused, not silently dropped", "[tuning_db]") {
    const std::string entries_twice = R"({"format_version": 1, "entries": [], "entries": []})";
    CHECK_THROWS_AS(TuningDb::parse(entries_twice, "joined.json"), tileops::FileError);
    CHECK_THAT(error_of([&] { TuningDb::parse(entries_twice, "joined.json"); }),
               ContainsSubstring("joined.json: the key \"entries\" appears twice"));
    nlohmann::json db = nlohmann::json::parse(make_db({make_entry(make_key("add", {8}), 1.0, {{"vec", 4}})}).to_json());
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
    CHECK_NOTHROW(TuningDb::parse(nlohmann::json::parse(make_db({make_entry(make_key("add", {8}), 1.0),
                                                       make_entry(make_key("add", {16}), 1.0)})
                                                  .to_json())
                                      .dump(),
                                  "two.json"));
}

TEST_CASE("tuning_db: merge keeps the faster entry and refuses different archs", "[tuning_db]") {
    const TuningKey key = make_key("rmsnorm", {4096, 4096});
    TuningDb a = make_db({make_entry(key, 10.0, {{"vec", 4}}, "GPU slow")});
    TuningDb b = make_db({make_entry(key, 5.0, {{"vec", 8}}, "GPU fast"), make_entry(make_key("add", {8}), 1.0)});
    a.meta().sources = {"a.json"};
    b.meta().sources = {"b.json"};
    TuningDb m = TuningDb::merge(a, b);
    REQUIRE(m.find(key) != nullptr);
    CHECK(m.find(key)->config == Config{{"vec", 8}});
    CHECK(m.find(key)->device == "GPU fast");
    CHECK(m.entries().size() == 2);
    CHECK(m.meta().arch == "sm_90a");

    TuningDb other = make_db({make_entry(make_key("rmsnorm", {4096, 4096}, "bf16", "", "sm_80"), 1.0)}, "sm_80");
    other.meta().sources = {"a100.json"};
    const std::string message = error_of([&] { TuningDb::merge(a, other); });
    CHECK_THAT(message, ContainsSubstring("sm_90a (a.json)"));
    CHECK_THAT(message, ContainsSubstring("sm_80 (a100.json)"));
    CHECK_THROWS_AS(TuningDb::merge(other, a), InvalidArgument);
    TuningDb sm90 = make_db({}, "sm_90");  // sm_90 is not sm_90a
    CHECK_THROWS_AS(TuningDb::merge(a, sm90), InvalidArgument);

    // A database that names no arch merges with any. The result names an arch only when all its
    // entries are of it (a file naming sm_80 would make its sm_90a entries unusable).
    TuningDb anonymous = make_db({make_entry(make_key("softmax", {64}), 1.0)}, "");
    TuningDb joined = TuningDb::merge(anonymous, other);
    CHECK(joined.meta().arch.empty());
    CHECK(joined.entries().size() == 2);
    TuningDb anonymous_sm80 = make_db({make_entry(make_key("softmax", {64}, "bf16", "", "sm_80"), 1.0)}, "");
    CHECK(TuningDb::merge(anonymous_sm80, other).meta().arch == "sm_80");

    // Many entries in reverse key order load and merge in n log n; equal keys keep the faster
    // entry. Inserting one entry at a time was quadratic (40k entries took 46 s), and so was the
    // parser callback of nlohmann::json 3.11 (20k entries: 65 s in the asan build). In CPU time
    // of this thread, so that other work on the machine does not count: four times the entries
    // take about 4.5 times as long in n log n, 16 times in n^2.
    auto load_and_merge = [](int n) {
        std::vector<TuningEntry> many;
        for (int i = 1; i <= n; ++i) many.push_back(make_entry(make_key("add", {i}), 2.0));
        nlohmann::json big = nlohmann::json::parse(make_db(many).to_json());
        std::reverse(big["entries"].begin(), big["entries"].end());
        big["entries"].push_back(nlohmann::json::parse(make_db({make_entry(make_key("add", {7}), 1.0, {{"vec", 2}})}).to_json())["entries"][0]);
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

TEST_CASE("tuning_db: save merges into the existing file and refuses to overwrite garbage", "[tuning_db]") {
    TempDir tmp;
    const fs::path path = tmp.path() / "sub" / "db.json";
    const TuningKey key = make_key("rmsnorm", {4096, 4096});
    make_db({make_entry(key, 10.0, {{"vec", 4}}), make_entry(make_key("add", {8}), 1.0)}).save(path);
    make_db({make_entry(key, 20.0, {{"vec", 2}}), make_entry(make_key("mul", {8}), 1.0)}).save(path);  // slower
    TuningDb on_disk = TuningDb::load(path);
    CHECK(on_disk.entries().size() == 3);
    CHECK(on_disk.find(key)->config == Config{{"vec", 4}});
    make_db({make_entry(key, 5.0, {{"vec", 8}})}).save(path);  // faster
    CHECK(TuningDb::load(path).find(key)->config == Config{{"vec", 8}});

    // Another arch's database is not mixed into this file.
    CHECK_THROWS_AS(make_db({}, "sm_80").save(path), InvalidArgument);

    // A file that is not a database is left alone.
    const fs::path garbage = tmp.path() / "garbage.json";
    tileops::util::write_file_atomic(garbage, "not json at all");
    CHECK_THROWS_AS(make_db({make_entry(key, 1.0)}).save(garbage), FileError);
    CHECK(*tileops::util::read_file(garbage) == "not json at all");
}

namespace {

// `children` processes start together (released by closing a pipe) and each saves `rounds`
// databases of `per_round` entries of its own into `path`. Returns how many children failed.
int save_from_processes(const fs::path& path, int children, int rounds, int per_round) {
    int gate[2];
    REQUIRE(::pipe(gate) == 0);
    std::vector<pid_t> pids;
    for (int child = 0; child < children; ++child) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            // Child: never returns into Catch2.
            int rc = 0;
            try {
                ::close(gate[1]);
                char c;
                while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
                }
                spdlog::set_level(spdlog::level::off);
                for (int round = 0; round < rounds; ++round) {
                    TuningDb db;
                    db.meta().arch = "sm_90a";
                    db.meta().sources = {"child " + std::to_string(child)};
                    for (int k = 0; k < per_round; ++k)
                        db.upsert(make_entry(make_key("rmsnorm", {child + 1, round * per_round + k + 1}), 1.0 + k,
                                             {{"child", child}, {"round", round}}));
                    db.save(path);
                }
            } catch (...) {
                rc = 2;
            }
            ::_exit(rc);
        }
        if (pid < 0) break;
        pids.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);  // releases the children
    int failures = children - static_cast<int>(pids.size());
    for (pid_t pid : pids) {
        int status = 0;
        if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    return failures;
}

}  // namespace

TEST_CASE("tuning_db: processes saving into one file at once lose nothing", "[tuning_db]") {
    const int children = GENERATE(2, 8);
    constexpr int kRounds = 4;
    constexpr int kPerRound = 5;
    TempDir tmp;
    const fs::path path = tmp.path() / "shared.json";
    // Some entries are there before the children start; they must survive too.
    make_db({make_entry(make_key("softmax", {64, 64}), 3.0)}).save(path);

    CHECK(save_from_processes(path, children, kRounds, kPerRound) == 0);

    TuningDb db = TuningDb::load(path);
    CHECK(db.rejected().empty());
    CHECK(db.entries().size() == static_cast<size_t>(children * kRounds * kPerRound + 1));
    CHECK(db.find(make_key("softmax", {64, 64})) != nullptr);
    for (int child = 0; child < children; ++child)
        for (int round = 0; round < kRounds; ++round)
            for (int k = 0; k < kPerRound; ++k) {
                const TuningEntry* e = db.find(make_key("rmsnorm", {child + 1, round * kPerRound + k + 1}));
                REQUIRE(e != nullptr);
                CHECK(e->config == Config{{"child", child}, {"round", round}});
            }
    CHECK(db.meta().sources.size() == static_cast<size_t>(children));
    // No temporary files left next to it (the lock file stays).
    for (const auto& file : fs::directory_iterator(tmp.path())) {
        const std::string name = file.path().filename().string();
        CHECK((name == "shared.json" || name == "shared.json.lock"));
    }
}

// ---------------------------------------------------------------------------------------------
// The config resolver

namespace {

struct ResolverFixture {
    TempDir tmp;
    fs::path shipped_dir = tmp.path() / "shipped";
    ScopedEnv no_env_dbs{"TILEOPS_TUNING_DB", ""};
    ScopedEnv no_env_distance{"TILEOPS_TUNING_MAX_DISTANCE", ""};

    ResolverFixture() { fs::create_directories(shipped_dir); }

    ResolverOptions options(std::vector<std::string> user_dbs, double max_distance = 1.0) const {
        ResolverOptions o;
        o.arch = "sm_90a";
        o.nvrtc_version = "13.0";
        o.user_dbs = std::move(user_dbs);
        o.shipped_dirs = {shipped_dir.string()};
        o.max_distance = max_distance;
        return o;
    }
    std::string write(const std::string& name, const TuningDb& db) const {
        const fs::path path = tmp.path() / name;
        write_db(path, db);
        return path.string();
    }
};

Config heuristic_config() { return Config{{"src", 0}}; }

}  // namespace

TEST_CASE("tuning_db: resolver looks in memory, user, shipped, nearest, then the heuristic", "[tuning_db]") {
    LogCapture log;
    ResolverFixture f;
    const TuningKey key = make_key("rmsnorm", {4096, 4096});
    const std::string shipped =
        (f.shipped_dir / "h100.json").string();
    write_db(shipped, make_db({make_entry(key, 9.0, {{"src", 3}}),
                               make_entry(make_key("rmsnorm", {65536, 4096}), 9.0, {{"src", 30}})}));
    const std::string user = f.write("user.json", make_db({make_entry(key, 9.0, {{"src", 2}})}));
    const std::string other_user = f.write("other.json", make_db({make_entry(make_key("add", {8}), 1.0)}));

    SECTION("memory first") {
        ConfigResolver resolver(f.options({user}));
        resolver.remember(make_entry(key, 9.0, {{"src", 1}}));
        auto choice = resolver.choose(key, heuristic_config, {});
        CHECK(choice.source == ConfigSource::memory);
        CHECK(choice.config == Config{{"src", 1}});
        // Memory is keyed by the whole key: another template hash does not match it.
        TuningKey other_hash = key;
        other_hash.template_hash = "h2";
        CHECK(resolver.choose(other_hash, heuristic_config, {}).source != ConfigSource::memory);
    }
    SECTION("then user databases") {
        ConfigResolver resolver(f.options({user}));
        auto choice = resolver.choose(key, heuristic_config, {});
        CHECK(choice.source == ConfigSource::user_db);
        CHECK(choice.config == Config{{"src", 2}});
        CHECK(choice.origin == user);
    }
    SECTION("then the shipped database of this arch") {
        ConfigResolver resolver(f.options({other_user}));
        auto choice = resolver.choose(key, heuristic_config, {});
        CHECK(choice.source == ConfigSource::shipped_db);
        CHECK(choice.config == Config{{"src", 3}});
        CHECK(choice.origin == shipped);
    }
    SECTION("then the nearest tuned shape, user databases before shipped ones on a tie") {
        ConfigResolver resolver(f.options({user}));
        auto choice = resolver.choose(make_key("rmsnorm", {4096, 5000}), heuristic_config, {});
        CHECK(choice.source == ConfigSource::nearest);
        CHECK(choice.config == Config{{"src", 2}});  // user and shipped both hold {4096, 4096}
        CHECK(choice.origin == user);
        CHECK_THAT(choice.distance, WithinAbs(std::log2(5000.0 / 4096.0), 1e-12));
        CHECK_THAT(choice.explanation, ContainsSubstring("rmsnorm 4096x4096 bf16 sm_90a"));
        // Closer in the shipped database: the shipped entry wins.
        auto far = resolver.choose(make_key("rmsnorm", {50000, 4096}), heuristic_config, {});
        CHECK(far.source == ConfigSource::nearest);
        CHECK(far.config == Config{{"src", 30}});
        CHECK(far.origin == shipped);
    }
    SECTION("then the heuristic") {
        ConfigResolver resolver(f.options({user}));
        auto choice = resolver.choose(make_key("rmsnorm", {64, 64}), heuristic_config, {});
        CHECK(choice.source == ConfigSource::heuristic);
        CHECK(choice.config == heuristic_config());
        CHECK(choice.distance == 0);
    }
    SECTION("earlier user databases win, also from TILEOPS_TUNING_DB") {
        const std::string second = f.write("second.json", make_db({make_entry(key, 1.0, {{"src", 22}})}));
        CHECK(ConfigResolver(f.options({user, second})).choose(key, heuristic_config, {}).config == Config{{"src", 2}});
        CHECK(ConfigResolver(f.options({second, user})).choose(key, heuristic_config, {}).config == Config{{"src", 22}});
        ScopedEnv env("TILEOPS_TUNING_DB", second + ":" + user);
        ConfigResolver from_env(f.options({}));
        CHECK(from_env.options().user_dbs == std::vector<std::string>{second, user});
        auto choice = from_env.choose(key, heuristic_config, {});
        CHECK(choice.source == ConfigSource::user_db);
        CHECK(choice.origin == second);
    }
    SECTION("the choice is logged at debug") {
        ConfigResolver resolver(f.options({user}));
        resolver.choose(key, heuristic_config, {});
        CHECK(log.lines_with({"debug", "rmsnorm 4096x4096 bf16 sm_90a", "user database", user}) == 1);
    }
}

TEST_CASE("tuning_db: resolver max distance from options and TILEOPS_TUNING_MAX_DISTANCE", "[tuning_db]") {
    LogCapture log;
    ResolverFixture f;
    const std::string user = f.write("user.json", make_db({make_entry(make_key("rmsnorm", {4096, 4096}), 1.0)}));
    const TuningKey query = make_key("rmsnorm", {2048, 4096});  // distance 1.0

    CHECK(ConfigResolver(f.options({user}, 1.0)).choose(query, heuristic_config, {}).source == ConfigSource::nearest);
    CHECK(ConfigResolver(f.options({user}, 0.99)).choose(query, heuristic_config, {}).source == ConfigSource::heuristic);
    {
        ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", "0.5");
        ConfigResolver resolver(f.options({user}, -1));
        CHECK(resolver.options().max_distance == 0.5);
        CHECK(resolver.choose(query, heuristic_config, {}).source == ConfigSource::heuristic);
    }
    {
        ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", "2");
        CHECK(ConfigResolver(f.options({user}, -1)).choose(query, heuristic_config, {}).source == ConfigSource::nearest);
    }
    CHECK(ConfigResolver(f.options({user}, -1)).options().max_distance == 1.0);  // the default
    for (const char* bad : {"x", "1.5x", "-1", "nan", " "}) {
        INFO(bad);
        ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", bad);
        CHECK_THROWS_AS(ConfigResolver(f.options({user}, -1)), InvalidArgument);
    }
}

TEST_CASE("tuning_db: stale entries are never used and reported once; the rest of the file is used",
          "[tuning_db]") {
    LogCapture log;
    ResolverFixture f;
    TuningEntry old_template = make_entry(make_key("rmsnorm", {1024, 1024}, "bf16", "", "sm_90a", "old"), 1.0, {{"src", 1}});
    TuningEntry old_nvrtc = make_entry(make_key("rmsnorm", {2048, 1024}), 1.0, {{"src", 2}});
    old_nvrtc.nvrtc_version = "12.8";
    TuningEntry fresh = make_entry(make_key("rmsnorm", {4096, 1024}), 1.0, {{"src", 3}});
    fresh.nvrtc_version = "";  // the file's metadata (13.0) says
    TuningEntry other_arch = make_entry(make_key("rmsnorm", {8192, 1024}, "bf16", "", "sm_90"), 1.0, {{"src", 4}});
    const std::string mixed = f.write("mixed.json", make_db({old_template, old_nvrtc, fresh, other_arch}, ""));

    // A file whose metadata names another NVRTC: its entries without their own version are stale,
    // an entry that names this NVRTC is not.
    TuningEntry by_file = make_entry(make_key("rmsnorm", {1024, 1024}), 1.0, {{"src", 5}});
    by_file.nvrtc_version = "";
    TuningEntry own_version = make_entry(make_key("rmsnorm", {16384, 1024}), 1.0, {{"src", 6}});
    const std::string old_file = f.write("old_nvrtc.json", make_db({by_file, own_version}, "sm_90a", "12.8"));
    // A user file made for another arch.
    const std::string a100 =
        f.write("a100.json", make_db({make_entry(make_key("rmsnorm", {32768, 1024}), 1.0, {{"src", 7}})}, "sm_80"));
    // Shipped files of other archs are not even loaded.
    write_db(f.shipped_dir / "sm90.json",
             make_db({make_entry(make_key("rmsnorm", {65536, 1024}), 1.0, {{"src", 8}})}, "sm_90"));
    write_db(f.shipped_dir / "sm80.json",
             make_db({make_entry(make_key("rmsnorm", {65536, 1024}), 1.0, {{"src", 9}})}, "sm_80"));

    ConfigResolver resolver(f.options({mixed, old_file, a100}, 1.5));
    auto source_of = [&](const TuningKey& key) { return resolver.choose(key, heuristic_config, {}); };

    for (int repeat = 0; repeat < 3; ++repeat) {
        // The usable entry of the mixed file is used.
        auto ok = source_of(fresh.key);
        CHECK(ok.source == ConfigSource::user_db);
        CHECK(ok.config == Config{{"src", 3}});
        CHECK(ok.origin == mixed);
        auto own = source_of(own_version.key);
        CHECK(own.source == ConfigSource::user_db);
        CHECK(own.config == Config{{"src", 6}});
        // {1024,1024}: stale by template (mixed) and by the file's NVRTC (old_nvrtc.json); the
        // nearest, {2048,1024}, is stale by its NVRTC; {4096,1024} is 2.0 away (max 1.5).
        CHECK(source_of(make_key("rmsnorm", {1024, 1024})).source == ConfigSource::heuristic);
        CHECK(source_of(old_nvrtc.key).source != ConfigSource::user_db);
        CHECK(source_of(make_key("rmsnorm", {8192, 1024})).config != Config{{"src", 4}});  // sm_90 entry
        CHECK(source_of(make_key("rmsnorm", {32768, 1024})).config != Config{{"src", 7}});  // sm_80 file
        auto shipped = source_of(make_key("rmsnorm", {65536, 1024}));
        CHECK(shipped.source != ConfigSource::shipped_db);
        CHECK(shipped.config != Config{{"src", 8}});
        CHECK(shipped.config != Config{{"src", 9}});
    }
    // {2048,1024} itself is stale; the nearest usable shape is {4096,1024}, 1.0 away.
    CHECK(source_of(old_nvrtc.key).source == ConfigSource::nearest);
    CHECK(source_of(old_nvrtc.key).config == Config{{"src", 3}});

    const std::vector<std::string> stale = resolver.stale_entries();
    INFO(fmt::format("{}", fmt::join(stale, "\n")));
    auto listed = [&](const std::string& file, const std::string& key, const std::string& why) {
        size_t n = 0;
        for (const std::string& line : stale)
            n += line.find(file) != std::string::npos && line.find(key) != std::string::npos &&
                 line.find(why) != std::string::npos;
        return n;
    };
    CHECK(listed(mixed, "rmsnorm 1024x1024", "another version of the kernel template") == 1);
    CHECK(listed(mixed, "rmsnorm 2048x1024", "NVRTC 12.8") == 1);
    CHECK(listed(old_file, "rmsnorm 1024x1024", "NVRTC 12.8") == 1);
    CHECK(listed(a100, "rmsnorm 32768x1024", "for sm_80") == 1);
    CHECK(stale.size() == 4);
    // Each reported once, however often it was looked at.
    CHECK(log.lines_with({"warn", mixed, "rmsnorm 1024x1024", "kernel template"}) == 1);
    CHECK(log.lines_with({"warn", mixed, "rmsnorm 2048x1024", "NVRTC 12.8"}) == 1);
    CHECK(log.lines_with({"warn", old_file, "rmsnorm 1024x1024", "NVRTC 12.8"}) == 1);
    CHECK(log.lines_with({"warn", a100, "sm_80"}) == 1);
}

TEST_CASE("tuning_db: entries the validator rejects are skipped for the next source", "[tuning_db]") {
    LogCapture log;
    ResolverFixture f;
    const TuningKey key = make_key("rmsnorm", {4096, 4096});
    write_db(f.shipped_dir / "h100.json", make_db({make_entry(key, 9.0, {{"vec", 8}})}));
    const std::string user = f.write("user.json", make_db({make_entry(key, 1.0, {{"vec", 16}}),
                                                          make_entry(make_key("rmsnorm", {4096, 2048}), 1.0, {{"vec", 16}})}));
    auto valid = [](const TuningEntry& e) -> std::optional<std::string> {
        if (e.config.at("vec") > 8) return fmt::format("vec {} is wider than 16 bytes", e.config.at("vec"));
        return std::nullopt;
    };
    ConfigResolver resolver(f.options({user}));
    resolver.remember(make_entry(key, 0.5, {{"vec", 32}}));
    for (int repeat = 0; repeat < 2; ++repeat) {
        auto choice = resolver.choose(key, heuristic_config, valid);
        CHECK(choice.source == ConfigSource::shipped_db);
        CHECK(choice.config == Config{{"vec", 8}});
        // Nearest skips the invalid {4096, 2048} and takes the valid shipped {4096, 4096}.
        auto near = resolver.choose(make_key("rmsnorm", {4096, 3000}), heuristic_config, valid);
        CHECK(near.source == ConfigSource::nearest);
        CHECK(near.config == Config{{"vec", 8}});
        // A validator that throws rejects too.
        auto thrown = resolver.choose(make_key("rmsnorm", {4096, 3000}), heuristic_config,
                                      [](const TuningEntry&) -> std::optional<std::string> { throw std::runtime_error("boom"); });
        CHECK(thrown.source == ConfigSource::heuristic);
    }
    CHECK(log.lines_with({"warn", "memory", "vec 32 is wider"}) == 1);
    CHECK(log.lines_with({"warn", user, "rmsnorm 4096x4096", "vec 16 is wider"}) == 1);
    CHECK(log.lines_with({"warn", user, "rmsnorm 4096x2048", "vec 16 is wider"}) == 1);
    CHECK(log.lines_with({"warn", "boom"}) >= 1);
    // Without the validator the user entry is used.
    CHECK(resolver.choose(key, heuristic_config, {}).config == Config{{"vec", 32}});
}

TEST_CASE("tuning_db: a missing user database is an error until it exists", "[tuning_db]") {
    LogCapture log;
    ResolverFixture f;
    const TuningKey key = make_key("rmsnorm", {4096, 4096});
    const std::string later = (f.tmp.path() / "later.json").string();
    const std::string there = f.write("there.json", make_db({make_entry(key, 1.0, {{"src", 2}}),
                                                            make_entry(make_key("add", {8}), 1.0, {{"src", 20}})}));
    ConfigResolver resolver(f.options({later, there}));
    CHECK_THAT(error_of([&] { resolver.choose(key, heuristic_config, {}); }), ContainsSubstring(later));
    CHECK_THROWS_AS(resolver.choose(key, heuristic_config, {}), FileError);
    write_db(later, make_db({make_entry(key, 1.0, {{"src", 1}})}));
    auto choice = resolver.choose(key, heuristic_config, {});
    CHECK(choice.origin == later);
    CHECK(choice.config == Config{{"src", 1}});
    CHECK(resolver.choose(make_key("add", {8}), heuristic_config, {}).origin == there);
}

TEST_CASE("tuning_db: the resolver is safe to call from many threads", "[tuning_db]") {
    LogCapture log;
    ResolverFixture f;
    std::vector<TuningEntry> entries;
    for (int i = 0; i < 16; ++i) entries.push_back(make_entry(make_key("rmsnorm", {1LL << i, 4096}), 1.0, {{"src", i}}));
    const std::string user = f.write("user.json", make_db(entries));
    ConfigResolver resolver(f.options({user}, 0.5));
    std::atomic<int> wrong{0};
    std::atomic<int> heuristics{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 200; ++i) {
                const int row_log2 = (i + t) % 20;
                if (t == 0 && i % 10 == 0)
                    resolver.remember(make_entry(make_key("softmax", {1LL << row_log2}), 1.0, {{"src", 100}}));
                auto choice = resolver.choose(make_key("rmsnorm", {1LL << row_log2, 4096}), [&] {
                    heuristics.fetch_add(1);
                    return heuristic_config();
                }, {});
                const bool ok = row_log2 < 16 ? (choice.source == ConfigSource::user_db && choice.config.at("src") == row_log2)
                                              : choice.source == ConfigSource::heuristic;
                if (!ok) wrong.fetch_add(1);
            }
        });
    for (std::thread& thread : threads) thread.join();
    CHECK(wrong.load() == 0);
    CHECK(heuristics.load() > 0);
}

TEST_CASE("tuning_db: config sources have names", "[tuning_db]") {
    using tileops::tuning::to_string;
    const std::set<std::string> names = {to_string(ConfigSource::memory), to_string(ConfigSource::user_db),
                                         to_string(ConfigSource::shipped_db), to_string(ConfigSource::nearest),
                                         to_string(ConfigSource::heuristic)};
    CHECK(names.size() == 5);
    CHECK(to_string(ConfigSource::heuristic) == "heuristic");
    CHECK(to_string(ConfigSource::nearest) == "nearest tuned shape");
}
