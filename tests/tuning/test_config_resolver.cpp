// ConfigResolver: the lookup order (memory, user databases, shipped databases of the arch, nearest
// tuned shape, heuristic), stale and invalid entries falling through and being reported once, and
// where the user databases come from. CPU only: databases are written into temporary directories.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "util/log.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tuning/config_choice.hpp"

namespace {

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
using tileops::tuning::ConfigChoice;
using tileops::tuning::ConfigResolver;
using tileops::tuning::ConfigSource;
using tileops::tuning::ResolverOptions;

constexpr const char* kArch = "sm_90a";
constexpr const char* kNvrtc = "13.0";
constexpr const char* kHash = "template-hash-now";

TuningKey key_of(const std::string& op, std::vector<long long> shape) {
    return TuningKey{op, std::move(shape), "bf16", "", kArch, kHash};
}

// An entry whose config carries `tag`, so a test can tell which entry a choice came from.
TuningEntry tagged(const TuningKey& key, long long tag, double median_us = 10.0) {
    TuningEntry e;
    e.key = key;
    e.config = {{"tag", tag}, {"vec", 8}};
    e.median_us = median_us;
    e.nvrtc_version = kNvrtc;
    e.device = "Test GPU";
    e.tuned_at = "2026-11-22T00:00:00Z";
    return e;
}

// Writes a database file with the given metadata arch / NVRTC / GPU model and entries; returns its path.
std::string write_db(const fs::path& path, const std::vector<TuningEntry>& entries, const std::string& arch = kArch,
                     const std::string& nvrtc = kNvrtc, const std::string& gpu_name = "") {
    TuningDb db;
    db.meta().arch = arch;
    db.meta().nvrtc_version = nvrtc;
    db.meta().gpu_name = gpu_name;
    for (const TuningEntry& e : entries) db.upsert(e);
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::trunc);
    out << db.to_json();
    out.close();
    REQUIRE(out.good());
    return path.string();
}

ResolverOptions options_with(std::vector<std::string> user_dbs, std::vector<std::string> shipped_dirs) {
    ResolverOptions options;
    options.arch = kArch;
    options.nvrtc_version = kNvrtc;
    options.user_dbs = std::move(user_dbs);
    options.shipped_dirs = std::move(shipped_dirs);
    options.max_distance = 1.0;
    return options;
}

// The heuristic every test uses: a config no database holds, counting its calls.
struct Heuristic {
    int calls = 0;
    std::function<Config()> fn() {
        return [this] {
            ++calls;
            return Config{{"tag", 0}, {"heuristic", 1}};
        };
    }
};

// Accepts configs with vec <= 8 (what a 16-byte vector of bf16 allows).
std::optional<std::string> vec_at_most_8(const TuningEntry& e) {
    if (e.config.count("vec") && e.config.at("vec") > 8)
        return "vec = " + std::to_string(e.config.at("vec")) + " is wider than 16 bytes";
    return std::nullopt;
}

long long tag_of(const ConfigChoice& choice) { return choice.config.at("tag"); }

// How many lines of `lines` contain `needle`.
size_t lines_with(const std::vector<std::string>& lines, std::string_view needle) {
    size_t n = 0;
    for (const std::string& line : lines) n += line.find(needle) != std::string::npos;
    return n;
}

}  // namespace

