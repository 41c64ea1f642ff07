// The zero-JIT contract without a GPU: TILEOPS_JIT's modes, the manifest a warn-mode builder
// writes of what it compiled on a miss, and the manifest reader facing hostile files.
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "jit/kernel_builder.hpp"
#include "jit/missed_kernels.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"

using Catch::Matchers::ContainsSubstring;
using tileops::jit::JitMode;
using tileops::jit::JitPolicy;
using tileops::jit::KernelBuilder;
using tileops::jit::MissedKernel;
using tileops::test::ScopedEnv;
using tileops::test::TempDir;

namespace {

const std::string kTemplate = "elementwise/elementwise.cuh";
const std::string kKernel = "tileops::elementwise_kernel<float, float, 2, 4, 1, 256>";
const std::string kOtherKernel = "tileops::elementwise_kernel<float, float, 4, 4, 1, 256>";

std::vector<std::string> lines_of(const std::filesystem::path& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

}  // namespace

TEST_CASE("TILEOPS_JIT chooses on, warn or off; TILEOPS_NO_COMPILE and allow_compile mean off", "[jit_policy]") {
    TempDir dir;
    ScopedEnv no_compile("TILEOPS_NO_COMPILE", ""), manifest("TILEOPS_JIT_MANIFEST", "");
    {
        ScopedEnv jit("TILEOPS_JIT", "");
        const JitPolicy policy = tileops::jit::jit_policy(dir.path(), true);
        CHECK(policy.mode == JitMode::on);
        CHECK(policy.manifest == dir.path() / "missed-kernels.jsonl");
        CHECK(tileops::jit::jit_policy(dir.path(), false).mode == JitMode::off);
    }
    for (auto [value, mode] : {std::pair{"on", JitMode::on}, {"warn", JitMode::warn}, {"off", JitMode::off}}) {
        ScopedEnv jit("TILEOPS_JIT", value);
        CHECK(tileops::jit::jit_policy(dir.path(), true).mode == mode);
    }
    {
        ScopedEnv jit("TILEOPS_JIT", "sometimes");
        CHECK_THROWS_WITH(tileops::jit::jit_policy(dir.path(), true),
                          ContainsSubstring("TILEOPS_JIT must be on, warn or off, got 'sometimes'"));
    }
    {
        ScopedEnv jit("TILEOPS_JIT", ""), off("TILEOPS_NO_COMPILE", "1");
        CHECK(tileops::jit::jit_policy(dir.path(), true).mode == JitMode::off);
    }
    {
        ScopedEnv jit("TILEOPS_JIT", "warn"), off("TILEOPS_NO_COMPILE", "1");
        CHECK_THROWS_AS(tileops::jit::jit_policy(dir.path(), true), tileops::InvalidArgument);
    }
    for (const char* value : {"false", "no", "off", "true", "2"}) {  // 0 or 1 only: "false" once meant off
        ScopedEnv jit("TILEOPS_JIT", ""), off("TILEOPS_NO_COMPILE", value);
        CHECK_THROWS_WITH(tileops::jit::jit_policy(dir.path(), true), ContainsSubstring("TILEOPS_NO_COMPILE must be 0 or 1"));
    }
    {
        ScopedEnv jit("TILEOPS_JIT", ""), off("TILEOPS_NO_COMPILE", "0");
        CHECK(tileops::jit::jit_policy(dir.path(), true).mode == JitMode::on);
    }
    {
        ScopedEnv jit("TILEOPS_JIT", "warn"), elsewhere("TILEOPS_JIT_MANIFEST", (dir.path() / "m.jsonl").string());
        CHECK(tileops::jit::jit_policy(dir.path(), true).manifest == dir.path() / "m.jsonl");
    }
}

TEST_CASE("a warn-mode builder records each kernel it compiles on a miss, once", "[jit_policy]") {
    TempDir dir;
    const std::filesystem::path manifest = dir.path() / "missed.jsonl";
    KernelBuilder builder(dir.path() / "cache", 0, JitPolicy{JitMode::warn, manifest});
    CHECK(builder.get(kTemplate, kKernel, "sm_80").compiled);
    CHECK_FALSE(builder.get(kTemplate, kKernel, "sm_80").compiled);  // a hit is not a miss
    REQUIRE(lines_of(manifest).size() == 1);
    // Another builder on the same cache finds it there: nothing to record.
    KernelBuilder other(dir.path() / "cache", 0, JitPolicy{JitMode::warn, manifest});
    CHECK_FALSE(other.get(kTemplate, kKernel, "sm_80").compiled);
    CHECK(other.get(kTemplate, kOtherKernel, "sm_80").compiled);
    REQUIRE(lines_of(manifest).size() == 2);

    std::vector<std::string> rejected;
    const std::vector<MissedKernel> kernels = tileops::jit::read_manifest(manifest, rejected);
    CHECK(rejected.empty());
    REQUIRE(kernels.size() == 2);
    CHECK(kernels[0].template_file == kTemplate);
    CHECK(kernels[0].arch == "sm_80");
    CHECK((kernels[0].name_expression == kKernel || kernels[1].name_expression == kKernel));

    // Off: a miss is a CacheMiss that says how to warm the cache.
    KernelBuilder serving(dir.path() / "empty", 0, JitPolicy{JitMode::off, {}});
    CHECK_THROWS_WITH(serving.get(kTemplate, kKernel, "sm_80"), ContainsSubstring("TILEOPS_JIT=off") &&
                                                                     ContainsSubstring("warm --manifest"));
    // And touches nothing: no directory, no lock file (a serving cache may be read-only).
    CHECK_FALSE(std::filesystem::exists(dir.path() / "empty"));
}

TEST_CASE("a manifest's malformed lines are rejected by line, the rest read once each", "[jit_policy]") {
    TempDir dir;
    const std::filesystem::path path = dir.path() / "hostile.jsonl";
    const std::string good = tileops::jit::manifest_line({kTemplate, kKernel, "sm_90a"});
    {
        std::ofstream out(path);
        out << good                                                              // 1
            << "\n"                                                              // 2: blank
            << "not json\n"                                                      // 3
            << "[1, 2]\n"                                                        // 4
            << R"({"template": "elementwise/elementwise.cuh", "arch": "sm_90a"})" << "\n"   // 5: no kernel
            << R"({"template": 7, "kernel": "k", "arch": "sm_90a"})" << "\n"     // 6
            << R"({"template": "../../etc/passwd", "kernel": "k", "arch": "sm_90a"})" << "\n"  // 7
            << R"({"template": "elementwise/elementwise.cuh", "kernel": "k\"); evil(", "arch": "sm_90a"})" << "\n"  // 8
            << R"({"template": "elementwise/elementwise.cuh", "kernel": ")" << std::string(5000, 'k')
            << R"(", "arch": "sm_90a"})" << "\n"                                 // 9
            << good;                                                             // 10: a duplicate
    }
    std::vector<std::string> rejected;
    const auto kernels = tileops::jit::read_manifest(path, rejected);
    REQUIRE(kernels.size() == 1);
    CHECK(kernels[0].name_expression == kKernel);
    REQUIRE(rejected.size() == 7);
    CHECK_THAT(rejected[0], ContainsSubstring("line 3: not a JSON object"));
    CHECK_THAT(rejected[1], ContainsSubstring("line 4: not a JSON object"));
    CHECK_THAT(rejected[2], ContainsSubstring("line 5: \"kernel\" must be a string"));
    CHECK_THAT(rejected[3], ContainsSubstring("line 6: \"template\" must be a string"));
    CHECK_THAT(rejected[4], ContainsSubstring("line 7: no kernel template '../../etc/passwd'"));
    CHECK_THAT(rejected[5], ContainsSubstring("line 8:"));
    CHECK_THAT(rejected[6], ContainsSubstring("line 9:"));

    // Not a regular file: refused, not read (a FIFO would block forever).
    CHECK_THROWS_AS(tileops::jit::read_manifest(dir.path(), rejected), tileops::FileError);
    // A manifest that is a link is not appended through.
    const std::filesystem::path target = dir.path() / "target.jsonl", link = dir.path() / "link.jsonl";
    std::filesystem::create_symlink(target, link);
    CHECK_THROWS_AS(tileops::jit::append_to_manifest(link, {kTemplate, kKernel, "sm_90a"}), tileops::FileError);
    CHECK_FALSE(std::filesystem::exists(target));
}

