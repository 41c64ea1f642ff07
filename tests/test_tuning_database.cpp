// TuningDb: the JSON file format (round trips, errors that name the file, line, column, entry and
// field), hostile input, the validator, upsert / nearest / merge semantics, and save() from several
// processes at once. CPU only.
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
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
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include "support/log_capture.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"

namespace {

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

fs::path fixture(const std::string& name) { return fs::path(TILEOPS_TEST_SOURCE_DIR) / "tests" / "data" / "tuning" / name; }

TuningEntry entry_of(const std::string& op, std::vector<long long> shape, double median_us, Config config = {{"vec", 8}}) {
    TuningEntry e;
    e.key.op = op;
    e.key.shape = std::move(shape);
    e.key.dtype = "bf16";
    e.key.arch = "sm_90a";
    e.key.template_hash = "hash-1";
    e.config = std::move(config);
    e.median_us = median_us;
    return e;
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

TEST_CASE("tuning database: to_json then parse reproduces every field, in key order", "[tuning_db]") {
    TuningDb db;
    db.meta().library_version = "0.1.0";
    db.meta().gpu_name = "NVIDIA H100 80GB HBM3";
    db.meta().arch = "sm_90a";
    db.meta().driver = "13.0";
    db.meta().nvrtc_version = "13.0";
    db.meta().created_at = "2026-11-22T12:44:27Z";
    db.meta().sources = {"a host", "b host"};

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
    TuningEntry mixed = entry_of("softmax", {1, 128256}, 123456.789, {{"threads_per_row", 1024}, {"vec", -1}});
    mixed.key.dtype = "bf16->fp32";
    mixed.throughput_unit = "GFLOP/s";
    TuningEntry rank3 = entry_of("add", {2, 3, 5}, 0.0);
    // Inserted out of order: the file lists entries sorted by key.
    db.upsert(mixed);
    db.upsert(full);
    db.upsert(rank3);
    REQUIRE(db.entries().size() == 3);
    for (size_t i = 1; i < db.entries().size(); ++i) CHECK(db.entries()[i - 1].key < db.entries()[i].key);

    const std::string text = db.to_json();
    TuningDb parsed = TuningDb::parse(text, "roundtrip.json");
    CHECK(parsed.rejected().empty());
    CHECK(parsed == db);
    CHECK(parsed.to_json() == text);  // stable: a second round trip writes the same bytes
    CHECK(parsed.meta() == db.meta());

    const TuningEntry* back = parsed.find(full.key);
    REQUIRE(back != nullptr);
    CHECK(back->config == full.config);
    CHECK(back->median_us == full.median_us);  // doubles survive exactly
    CHECK(back->spread_us == 0.1);
    CHECK(back->throughput == 3158.25);
    REQUIRE(back->runners_up.size() == 2);
    CHECK(back->runners_up[0].config == full.runners_up[0].config);
    CHECK(back->runners_up[1].median_us == 1e-7);
    CHECK(back->candidates_tried == 27);
    CHECK(back->candidates_failed == 3);
    CHECK(back->stability == 0.9);
    CHECK(back->nvrtc_version == "13.0");
    CHECK(back->tuned_at == "2026-11-22T12:46:40Z");
    CHECK(back->device == "NVIDIA H100 80GB HBM3");
    const TuningEntry* back_mixed = parsed.find(mixed.key);
    REQUIRE(back_mixed != nullptr);
    CHECK(back_mixed->key.dtype == "bf16->fp32");
    CHECK(back_mixed->throughput_unit == "GFLOP/s");
    CHECK(back_mixed->config.at("vec") == -1);
    CHECK(parsed.find(rank3.key) != nullptr);

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

    // Optional fields may be left out of a file; they take their defaults.
    TuningDb minimal = TuningDb::parse(db_text(json::array({good_entry_json()})), "minimal.json");
    REQUIRE(minimal.entries().size() == 1);
    const TuningEntry& m = minimal.entries()[0];
    CHECK(m.spread_us == 0);
    CHECK(m.throughput_unit == "GB/s");
    CHECK(m.runners_up.empty());
    CHECK(m.nvrtc_version.empty());
    CHECK(TuningDb::parse(R"({"format_version": 1})", "empty.json").entries().empty());
}

TEST_CASE("tuning database: malformed JSON is a FileError with the file name and line:column", "[tuning_db]") {
    // The fixture has a trailing comma before "]" on line 7, column 3.
    const fs::path path = fixture("syntax_trailing_comma.json");
    REQUIRE(fs::exists(path));
    try {
        (void)TuningDb::load(path);
        FAIL("load accepted a file with a JSON syntax error");
    } catch (const FileError& e) {
        CHECK_THAT(e.what(), ContainsSubstring(path.string() + ":7:3:"));
        CHECK_THAT(e.what(), ContainsSubstring("invalid JSON"));
    }

    // In-memory text: the error position is counted in lines and columns of the text.
    CHECK_THAT(file_error_of("{\n  \"format_version\": 1,\n  \"entries\": [}\n", "inline.json"),
               ContainsSubstring("inline.json:3:15:"));
    CHECK_THAT(file_error_of("", "empty.json"), ContainsSubstring("empty.json:1:1:"));
    CHECK_THAT(file_error_of("{\"format_version\": 1,", "cut.json"), ContainsSubstring("cut.json:1:22:"));
    // A number too large for a double has no position from the JSON parser; the message still
    // names where the literal is.
    CHECK_THAT(file_error_of("{\"format_version\": 1,\n \"x\": 1e400}", "overflow.json"),
               ContainsSubstring("overflow.json:2:7:"));

    // A file that cannot be read names its path.
    TempDir dir;
    try {
        (void)TuningDb::load(dir.path() / "does-not-exist.json");
        FAIL("load of a missing file did not throw");
    } catch (const FileError& e) {
        CHECK_THAT(e.what(), ContainsSubstring("does-not-exist.json"));
    }
}

TEST_CASE("tuning database: entries with fields of the wrong type are rejected by index and field", "[tuning_db]") {
    const fs::path path = fixture("entry_field_errors.json");
    LogCapture log(spdlog::level::warn);
    TuningDb db = TuningDb::load(path);

    // Entries 0 and 5 are well formed and load.
    REQUIRE(db.entries().size() == 2);
    CHECK(db.find({"rmsnorm", {64, 4096}, "bf16", "", "sm_90a", "h1"}) != nullptr);
    CHECK(db.find({"softmax", {128, 1024}, "fp32", "", "sm_90a", "h2"}) != nullptr);
    CHECK(db.meta().arch == "sm_90a");

    const std::vector<std::pair<size_t, std::string>> expected = {
        {1, "entries[1].config.vec: expected integer, got string"},
        {2, "entries[2].shape[1]: -4096 is out of range"},
        {3, "entries[3].median_us: expected number, got string"},
        {4, "entries[4].op: missing"},
        {6, "entries[6].dtype: expected string, got integer"},
        {7, "entries[7].runners_up[0].median_us: missing"},
        {8, "entries[8].stability"},
        {9, "entries[9].template_hash: expected string, got null"},
        {10, "entries[10].shape: expected array, got string"},
    };
    REQUIRE(db.rejected().size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        CAPTURE(i, db.rejected()[i].reason);
        CHECK(db.rejected()[i].index == expected[i].first);
        CHECK(db.rejected()[i].source == path.string());
        CHECK_THAT(db.rejected()[i].reason, ContainsSubstring(expected[i].second));
    }
    // Each skipped entry is a warning naming the file and the entry.
    CHECK(log.count("skipping tuning entry") == expected.size());
    CHECK(log.count(path.string()) == expected.size());
    CHECK_THAT(log.text(), ContainsSubstring("entries[3].median_us"));
}

TEST_CASE("tuning database: each malformed field of an entry is named; the next entry still loads", "[tuning_db]") {
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

TEST_CASE("tuning database: a file that is not a tuning database is a FileError naming it", "[tuning_db]") {
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
        {R"({"format_version": 1, "metadata": []})", "metadata: expected object, got array"},
        {R"({"format_version": 1, "metadata": {"arch": 90}})", "metadata.arch: expected string, got integer"},
        {R"({"format_version": 1, "metadata": {"sources": "one"}})", "metadata.sources"},
        {R"({"format_version": 1, "metadata": {"sources": [1]}})", "metadata.sources"},
        {R"({"format_version": 1, "entries": {}})", "entries: expected a list, got object"},
        {R"({"format_version": 1, "entries": "none"})", "entries: expected a list, got string"},
    };
    for (const auto& [text, reason] : cases) {
        CAPTURE(text);
        const std::string message = file_error_of(text, "not-a-db.json");
        CHECK_THAT(message, ContainsSubstring("not-a-db.json"));
        CHECK_THAT(message, ContainsSubstring(reason));
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
}

TEST_CASE("tuning database: hostile input never crashes and fails only with FileError", "[tuning_db]") {
    LogCapture log(spdlog::level::warn);
    // A good entry with the raw JSON text `raw_value` (which may be invalid JSON) as `field`,
    // followed by a good neighbour entry.
    auto entry_with = [](const std::string& field, const std::string& raw_value) {
        json e = good_entry_json();
        e.erase(field);
        std::string text = e.dump();  // "{...}"
        text.insert(1, "\"" + field + "\": " + raw_value + (e.empty() ? "" : ","));
        return R"({"format_version": 1, "entries": [)" + text + "," + good_entry_json(128).dump() + "]}";
    };
    auto rejected_reason = [](const std::string& text) -> std::string {
        TuningDb db = TuningDb::parse(text, "hostile.json");
        REQUIRE(db.entries().size() == 1);  // the good neighbour
        REQUIRE(db.rejected().size() == 1);
        return db.rejected()[0].reason;
    };

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
        CHECK_FALSE(survives(deep));                          // top level is not an object
        CHECK_FALSE(survives(std::string(depth, '[')));       // never closed
        CHECK_FALSE(survives(std::string(depth, '{')));
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
        std::string with_nul = "{\"format_version\": 1,";
        with_nul += '\0';
        with_nul += " \"entries\": []}";
        CHECK_FALSE(survives(with_nul));
        CHECK_FALSE(survives("\xef\xbb"));
        CHECK(survives("\xef\xbb\xbf{\"format_version\": 1}"));  // a byte order mark is allowed
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
    }
}

TEST_CASE("tuning database: the validator rejects entries with a reason, the rest loads", "[tuning_db]") {
    json entries = json::array();
    for (long long rows : {64, 128, 256}) {
        json e = good_entry_json(rows);
        e["config"]["vec"] = rows == 128 ? 16 : 8;
        entries.push_back(e);
    }
    entries.push_back("malformed");  // never reaches the validator
    int calls = 0;
    tileops::EntryValidator validator = [&](const TuningEntry& e) -> std::optional<std::string> {
        ++calls;
        if (e.config.at("vec") > 8) return "vec 16 is wider than 16 bytes";
        return std::nullopt;
    };
    LogCapture log(spdlog::level::warn);
    TuningDb db = TuningDb::parse(db_text(entries), "validated.json", validator);
    CHECK(calls == 3);
    REQUIRE(db.entries().size() == 2);
    CHECK(db.entries()[0].key.shape[0] == 64);
    CHECK(db.entries()[1].key.shape[0] == 256);
    REQUIRE(db.rejected().size() == 2);
    CHECK(db.rejected()[0].index == 1);
    CHECK_THAT(db.rejected()[0].reason, ContainsSubstring("entries[1]"));
    CHECK_THAT(db.rejected()[0].reason, ContainsSubstring("rmsnorm 128x4096 bf16 sm_90a"));
    CHECK_THAT(db.rejected()[0].reason, ContainsSubstring("vec 16 is wider than 16 bytes"));
    CHECK(db.rejected()[1].index == 3);
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

    // load() passes the validator on.
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

TEST_CASE("tuning database: upsert keeps the faster entry and refuses entries the format cannot hold", "[tuning_db]") {
    TuningDb db;
    TuningEntry slow = entry_of("rmsnorm", {1024, 4096}, 20.0, {{"vec", 4}});
    slow.device = "slow GPU";
    TuningEntry fast = slow;
    fast.median_us = 10.0;
    fast.config = {{"vec", 8}};
    fast.device = "fast GPU";

    db.upsert(slow);
    db.upsert(fast);
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
    TuningEntry nan_time = slow;
    nan_time.median_us = std::numeric_limits<double>::quiet_NaN();
    CHECK(tileops::better_entry(slow, nan_time));
    CHECK_FALSE(tileops::better_entry(nan_time, slow));

    // What parse would refuse, upsert refuses, and the database is unchanged.
    const std::vector<std::pair<const char*, std::function<void(TuningEntry&)>>> invalid = {
        {"empty op", [](TuningEntry& e) { e.key.op.clear(); }},
        {"rank 0", [](TuningEntry& e) { e.key.shape.clear(); }},
        {"rank 9", [](TuningEntry& e) { e.key.shape.assign(9, 2); }},
        {"zero dimension", [](TuningEntry& e) { e.key.shape = {0, 4096}; }},
        {"negative dimension", [](TuningEntry& e) { e.key.shape = {-8, 4096}; }},
        {"NaN time", [](TuningEntry& e) { e.median_us = std::numeric_limits<double>::quiet_NaN(); }},
        {"infinite time", [](TuningEntry& e) { e.median_us = std::numeric_limits<double>::infinity(); }},
        {"negative time", [](TuningEntry& e) { e.median_us = -1; }},
        {"negative spread", [](TuningEntry& e) { e.spread_us = -0.5; }},
        {"empty config", [](TuningEntry& e) { e.config.clear(); }},
        {"config value too large", [](TuningEntry& e) { e.config["vec"] = 1LL << 40; }},
        {"stability above 1", [](TuningEntry& e) { e.stability = 1.5; }},
        {"negative candidates", [](TuningEntry& e) { e.candidates_tried = -1; }},
        {"NaN runner-up", [](TuningEntry& e) { e.runners_up = {{{{"vec", 2}}, std::nan("")}}; }},
        {"op too long", [](TuningEntry& e) { e.key.op = std::string(5000, 'o'); }},
    };
    const TuningDb before = db;
    for (const auto& [what, breaks] : invalid) {
        CAPTURE(what);
        TuningEntry bad = entry_of("layernorm", {8, 8}, 1.0);
        breaks(bad);
        CHECK_THROWS_AS(db.upsert(bad), InvalidArgument);
    }
    CHECK(db == before);
}

TEST_CASE("tuning database: nearest picks the closest shape in log2 space within the distance", "[tuning_db]") {
    TuningDb db;
    db.upsert(entry_of("rmsnorm", {1024, 4096}, 1.0, {{"id", 1}}));
    db.upsert(entry_of("rmsnorm", {4096, 4096}, 1.0, {{"id", 2}}));
    db.upsert(entry_of("rmsnorm", {256, 1024}, 1.0, {{"id", 3}}));
    TuningKey key = db.entries()[0].key;

    auto nearest_id = [&](std::vector<long long> shape, double max_distance) -> std::optional<long long> {
        TuningKey k = key;
        k.shape = std::move(shape);
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
    TuningKey k3000 = key;
    k3000.shape = {3000, 4096};
    auto near = db.nearest(k3000, 1.0);
    REQUIRE(near);
    CHECK(near->first->config.at("id") == 2);
    CHECK_THAT(near->second, WithinAbs(std::log2(4096.0 / 3000.0), 1e-12));

    // Both dimensions count: sqrt(1^2 + 1^2) from id 3 at 512x2048.
    TuningKey k512 = key;
    k512.shape = {512, 2048};
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
    CHECK(nearest_id({0, 4096}, 100.0) == std::nullopt);   // a dimension < 1 has no nearest entry
    CHECK(nearest_id({-4, 4096}, 100.0) == std::nullopt);

    // accept() refuses the nearest: the next one comes.
    TuningKey k2048 = key;
    k2048.shape = {2048, 4096};
    std::vector<long long> asked;
    auto second = db.nearest(k2048, 1.0, [&](const TuningEntry& e) {
        asked.push_back(e.config.at("id"));
        return e.config.at("id") != 1;
    });
    REQUIRE(second);
    CHECK(second->first->config.at("id") == 2);
    CHECK(asked == std::vector<long long>{1, 2});
    CHECK_FALSE(db.nearest(k2048, 1.0, [](const TuningEntry&) { return false; }));

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
    CHECK(std::isinf(TuningDb::shape_distance({1, 2}, {1, 2, 3})));
    CHECK(std::isinf(TuningDb::shape_distance({0, 2}, {1, 2})));
}

TEST_CASE("tuning database: merge is commutative and idempotent, the faster entry wins, archs must agree",
          "[tuning_db]") {
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

    // Different archs in the metadata: refused, naming both.
    TuningDb other = b;
    other.meta().arch = "sm_80";
    try {
        (void)TuningDb::merge(a, other);
        FAIL("merge of sm_90a and sm_80 databases did not throw");
    } catch (const InvalidArgument& e) {
        CHECK_THAT(e.what(), ContainsSubstring("sm_90a"));
        CHECK_THAT(e.what(), ContainsSubstring("sm_80"));
    }
    CHECK_THROWS_AS(TuningDb::merge(other, a), InvalidArgument);
    TuningDb sm90 = b;
    sm90.meta().arch = "sm_90";  // not the same arch as sm_90a
    CHECK_THROWS_AS(TuningDb::merge(a, sm90), InvalidArgument);
    TuningDb no_arch = b;
    no_arch.meta().arch.clear();
    CHECK_NOTHROW(TuningDb::merge(a, no_arch));
}

TEST_CASE("tuning database: save creates the file and merges into an existing one", "[tuning_db]") {
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
    // No temporary files are left next to the database.
    for (const auto& file : fs::directory_iterator(path.parent_path()))
        CHECK((file.path() == path || file.path().extension() == ".lock"));
}

TEST_CASE("tuning database: save refuses to overwrite a file it cannot use and leaves it unchanged", "[tuning_db]") {
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

TEST_CASE("tuning database: processes saving into one file at the same moment lose nothing", "[tuning_db]") {
    const int processes = GENERATE(2, 8);
    CAPTURE(processes);
    constexpr int kSaves = 4;           // saves per process
    constexpr int kEntriesPerSave = 2;  // distinct entries per save
    TempDir dir;
    const fs::path path = dir.path() / "shared.json";

    int release[2];
    REQUIRE(::pipe(release) == 0);
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p) {
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            int code = 0;
            try {
                ::close(release[1]);
                char byte;
                ssize_t got;
                do got = ::read(release[0], &byte, 1);  // blocks until the parent closes its end
                while (got < 0 && errno == EINTR);
                for (int s = 0; s < kSaves; ++s) {
                    TuningDb mine;
                    mine.meta().arch = "sm_90a";
                    mine.meta().sources = {"process " + std::to_string(p)};
                    for (int k = 0; k < kEntriesPerSave; ++k)
                        mine.upsert(entry_of("rmsnorm", {p + 1, 1024LL * (s * kEntriesPerSave + k + 1)}, 1.0 + p,
                                             {{"process", p}}));
                    // Every process also saves one shared key; the fastest (process 0) must win.
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
    CHECK(result.entries().size() == static_cast<size_t>(processes * kSaves * kEntriesPerSave + 1));
    for (int p = 0; p < processes; ++p)
        for (int n = 1; n <= kSaves * kEntriesPerSave; ++n) {
            const TuningEntry* e = result.find(entry_of("rmsnorm", {p + 1, 1024LL * n}, 0).key);
            CAPTURE(p, n);
            REQUIRE(e != nullptr);
            CHECK(e->config.at("process") == p);
        }
    const TuningEntry* shared = result.find(entry_of("softmax", {4096, 4096}, 0).key);
    REQUIRE(shared != nullptr);
    CHECK(shared->median_us == 100.0);
    CHECK(shared->config.at("process") == 0);
    CHECK(result.meta().sources.size() == static_cast<size_t>(processes));
    CHECK(result.meta().arch == "sm_90a");
}