TEST_CASE("config resolver: memory, then user databases, shipped databases of the arch, nearest, heuristic",
          "[resolver]") {
    TempDir dir;
    ScopedEnv no_env_dbs("TILEOPS_TUNING_DB", "");
    const TuningKey k = key_of("rmsnorm", {1024, 4096});
    const TuningKey only_user2 = key_of("layernorm", {64, 512});
    const TuningKey only_other_arch_file = key_of("softmax", {32, 32});
    const TuningKey only_shipped = key_of("softmax", {256, 1024});

    const std::string user1 = write_db(dir.path() / "user1.json", {tagged(k, 2), tagged(key_of("rmsnorm", {1024, 8192}), 20)});
    const std::string user2 = write_db(dir.path() / "user2.json", {tagged(k, 3), tagged(only_user2, 30)});
    const fs::path shipped = dir.path() / "shipped";
    const std::string shipped_file =
        write_db(shipped / "h100.json", {tagged(k, 4), tagged(only_shipped, 40), tagged(key_of("rmsnorm", {1024, 16384}), 41)});
    // Another arch's shipped file is ignored, even where its entries would match the key.
    write_db(shipped / "a100.json", {tagged(k, 5), tagged(only_other_arch_file, 50)}, "sm_80");
    // Files that are not databases of this arch do not stop the lookup.
    std::ofstream(shipped / "notes.txt") << "not a database";
    std::ofstream(shipped / "broken.json") << "{ this is not json";

    Heuristic heuristic;
    LogCapture log(spdlog::level::warn);

    SECTION("memory comes first") {
        ConfigResolver resolver(options_with({user1, user2}, {shipped.string()}));
        resolver.remember(tagged(k, 1));
        const ConfigChoice c = resolver.choose(k, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::memory);
        CHECK(tag_of(c) == 1);
        CHECK(c.origin.empty());
        CHECK(c.distance == 0);
        CHECK_FALSE(c.explanation.empty());
        // A key the memory does not hold goes on to the databases.
        CHECK(resolver.choose(only_user2, heuristic.fn(), vec_at_most_8).source == ConfigSource::user_db);
        CHECK(heuristic.calls == 0);
        // Memory is keyed by the whole key: another template hash does not match it.
        TuningKey other_hash = k;
        other_hash.template_hash = "template-hash-other";
        CHECK(resolver.choose(other_hash, heuristic.fn(), vec_at_most_8).source != ConfigSource::memory);
    }

    SECTION("user databases, earlier files first") {
        ConfigResolver resolver(options_with({user1, user2}, {shipped.string()}));
        const ConfigChoice c = resolver.choose(k, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::user_db);
        CHECK(tag_of(c) == 2);
        CHECK(c.origin == user1);
        CHECK_THAT(c.explanation, ContainsSubstring("Test GPU"));
        const ConfigChoice second = resolver.choose(only_user2, heuristic.fn(), vec_at_most_8);
        CHECK(second.source == ConfigSource::user_db);
        CHECK(tag_of(second) == 30);
        CHECK(second.origin == user2);
        ConfigResolver reversed(options_with({user2, user1}, {shipped.string()}));
        CHECK(tag_of(reversed.choose(k, heuristic.fn(), vec_at_most_8)) == 3);
        // A shipped-only key still comes from the shipped database.
        const ConfigChoice from_shipped = resolver.choose(only_shipped, heuristic.fn(), vec_at_most_8);
        CHECK(from_shipped.source == ConfigSource::shipped_db);
        CHECK(from_shipped.origin == shipped_file);
        CHECK(heuristic.calls == 0);
    }

    SECTION("the shipped database of the resolver's arch; other archs' files are ignored") {
        ConfigResolver resolver(options_with({}, {shipped.string()}));
        const ConfigChoice c = resolver.choose(k, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::shipped_db);
        CHECK(tag_of(c) == 4);
        CHECK(c.origin == shipped_file);
        const ConfigChoice other = resolver.choose(only_other_arch_file, heuristic.fn(), vec_at_most_8);
        CHECK(other.source == ConfigSource::heuristic);
        CHECK(heuristic.calls == 1);
        // The broken shipped file was skipped with a warning naming it.
        CHECK(log.count("broken.json") >= 1);
        // Two shipped directories: the first holding a file name wins.
        const fs::path second_dir = dir.path() / "shipped-copy";
        write_db(second_dir / "h100.json", {tagged(k, 6)});
        ConfigResolver two_dirs(options_with({}, {second_dir.string(), shipped.string()}));
        CHECK(tag_of(two_dirs.choose(k, heuristic.fn(), vec_at_most_8)) == 6);
        CHECK(two_dirs.choose(only_shipped, heuristic.fn(), vec_at_most_8).source == ConfigSource::heuristic);
    }

    SECTION("the nearest tuned shape, over user and shipped databases") {
        ConfigResolver resolver(options_with({user1, user2}, {shipped.string()}));
        // 2048x4096 is one factor of two from 1024x4096 in user1, user2 and shipped: the earliest wins.
        const ConfigChoice c = resolver.choose(key_of("rmsnorm", {2048, 4096}), heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::nearest);
        CHECK(tag_of(c) == 2);
        CHECK(c.origin == user1);
        CHECK_THAT(c.distance, WithinAbs(1.0, 1e-12));
        CHECK_THAT(c.explanation, ContainsSubstring("rmsnorm 1024x4096 bf16 sm_90a"));
        // 1024x12288: user1's 1024x8192 is log2(1.5) = 0.58 away, the shipped 1024x16384 only
        // log2(4/3) = 0.42: the closer one wins whatever its database.
        const ConfigChoice closer = resolver.choose(key_of("rmsnorm", {1024, 12288}), heuristic.fn(), vec_at_most_8);
        CHECK(closer.source == ConfigSource::nearest);
        CHECK(tag_of(closer) == 41);
        CHECK(closer.origin == shipped_file);
        CHECK_THAT(closer.distance, WithinAbs(std::log2(16384.0 / 12288.0), 1e-12));
        // Shipped only.
        const ConfigChoice softmax = resolver.choose(key_of("softmax", {256, 1448}), heuristic.fn(), vec_at_most_8);
        CHECK(softmax.source == ConfigSource::nearest);
        CHECK(tag_of(softmax) == 40);
        CHECK_THAT(softmax.distance, WithinAbs(std::log2(1448.0 / 1024.0), 1e-12));
        // Same shape, other flags or dtype: not near at all.
        TuningKey residual = key_of("rmsnorm", {2048, 4096});
        residual.flags = "residual";
        CHECK(resolver.choose(residual, heuristic.fn(), vec_at_most_8).source == ConfigSource::heuristic);
        TuningKey fp16 = key_of("rmsnorm", {2048, 4096});
        fp16.dtype = "fp16";
        CHECK(resolver.choose(fp16, heuristic.fn(), vec_at_most_8).source == ConfigSource::heuristic);
        CHECK(heuristic.calls == 2);
    }

    SECTION("the heuristic when nothing is near") {
        ConfigResolver resolver(options_with({user1, user2}, {shipped.string()}));
        const ConfigChoice c = resolver.choose(key_of("rmsnorm", {8, 128}), heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::heuristic);
        CHECK(c.config == Config{{"tag", 0}, {"heuristic", 1}});
        CHECK(c.origin.empty());
        CHECK(c.distance == 0);
        CHECK_FALSE(c.explanation.empty());
        CHECK(heuristic.calls == 1);
        // No heuristic given: an empty config, still from the heuristic.
        CHECK(resolver.choose(key_of("rmsnorm", {8, 128}), {}, vec_at_most_8).config.empty());
    }

    SECTION("the maximum distance: options, TILEOPS_TUNING_MAX_DISTANCE, then 1.0") {
        const TuningKey near2 = key_of("rmsnorm", {2048, 4096});  // distance 1 from k
        ResolverOptions tight = options_with({user1}, {shipped.string()});
        tight.max_distance = 0.5;
        ConfigResolver tight_resolver(tight);
        CHECK(tight_resolver.choose(near2, heuristic.fn(), vec_at_most_8).source == ConfigSource::heuristic);

        ResolverOptions from_env = options_with({user1}, {shipped.string()});
        from_env.max_distance = -1;
        {
            ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", "2.5");
            ConfigResolver resolver(from_env);
            CHECK(resolver.options().max_distance == 2.5);
            const ConfigChoice c = resolver.choose(key_of("rmsnorm", {4096, 4096}), heuristic.fn(), vec_at_most_8);
            CHECK(c.source == ConfigSource::nearest);
            CHECK_THAT(c.distance, WithinAbs(2.0, 1e-12));
        }
        {
            ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", "");
            ConfigResolver resolver(from_env);
            CHECK(resolver.options().max_distance == 1.0);
            CHECK(resolver.choose(key_of("rmsnorm", {4096, 4096}), heuristic.fn(), vec_at_most_8).source ==
                  ConfigSource::heuristic);
        }
        for (const auto& [text, value] : {std::pair{"inf", std::numeric_limits<double>::infinity()}, {"1e3", 1000.0}, {".5", 0.5}}) {
            ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", text);
            CHECK(ConfigResolver(from_env).options().max_distance == value);
        }
        for (const char* bad : {"far", "-1", "1.0x", "nan", "0x10", " 1", "+1", "1e", "infinity"}) {
            CAPTURE(bad);
            ScopedEnv env("TILEOPS_TUNING_MAX_DISTANCE", bad);
            CHECK_THROWS_AS(ConfigResolver(from_env), InvalidArgument);
        }
        ResolverOptions nan_option = options_with({user1}, {shipped.string()});
        nan_option.max_distance = std::numeric_limits<double>::quiet_NaN();
        CHECK_THROWS_AS(ConfigResolver(nan_option), InvalidArgument);
    }

    CHECK(tileops::tuning::to_string(ConfigSource::memory) == "memory");
    CHECK(tileops::tuning::to_string(ConfigSource::user_db) == "user database");
    CHECK(tileops::tuning::to_string(ConfigSource::shipped_db) == "shipped database");
    CHECK(tileops::tuning::to_string(ConfigSource::nearest) == "nearest tuned shape");
    CHECK(tileops::tuning::to_string(ConfigSource::heuristic) == "heuristic");
}

