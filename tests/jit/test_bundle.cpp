// Fleet bundles without a GPU: what write_bundle writes reads back whole from anywhere; a kernel
// builder serves a bundle's kernels without compiling and without writing a byte; damaged and
// hostile bundles are refused by name (or their damaged kernels passed over), never a crash.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "jit/bundle.hpp"
#include "jit/kernel_builder.hpp"
#include "support/log_capture.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"

using Catch::Matchers::ContainsSubstring;
using tileops::FileError;
using tileops::jit::Bundle;
using tileops::jit::BundleContents;
using tileops::jit::JitMode;
using tileops::jit::JitPolicy;
using tileops::jit::KernelBuilder;
using tileops::test::LogCapture;
using tileops::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kTemplate = "elementwise/elementwise.cuh";
const std::string kKernel = "tileops::elementwise_kernel<float, float, 2, 4, 1, 256>";

std::string key_of(char c) { return std::string(64, c); }

BundleContents sample_contents() {
    BundleContents contents;
    contents.nvrtc_version = "13.0";
    contents.archs = {"sm_80", "sm_90a"};
    contents.databases = {{"h100.json", "{\"h100\": 1}"}, {"a100.json", "{\"a100\": 2}"}};
    contents.kernels = {{key_of('a'), "sm_90a", "payload of a"},
                        {key_of('b'), "sm_90a", std::string(100000, 'x')},
                        {key_of('c'), "sm_80", std::string("with\0nul", 8)}};
    return contents;
}

std::string file_bytes(const fs::path& path) { return tileops::util::read_file(path).value(); }

void write_bytes(const fs::path& path, const std::string& bytes) { tileops::util::write_file_atomic(path, bytes); }

}  // namespace

TEST_CASE("a bundle reads back its databases and kernels, from wherever it is moved", "[bundle]") {
    TempDir dir;
    const fs::path first = dir.path() / "fleet.bundle";
    tileops::jit::write_bundle(first, sample_contents());
    const fs::path moved = dir.path() / "elsewhere" / "renamed.bin";
    fs::create_directories(moved.parent_path());
    fs::rename(first, moved);

    const Bundle bundle(moved);
    CHECK(bundle.nvrtc_version() == "13.0");
    CHECK(bundle.archs() == std::vector<std::string>{"sm_80", "sm_90a"});
    CHECK(bundle.blobs().size() == 5);
    CHECK(bundle.kernel(key_of('a')) == std::optional<std::string>("payload of a"));
    CHECK(bundle.kernel(key_of('b'))->size() == 100000);
    CHECK(bundle.kernel(key_of('c')) == std::optional<std::string>(std::string("with\0nul", 8)));
    CHECK_FALSE(bundle.kernel(key_of('d')).has_value());
    const auto databases = bundle.databases();
    REQUIRE(databases.size() == 2);
    CHECK(databases[0] == std::pair<std::string, std::string>{"h100.json", "{\"h100\": 1}"});
    CHECK(databases[1].first == "a100.json");
}

TEST_CASE("a kernel builder serves a bundle's kernels without compiling or writing", "[bundle]") {
    TempDir dir;
    // A real kernel, compiled once (NVRTC needs no GPU), then shipped in a bundle.
    KernelBuilder compiler(dir.path() / "build-cache", 0, JitPolicy{JitMode::on, {}});
    const auto compiled = compiler.get(kTemplate, kKernel, "sm_90a");
    REQUIRE(compiled.compiled);
    const std::string key = compiler.cache_key(kTemplate, kKernel, "sm_90a");
    BundleContents contents;
    contents.nvrtc_version = "any";
    contents.archs = {"sm_90a"};
    contents.kernels = {{key, "sm_90a", compiler.cache().load(key).value()}};
    const fs::path image = dir.path() / "image";
    fs::create_directories(image);
    const fs::path path = image / "fleet.bundle";
    tileops::jit::write_bundle(path, contents);
    const std::string before = file_bytes(path);
    // A read-only image: the file and its directory (a process running as root could write
    // anyway; what is checked is that nothing tries).
    fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    fs::permissions(image, fs::perms::owner_read | fs::perms::owner_exec);

    const fs::path empty_cache = dir.path() / "serving-cache";
    KernelBuilder serving(empty_cache, 0, JitPolicy{JitMode::off, {}});
    CHECK_THROWS_AS(serving.get(kTemplate, kKernel, "sm_90a"), tileops::CacheMiss);
    serving.serve_from(std::make_shared<const Bundle>(path));
    const auto served = serving.get(kTemplate, kKernel, "sm_90a");
    CHECK_FALSE(served.compiled);
    CHECK(served.cubin == compiled.cubin);
    CHECK(served.lowered_name == compiled.lowered_name);
    CHECK(serving.bundle_hit_count() == 1);
    CHECK(serving.compiled_count() == 0);
    // A kernel the bundle does not hold is still a miss (compiling is off).
    CHECK_THROWS_AS(serving.get(kTemplate, "tileops::elementwise_kernel<float, float, 4, 4, 1, 256>", "sm_90a"),
                    tileops::CacheMiss);
    CHECK_FALSE(fs::exists(empty_cache));  // nothing was copied into the cache, not even a directory made
    fs::permissions(image, fs::perms::owner_all);
    CHECK(file_bytes(path) == before);
    CHECK(std::distance(fs::directory_iterator(image), fs::directory_iterator()) == 1);
}