TEST_CASE("a manifest of a million bad lines reports the first hundred and counts the rest", "[jit_policy]") {
    // Each report once held hundreds of bytes for a two-byte line: 5 MB of "x" lines took 1.5 GB
    // in warm (3.7 GB with --json), a 256 MB manifest would have taken a hundred or more. A line
    // no kernel fits is refused before it is parsed into a tree tens of times its size.
    TempDir dir;
    const std::filesystem::path path = dir.path() / "bad_lines.jsonl";
    const std::string good = tileops::jit::manifest_line({kTemplate, kKernel, "sm_90a"});
    {
        std::ofstream out(path);
        out << std::string(200000, '[') << "\n";
        for (int i = 0; i < 1000000; ++i) out << "x\n";
        out << good;
    }
    std::vector<std::string> rejected;
    const auto kernels = tileops::jit::read_manifest(path, rejected);
    REQUIRE(kernels.size() == 1);
    CHECK(kernels[0].name_expression == kKernel);
    REQUIRE(rejected.size() == 101);
    CHECK_THAT(rejected[0], ContainsSubstring("line 1: 200000 bytes, longer than any kernel's line"));
    CHECK_THAT(rejected[1], ContainsSubstring("line 2: not a JSON object"));
    CHECK_THAT(rejected[99], ContainsSubstring("line 100: not a JSON object"));
    CHECK_THAT(rejected[100], ContainsSubstring("999901 more lines are not kernels either"));
}

TEST_CASE("2000 randomly mutated manifests read without a crash, only sound kernels kept", "[jit_policy][fuzz]") {
    TempDir dir;
    const std::filesystem::path path = dir.path() / "fuzzed.jsonl";
    const std::string valid = tileops::jit::manifest_line({kTemplate, kKernel, "sm_90a"}) +
                              tileops::jit::manifest_line({"rows/rmsnorm.cuh", "tileops::k<1>", "sm_80"});
    const std::string alphabet = "{}[],:\"\\ntk0123456789<>/ \n\xff";
    std::mt19937 random(1127);
    for (int round = 0; round < 2000; ++round) {
        std::string text = valid;
        const int edits = 1 + static_cast<int>(random() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = random() % text.size();
            switch (random() % 3) {
                case 0: text[at] = alphabet[random() % alphabet.size()]; break;
                case 1: text.erase(at, 1 + random() % 8); break;
                default: text.insert(at, 1, alphabet[random() % alphabet.size()]); break;
            }
            if (text.empty()) text = "{";
        }
        std::ofstream(path, std::ios::trunc) << text;
        std::vector<std::string> rejected;
        std::vector<MissedKernel> kernels;
        REQUIRE_NOTHROW(kernels = tileops::jit::read_manifest(path, rejected));
        CHECK(kernels.size() <= 2);
        for (const MissedKernel& k : kernels) {
            CHECK((k.template_file == kTemplate || k.template_file == "rows/rmsnorm.cuh"));
            CHECK(k.name_expression.find_first_of("\"\\\n") == std::string::npos);
        }
    }
}