TEST_CASE("config resolver: stale entries are never used, fall through, and are reported exactly once", "[resolver]") {
    TempDir dir;
    const TuningKey old_template = key_of("rmsnorm", {1024, 4096});
    const TuningKey old_nvrtc = key_of("rmsnorm", {2048, 4096});
    const TuningKey fine = key_of("layernorm", {512, 512});
    const TuningKey old_nvrtc_by_file = key_of("softmax", {64, 64});
    const TuningKey other_arch_file = key_of("gelu", {8, 8});
    const TuningKey only_stale_near = key_of("silu", {64, 64});

    TuningEntry stale_template = tagged(old_template, 11);
    stale_template.key.template_hash = "template-hash-before";
    TuningEntry stale_nvrtc = tagged(old_nvrtc, 12);
    stale_nvrtc.nvrtc_version = "12.8";
    TuningEntry good = tagged(fine, 13);
    good.nvrtc_version.clear();  // the file's metadata says 13.0
    TuningEntry stale_near = tagged(only_stale_near, 16);
    stale_near.nvrtc_version = "12.8";
    const std::string user = write_db(dir.path() / "user.json", {stale_template, stale_nvrtc, good, stale_near});
    TuningEntry by_file = tagged(old_nvrtc_by_file, 14);
    by_file.nvrtc_version.clear();  // metadata: 12.4
    // An entry that names this NVRTC itself is not stale in a file whose metadata names another.
    const TuningKey own_version = key_of("add", {4096, 64});
    const std::string user_old = write_db(dir.path() / "user-nvrtc-12.4.json", {by_file, tagged(own_version, 17)}, kArch, "12.4");
    const std::string user_sm80 = write_db(dir.path() / "user-sm80.json", {tagged(other_arch_file, 15)}, "sm_80");
    const fs::path shipped = dir.path() / "shipped";
    const std::string shipped_file =
        write_db(shipped / "db.json", {tagged(old_template, 21), tagged(old_nvrtc, 22), tagged(old_nvrtc_by_file, 24),
                                       tagged(other_arch_file, 25)});

    LogCapture log(spdlog::level::warn);
    Heuristic heuristic;
    ConfigResolver resolver(options_with({user, user_old, user_sm80}, {shipped.string()}));

    for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        const ConfigChoice a = resolver.choose(old_template, heuristic.fn(), vec_at_most_8);
        CHECK(a.source == ConfigSource::shipped_db);
        CHECK(tag_of(a) == 21);
        CHECK(a.origin == shipped_file);
        const ConfigChoice b = resolver.choose(old_nvrtc, heuristic.fn(), vec_at_most_8);
        CHECK(b.source == ConfigSource::shipped_db);
        CHECK(tag_of(b) == 22);
        const ConfigChoice c = resolver.choose(fine, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::user_db);
        CHECK(tag_of(c) == 13);
        CHECK(c.origin == user);
        const ConfigChoice d = resolver.choose(old_nvrtc_by_file, heuristic.fn(), vec_at_most_8);
        CHECK(d.source == ConfigSource::shipped_db);
        CHECK(tag_of(d) == 24);
        const ConfigChoice own = resolver.choose(own_version, heuristic.fn(), vec_at_most_8);
        CHECK(own.source == ConfigSource::user_db);
        CHECK(tag_of(own) == 17);
        CHECK(own.origin == user_old);
        const ConfigChoice e = resolver.choose(other_arch_file, heuristic.fn(), vec_at_most_8);
        CHECK(e.source == ConfigSource::shipped_db);
        CHECK(tag_of(e) == 25);
        // A stale entry is not a nearest shape either.
        const ConfigChoice f = resolver.choose(key_of("silu", {128, 64}), heuristic.fn(), vec_at_most_8);
        CHECK(f.source == ConfigSource::heuristic);
        // Nearest over a stale exact entry: 2048x4096 is stale in user.json, but the shipped
        // 2048x4096 is a good nearest shape for 4096x4096.
        const ConfigChoice g = resolver.choose(key_of("rmsnorm", {4096, 4096}), heuristic.fn(), vec_at_most_8);
        CHECK(g.source == ConfigSource::nearest);
        CHECK(tag_of(g) == 22);
        CHECK(g.origin == shipped_file);

        const std::vector<std::string> stale = resolver.stale_entries();
        CAPTURE(stale);
        REQUIRE(stale.size() == 5);
        CHECK(lines_with(stale, user + ": rmsnorm 1024x4096 bf16 sm_90a: stale: tuned with another version of the kernel template") == 1);
        CHECK(lines_with(stale, user + ": rmsnorm 2048x4096 bf16 sm_90a: stale: tuned with NVRTC 12.8, this is 13.0") == 1);
        CHECK(lines_with(stale, user_old + ": softmax 64x64 bf16 sm_90a: stale: tuned with NVRTC 12.4") == 1);
        CHECK(lines_with(stale, user_sm80 + ": gelu 8x8 bf16 sm_90a: stale: the database is for sm_80") == 1);
        CHECK(lines_with(stale, user + ": silu 64x64 bf16 sm_90a: stale: tuned with NVRTC 12.8") == 1);
        CHECK(lines_with(stale, "layernorm") == 0);
        CHECK(lines_with(stale, shipped_file) == 0);
    }
    // One warning per stale entry, however often it was passed over.
    CHECK(log.count("ignoring tuning entry") == 5);
    CHECK(heuristic.calls == 2);

    // A resolver without an NVRTC version to compare does not call entries stale for it.
    ResolverOptions no_version = options_with({user}, {shipped.string()});
    no_version.nvrtc_version.clear();
    ConfigResolver lenient(no_version);
    CHECK(tag_of(lenient.choose(old_nvrtc, heuristic.fn(), vec_at_most_8)) == 12);
    CHECK(lines_with(lenient.stale_entries(), "NVRTC") == 0);
}