TEST_CASE("KernelBuilder::find looks in the bundle and the disk cache and never compiles", "[bundle]") {
    TempDir dir;
    KernelBuilder builder(dir.path() / "cache", 0, JitPolicy{JitMode::on, {}});
    CHECK_FALSE(builder.find(kTemplate, kKernel, "sm_90a").has_value());
    CHECK(builder.compiled_count() == 0);
    const auto compiled = builder.get(kTemplate, kKernel, "sm_90a");
    REQUIRE(compiled.compiled);
    const auto found = builder.find(kTemplate, kKernel, "sm_90a");
    REQUIRE(found.has_value());
    CHECK(found->cubin == compiled.cubin);
    CHECK(found->lowered_name == compiled.lowered_name);
    CHECK_FALSE(found->compiled);
    CHECK(builder.compiled_count() == 1);

    // From a bundle, with an empty cache.
    BundleContents contents;
    contents.nvrtc_version = "any";
    contents.archs = {"sm_90a"};
    const std::string key = builder.cache_key(kTemplate, kKernel, "sm_90a");
    contents.kernels = {{key, "sm_90a", builder.cache().load(key).value()}};
    const fs::path path = dir.path() / "fleet.bundle";
    tileops::jit::write_bundle(path, contents);
    KernelBuilder serving(dir.path() / "empty", 0, JitPolicy{JitMode::on, {}});
    CHECK_FALSE(serving.find(kTemplate, kKernel, "sm_90a").has_value());
    serving.serve_from(std::make_shared<const Bundle>(path));
    const auto served = serving.find(kTemplate, kKernel, "sm_90a");
    REQUIRE(served.has_value());
    CHECK(served->cubin == compiled.cubin);
    CHECK(serving.bundle_hit_count() == 1);
    CHECK(serving.compiled_count() == 0);
}