TEST_CASE("config resolver: this GPU's fleet database first, then the nearest other fleet's, said so", "[resolver]") {
    TempDir dir;
    ScopedEnv no_env_dbs("TILEOPS_TUNING_DB", "");
    constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";
    constexpr const char* kH200 = "NVIDIA H200";
    const TuningKey both = key_of("softmax", {256, 1024});
    const TuningKey h100_only = key_of("gelu", {8, 4096});
    const TuningKey h200_near = key_of("rmsnorm", {1024, 4096});    // the H200 database: 1024x4096
    const TuningKey h100_exact = key_of("rmsnorm", {2048, 4096});   // the H100 database: exactly this
    const TuningKey h100_near_only = key_of("layernorm", {4096, 4096});  // only the H100's 2048x4096 near
    auto fleet_entry = [](const TuningKey& key, long long tag, const char* gpu) {
        TuningEntry e = tagged(key, tag);
        e.device = gpu;
        return e;
    };
    // File names in the other order than the fleets', so that the order is not the files'.
    const fs::path shipped = dir.path() / "shipped";
    auto write_fleet = [&](const std::string& name, const char* gpu, const std::vector<TuningEntry>& entries) {
        return write_db(shipped / name, entries, kArch, kNvrtc, gpu);
    };
    const std::string h200_file = write_fleet("a-h200.json", kH200, {fleet_entry(both, 2, kH200), fleet_entry(h200_near, 6, kH200)});
    const std::string h100_file =
        write_fleet("z-h100-sxm.json", kH100,
                    {fleet_entry(both, 1, kH100), fleet_entry(h100_only, 4, kH100), fleet_entry(h100_exact, 8, kH100),
                     fleet_entry(key_of("layernorm", {2048, 4096}), 7, kH100)});
    auto resolver_for = [&](const std::string& gpu) {
        ResolverOptions options = options_with({}, {shipped.string()});
        options.gpu_name = gpu;
        return std::make_unique<ConfigResolver>(options);
    };
    Heuristic heuristic;

    SECTION("an H200 takes its own entries, and the H100's where it has none") {
        auto resolver = resolver_for(kH200);
        const ConfigChoice own = resolver->choose(both, heuristic.fn(), vec_at_most_8);
        CHECK(own.source == ConfigSource::shipped_db);
        CHECK(tag_of(own) == 2);
        CHECK(own.origin == h200_file);
        const ConfigChoice fallback = resolver->choose(h100_only, heuristic.fn(), vec_at_most_8);
        CHECK(fallback.source == ConfigSource::other_fleet_db);
        CHECK(tag_of(fallback) == 4);
        CHECK(fallback.origin == h100_file);
        CHECK_THAT(fallback.explanation, ContainsSubstring(std::string("tuned on ") + kH100) &&
                                             ContainsSubstring(std::string("no shipped database of the ") + kH200));
        CHECK(tileops::tuning::to_string(fallback.source) == "another GPU's shipped database");
        // A shape tuned exactly on the H100 beats a shape only near it on the H200.
        const ConfigChoice exact_elsewhere = resolver->choose(h100_exact, heuristic.fn(), vec_at_most_8);
        CHECK(exact_elsewhere.source == ConfigSource::other_fleet_db);
        CHECK(tag_of(exact_elsewhere) == 8);
        // Nearest: the H200's own first; the H100's only where the H200 has nothing near.
        const ConfigChoice near_own = resolver->choose(key_of("rmsnorm", {1024, 6144}), heuristic.fn(), vec_at_most_8);
        CHECK(near_own.source == ConfigSource::nearest);
        CHECK(tag_of(near_own) == 6);
        CHECK_THAT(near_own.explanation, !ContainsSubstring("no shipped database"));
        const ConfigChoice near_other = resolver->choose(h100_near_only, heuristic.fn(), vec_at_most_8);
        CHECK(near_other.source == ConfigSource::nearest);
        CHECK(tag_of(near_other) == 7);
        CHECK(near_other.origin == h100_file);
        CHECK_THAT(near_other.explanation, ContainsSubstring(std::string("tuned on ") + kH100) &&
                                               ContainsSubstring(std::string("no shipped database of the ") + kH200));
        CHECK(heuristic.calls == 0);
    }
    SECTION("an H100 takes its own database first, though another file sorts before it") {
        auto resolver = resolver_for(kH100);
        const ConfigChoice own = resolver->choose(both, heuristic.fn(), vec_at_most_8);
        CHECK(own.source == ConfigSource::shipped_db);
        CHECK(tag_of(own) == 1);
        // Its own fleet's nearest shape comes first, though the H200's is nearer: for 1100x4096 its
        // own 2048x4096 is at log2 distance 0.90, the H200's 1024x4096 at 0.10.
        const ConfigChoice near = resolver->choose(key_of("rmsnorm", {1100, 4096}), heuristic.fn(), vec_at_most_8);
        CHECK(near.source == ConfigSource::nearest);
        CHECK(tag_of(near) == 8);
    }
    SECTION("a GPU with no database of its own takes the nearest fleet's: an H100 PCIe the H100 SXM's") {
        auto resolver = resolver_for("NVIDIA H100 PCIe");
        const ConfigChoice c = resolver->choose(both, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::other_fleet_db);
        CHECK(tag_of(c) == 1);
        CHECK(c.origin == h100_file);
    }
    SECTION("without a GPU name every fleet is the same: the files in name order") {
        auto resolver = resolver_for("");
        const ConfigChoice c = resolver->choose(both, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::shipped_db);
        CHECK(tag_of(c) == 2);
        CHECK(resolver->choose(h100_only, heuristic.fn(), vec_at_most_8).source == ConfigSource::shipped_db);
    }
}

TEST_CASE("config resolver: entries the validator rejects are skipped for the next source", "[resolver]") {
    TempDir dir;
    const TuningKey k = key_of("rmsnorm", {1024, 4096});
    TuningEntry too_wide_user = tagged(k, 2);
    too_wide_user.config["vec"] = 16;
    TuningEntry near_too_wide = tagged(key_of("softmax", {1024, 1024}), 31);
    near_too_wide.config["vec"] = 16;
    const std::string user = write_db(dir.path() / "user.json",
                                      {too_wide_user, near_too_wide, tagged(key_of("softmax", {1024, 4096}), 32)});
    const fs::path shipped = dir.path() / "shipped";
    const std::string shipped_file = write_db(shipped / "db.json", {tagged(k, 4)});

    LogCapture log(spdlog::level::warn);
    Heuristic heuristic;
    ConfigResolver resolver(options_with({user}, {shipped.string()}));
    TuningEntry too_wide_memory = tagged(k, 1);
    too_wide_memory.config["vec"] = 32;
    resolver.remember(too_wide_memory);

    for (int round = 0; round < 2; ++round) {
        const ConfigChoice c = resolver.choose(k, heuristic.fn(), vec_at_most_8);
        CHECK(c.source == ConfigSource::shipped_db);
        CHECK(tag_of(c) == 4);
        CHECK(c.origin == shipped_file);
        // softmax 1024x1448: 1024x1024 (invalid) is 0.5 away, 1024x4096 is 1.5 away (beyond 1.0);
        // with max distance 1 nothing usable is near. 1024x2048 is 1.0 from both: the valid one wins.
        CHECK(resolver.choose(key_of("softmax", {1024, 1448}), heuristic.fn(), vec_at_most_8).source ==
              ConfigSource::heuristic);
        const ConfigChoice near = resolver.choose(key_of("softmax", {1024, 2048}), heuristic.fn(), vec_at_most_8);
        CHECK(near.source == ConfigSource::nearest);
        CHECK(tag_of(near) == 32);
        CHECK_THAT(near.distance, WithinAbs(1.0, 1e-12));
    }
    const std::vector<std::string> skipped = resolver.stale_entries();
    CAPTURE(skipped);
    REQUIRE(skipped.size() == 2);
    CHECK(lines_with(skipped, "memory: rmsnorm 1024x4096 bf16 sm_90a: invalid here: vec = 32 is wider than 16 bytes") == 1);
    CHECK(lines_with(skipped, user + ": rmsnorm 1024x4096 bf16 sm_90a: invalid here: vec = 16") == 1);
    // softmax 1024x1024 was only a nearest-shape candidate: its config not fitting another shape
    // says nothing against it, so it is skipped without a warning.
    CHECK(lines_with(skipped, "softmax 1024x1024") == 0);
    CHECK(log.count("ignoring tuning entry") == 2);

    // Without a validator the same entries are used.
    ConfigResolver trusting(options_with({user}, {shipped.string()}));
    trusting.remember(too_wide_memory);
    const ConfigChoice m = trusting.choose(k, heuristic.fn(), {});
    CHECK(m.source == ConfigSource::memory);
    CHECK(tag_of(m) == 1);

    // A validator that throws rejects the entry it was asked about.
    ConfigResolver wary(options_with({user}, {shipped.string()}));
    auto throwing = [](const TuningEntry& e) -> std::optional<std::string> {
        if (e.config.at("tag") == 2) throw std::runtime_error("cannot check tag 2");
        return std::nullopt;
    };
    const ConfigChoice w = wary.choose(k, heuristic.fn(), throwing);
    CHECK(w.source == ConfigSource::shipped_db);
    CHECK(lines_with(wary.stale_entries(), "validator failed: cannot check tag 2") == 1);
    CHECK(log.count("cannot check tag 2") == 1);  // a fault of the validator: warned, once
}