TEST_CASE("a damaged or hostile bundle is refused by name, a damaged kernel passed over", "[bundle]") {
    TempDir dir;
    const fs::path good = dir.path() / "good.bundle";
    tileops::jit::write_bundle(good, sample_contents());
    const std::string bytes = file_bytes(good);
    size_t index_size = 0;  // the header: 17 bytes of magic, then the index's length, little-endian
    for (int i = 7; i >= 0; --i) index_size = index_size << 8 | static_cast<unsigned char>(bytes[17 + static_cast<size_t>(i)]);
    const size_t index_end = 25 + index_size;
    auto refused = [&](const std::string& content, const std::string& why) {
        const fs::path path = dir.path() / "bad.bundle";
        write_bytes(path, content);
        CHECK_THROWS_WITH(Bundle(path), ContainsSubstring("bad.bundle") && ContainsSubstring(why));
    };
    refused("", "not a tileops bundle");
    refused("TILEOPS-BUNDLE-2\n" + bytes.substr(17), "not a tileops bundle");
    refused(bytes.substr(0, 20), "not a tileops bundle");
    refused(bytes.substr(0, 17) + std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + bytes.substr(25), "does not fit");
    refused(bytes.substr(0, index_end - 10), "does not fit");
    std::string garbage = bytes;
    garbage[30] = '{';
    refused(garbage, "malformed index");
    // The index rewritten: a blob past the end, a name that is not a key, a path as a database name.
    auto with_index = [&](std::string index) {
        std::string length(8, '\0');
        for (int i = 0; i < 8; ++i) length[static_cast<size_t>(i)] = static_cast<char>((index.size() >> (8 * i)) & 0xff);
        return bytes.substr(0, 17) + length + index + bytes.substr(index_end);
    };
    const std::string index = bytes.substr(25, index_end - 25);
    auto replaced = [&](const std::string& from, const std::string& to) {
        std::string edited = index;
        const size_t at = edited.find(from);
        REQUIRE(at != std::string::npos);
        return edited.replace(at, from.size(), to);
    };
    refused(with_index(replaced("\"size\":100000", "\"size\":100000000")), "outside the file");
    refused(with_index(replaced(key_of('a'), "../../etc/passwd")), "not a cache key");
    refused(with_index(replaced("\"h100.json\"", "\"../h100.json\"")), "not a plain file name");
    refused(with_index(replaced(key_of('b'), key_of('a'))), "appears twice");
    refused(with_index(replaced("\"kind\":\"kernel\"", "\"kind\":\"script\"")), "unknown kind");
    // Numbers read exactly: a float or an integer past the type was once converted (format 1.9 or
    // 2^32 + 1 read as 1; an offset of 1e30 converted to 64 bits with undefined behaviour).
    refused(with_index(replaced("\"format\":1", "\"format\":1.9")), "format 1.9 is not the 1");
    refused(with_index(replaced("\"format\":1", "\"format\":4294967297")), "format 4294967297 is not the 1");
    refused(with_index(replaced("\"offset\":0", "\"offset\":1e30")), "\"offset\" must be an integer >= 0, got 1e+30");
    refused(with_index(replaced("\"offset\":0", "\"offset\":-1")), "\"offset\" must be an integer >= 0, got -1");
    {
        const std::string blobs_in_object = replaced("\"blobs\":[", "\"blobs\":{\"x\":[");
        const size_t end = blobs_in_object.find("],\"format\"");
        REQUIRE(end != std::string::npos);
        refused(with_index(std::string(blobs_in_object).insert(end + 1, "}")), "\"blobs\" is not a list");
    }
    // Blobs sharing bytes: a 10 MB bundle naming its one database a hundred times once took 2 GB
    // to open for its databases (a small file could name 256 MB a million times).
    refused(with_index(replaced("\"name\":\"a100.json\",\"offset\":11", "\"name\":\"a100.json\",\"offset\":0")),
            "blobs overlap");
    refused(with_index(replaced("\"name\":\"a100.json\",\"offset\":11", "\"name\":\"a100.json\",\"offset\":5")),
            "blobs overlap");
    // A repeated key: JSON keeps the last, so a second "format" (or "blobs") would hide the first.
    refused(with_index(replaced("\"format\":1", "\"format\":2,\"format\":1")), "gives the key \"format\" twice");
    // Strings printed by unpack --list or used as file names: no control characters (a name that
    // clears the terminal or sets its title).
    refused(with_index(replaced("\"h100.json\"", "\"\\u001b[2Jh100.json\"")), "holds a control character");
    refused(with_index(replaced("\"13.0\"", "\"\\u001b]0;owned\\u0007\"")), "holds a control character");
    refused(with_index(replaced("\"sm_80\"", "\"sm_80\\r\"")), "holds a control character");

    // Not a regular file, or a link: refused before anything is read.
    const fs::path link = dir.path() / "link.bundle";
    fs::create_symlink(good, link);
    CHECK_THROWS_WITH(Bundle(link), ContainsSubstring("symbolic link"));
    const fs::path fifo = dir.path() / "fifo.bundle";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(Bundle(fifo), ContainsSubstring("not a regular file"));
    CHECK_THROWS_WITH(Bundle(dir.path()), ContainsSubstring("not a regular file"));
    CHECK_THROWS_AS(Bundle(dir.path() / "missing.bundle"), FileError);

    // A flipped byte in a kernel: that kernel is a miss (the cache serves it instead), the rest
    // still reads; reading the blob directly names the damage.
    std::string flipped = bytes;
    flipped[flipped.size() - 3] ^= 0x20;  // inside kernel c, the last blob
    const fs::path damaged = dir.path() / "damaged.bundle";
    write_bytes(damaged, flipped);
    const Bundle bundle(damaged);
    CHECK_FALSE(bundle.kernel(key_of('c')).has_value());
    CHECK(bundle.kernel(key_of('a')).has_value());
    CHECK_THROWS_WITH(bundle.read(bundle.blobs().back()), ContainsSubstring("fails its checksum"));
}

TEST_CASE("a bundle with random damage is refused or read soundly, never a crash", "[bundle]") {
    TempDir dir;
    const fs::path good = dir.path() / "good.bundle";
    tileops::jit::write_bundle(good, sample_contents());
    const std::string bytes = file_bytes(good);
    const BundleContents expected = sample_contents();
    std::mt19937_64 rng(20261127);
    const fs::path path = dir.path() / "mutated.bundle";
    int opened = 0;
    LogCapture quiet(spdlog::level::warn);  // each damaged kernel is a warning: expected here, kept off the output
    for (int round = 0; round < 1500; ++round) {
        std::string mutated = bytes;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = rng() % mutated.size();
            switch (rng() % 3) {
                case 0: mutated[at] = static_cast<char>(rng()); break;
                case 1: mutated.erase(at, 1 + rng() % 16); break;
                default: mutated.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng()))); break;
            }
            if (mutated.empty()) mutated = "x";
        }
        write_bytes(path, mutated);
        try {
            const Bundle bundle(path);
            ++opened;
            // Whatever opened serves only payloads that passed their checksum: the originals.
            for (const auto& kernel : expected.kernels)
                if (auto payload = bundle.kernel(kernel.key)) CHECK(*payload == kernel.payload);
        } catch (const FileError&) {
        }
    }
    CHECK(opened > 0);  // damage inside blobs leaves the index sound
    CHECK(quiet.count("fails its checksum") > 0);  // and such a kernel was passed over, with a warning
}