TEST_CASE("config resolver: TILEOPS_TUNING_DB lists the user databases when the options name none", "[resolver]") {
    TempDir dir;
    const TuningKey k = key_of("rmsnorm", {1024, 4096});
    const TuningKey only_b = key_of("softmax", {64, 64});
    const std::string a = write_db(dir.path() / "a.json", {tagged(k, 1)});
    const std::string b = write_db(dir.path() / "b.json", {tagged(k, 2), tagged(only_b, 3)});
    const std::string none = (dir.path() / "empty-shipped").string();
    Heuristic heuristic;

    {
        ScopedEnv env("TILEOPS_TUNING_DB", ":" + a + "::" + b + ":");
        ConfigResolver resolver(options_with({}, {none}));
        CHECK(resolver.options().user_dbs == std::vector<std::string>{a, b});
        const ConfigChoice first = resolver.choose(k, heuristic.fn(), vec_at_most_8);
        CHECK(first.source == ConfigSource::user_db);
        CHECK(first.origin == a);
        CHECK(tag_of(first) == 1);
        const ConfigChoice second = resolver.choose(only_b, heuristic.fn(), vec_at_most_8);
        CHECK(second.source == ConfigSource::user_db);
        CHECK(second.origin == b);
    }
    {
        // Databases named in the options win; the variable is not read (it names a missing file).
        ScopedEnv env("TILEOPS_TUNING_DB", (dir.path() / "missing.json").string());
        ConfigResolver resolver(options_with({b}, {none}));
        CHECK(resolver.options().user_dbs == std::vector<std::string>{b});
        const ConfigChoice c = resolver.choose(k, heuristic.fn(), vec_at_most_8);
        CHECK(c.origin == b);
        CHECK(tag_of(c) == 2);
    }
    {
        ScopedEnv env("TILEOPS_TUNING_DB", "");
        ConfigResolver resolver(options_with({}, {none}));
        CHECK(resolver.options().user_dbs.empty());
        CHECK(resolver.choose(k, heuristic.fn(), vec_at_most_8).source == ConfigSource::heuristic);
    }
}

TEST_CASE("config resolver: a user database that is missing or broken is a FileError", "[resolver]") {
    TempDir dir;
    const TuningKey k = key_of("rmsnorm", {1024, 4096});
    const std::string none = (dir.path() / "empty-shipped").string();
    const fs::path missing = dir.path() / "not-yet.json";
    Heuristic heuristic;

    ConfigResolver resolver(options_with({missing.string()}, {none}));
    try {
        (void)resolver.choose(k, heuristic.fn(), vec_at_most_8);
        FAIL("a missing user database was not an error");
    } catch (const FileError& e) {
        CHECK_THAT(e.what(), ContainsSubstring("not-yet.json"));
    }
    CHECK_THROWS_AS(resolver.choose(k, heuristic.fn(), vec_at_most_8), FileError);  // still missing
    CHECK(heuristic.calls == 0);
    // Once the file exists, the same resolver reads it.
    write_db(missing, {tagged(k, 7)});
    const ConfigChoice c = resolver.choose(k, heuristic.fn(), vec_at_most_8);
    CHECK(c.source == ConfigSource::user_db);
    CHECK(tag_of(c) == 7);

    // Through the environment too.
    {
        ScopedEnv env("TILEOPS_TUNING_DB", (dir.path() / "also-missing.json").string());
        ConfigResolver from_env(options_with({}, {none}));
        CHECK_THROWS_AS(from_env.choose(k, heuristic.fn(), vec_at_most_8), FileError);
    }

    // A user database that is not valid JSON names the file, line and column.
    const fs::path broken = dir.path() / "broken.json";
    std::ofstream(broken) << "{\n  \"format_version\": 1,\n  \"entries\": [\n}\n";
    ConfigResolver broken_resolver(options_with({broken.string()}, {none}));
    try {
        (void)broken_resolver.choose(k, heuristic.fn(), vec_at_most_8);
        FAIL("a broken user database was not an error");
    } catch (const FileError& e) {
        CHECK_THAT(e.what(), ContainsSubstring(broken.string() + ":4:1"));
    }
}

TEST_CASE("config resolver: each choice is logged at debug with the key, its source and file", "[resolver]") {
    TempDir dir;
    const TuningKey k = key_of("rmsnorm", {1024, 4096});
    const std::string user = write_db(dir.path() / "user.json", {tagged(k, 2)});
    LogCapture log(spdlog::level::debug);
    Heuristic heuristic;
    ConfigResolver resolver(options_with({user}, {(dir.path() / "empty-shipped").string()}));
    (void)resolver.choose(k, heuristic.fn(), vec_at_most_8);
    CHECK(log.lines_with({"debug", "rmsnorm 1024x4096 bf16 sm_90a", "user database", user}) == 1);
}

TEST_CASE("config resolver: many threads choosing and remembering at once get the right configs", "[resolver]") {
    TempDir dir;
    std::vector<TuningEntry> entries;
    for (int i = 0; i < 16; ++i) entries.push_back(tagged(key_of("rmsnorm", {1LL << i, 4096}), i));
    const std::string user = write_db(dir.path() / "user.json", entries);
    ResolverOptions options = options_with({user}, {(dir.path() / "empty-shipped").string()});
    options.max_distance = 0.5;
    ConfigResolver resolver(options);
    std::atomic<int> wrong{0}, heuristics{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 200; ++i) {
                const int row_log2 = (i + t) % 20;
                if (t == 0 && i % 10 == 0) resolver.remember(tagged(key_of("softmax", {1LL << row_log2}), 100));
                const ConfigChoice choice = resolver.choose(
                    key_of("rmsnorm", {1LL << row_log2, 4096}),
                    [&] {
                        heuristics.fetch_add(1);
                        return Config{{"tag", -1}};
                    },
                    {});
                const bool ok = row_log2 < 16 ? choice.source == ConfigSource::user_db && tag_of(choice) == row_log2
                                              : choice.source == ConfigSource::heuristic;
                if (!ok) wrong.fetch_add(1);
            }
        });
    for (std::thread& thread : threads) thread.join();
    CHECK(wrong.load() == 0);
    CHECK(heuristics.load() > 0);
}

TEST_CASE("the library logs through its own logger and leaves spdlog's default logger alone", "[tuning][logging]") {
    // An application's default logger, capturing everything at trace.
    std::ostringstream app_stream;
    const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
    auto app = std::make_shared<spdlog::logger>("app", std::make_shared<spdlog::sinks::ostream_sink_mt>(app_stream));
    app->set_level(spdlog::level::trace);
    spdlog::set_default_logger(app);

    tileops::util::configure_logging();
    CHECK(spdlog::default_logger()->level() == spdlog::level::trace);
    CHECK(spdlog::get("tileops").get() == &tileops::util::logger());

    // A broken file in the shipped directory is a warning: it reaches the library's logger only.
    TempDir dir;
    const fs::path shipped = dir.path() / "shipped";
    fs::create_directories(shipped);
    std::ofstream(shipped / "broken.json") << "{ this is not json";
    Heuristic heuristic;
    {
        LogCapture log(spdlog::level::warn);
        ConfigResolver resolver(options_with({}, {shipped.string()}));
        CHECK(resolver.choose(key_of("rmsnorm", {1024, 4096}), heuristic.fn(), vec_at_most_8).source ==
              ConfigSource::heuristic);
        CHECK(log.count("broken.json") >= 1);
    }
    spdlog::set_default_logger(previous);
    CHECK(app_stream.str().find("broken.json") == std::string::npos);
    CHECK(spdlog::default_logger()->level() == previous->level());
}
