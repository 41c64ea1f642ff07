// The kernel cache key changes when anything that makes a cubin valid changes, and only then; an
// entry compiled against other CUDA headers is never served where the headers can be checked.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <catch2/catch_test_macros.hpp>

#include "jit/compiler.hpp"
#include "jit/cuda_headers.hpp"
#include "jit/kernel_builder.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"

using tileops::jit::kernel_cache_key;
using tileops::jit::KernelKeyInputs;

TEST_CASE("kernel cache key depends on each of its inputs", "[cache_key]") {
    KernelKeyInputs base{"#include \"rmsnorm.cuh\"\n", "abc123", "tileops::k<1>", "--std=c++17", "13.0", "sm_90a"};
    const std::string key = kernel_cache_key(base);
    CHECK(key.size() == 64);
    CHECK(kernel_cache_key(base) == key);  // deterministic

    auto changed = [&](auto mutate) {
        KernelKeyInputs copy = base;
        mutate(copy);
        return kernel_cache_key(copy);
    };
    CHECK(changed([](auto& k) { k.translation_unit += " "; }) != key);
    CHECK(changed([](auto& k) { k.template_hash = "abc124"; }) != key);
    CHECK(changed([](auto& k) { k.name_expression = "tileops::k<2>"; }) != key);
    CHECK(changed([](auto& k) { k.options = "--std=c++20"; }) != key);
    CHECK(changed([](auto& k) { k.nvrtc_version = "13.1"; }) != key);
    CHECK(changed([](auto& k) { k.arch = "sm_90"; }) != key);
    // Fields are length-prefixed: moving a character between two fields changes the key.
    CHECK(changed([](auto& k) {
              k.nvrtc_version = "13.0s";
              k.arch = "m_90a";
          }) != key);
}

TEST_CASE("KernelBuilder cache keys hold no path and follow the template content", "[cache_key]") {
    tileops::jit::KernelBuilder a("/tmp/tileops-key-a", 0, true), b("/tmp/tileops-key-b", 0, true);
    const std::string expr = "tileops::softmax_kernel<float, float, 32, 8, 4, 1, 1, false>";
    // Same content, different cache directories: same key (a cache can move between machines).
    CHECK(a.cache_key("rows/softmax.cuh", expr, "sm_90a") == b.cache_key("rows/softmax.cuh", expr, "sm_90a"));
    CHECK(a.cache_key("rows/softmax.cuh", expr, "sm_90a") != a.cache_key("rows/softmax.cuh", expr, "sm_80"));
    CHECK(a.cache_key("rows/softmax.cuh", expr, "sm_90a") != a.cache_key("rows/rmsnorm.cuh", expr, "sm_90a"));
}

TEST_CASE("TILEOPS_KERNEL_LINEINFO=1 compiles with -lineinfo, under a key of its own", "[cache_key]") {
    tileops::jit::KernelBuilder builder("/tmp/tileops-key-a", 0, true);
    const std::string expr = "tileops::softmax_kernel<float, float, 32, 8, 4, 1, 1, false>";
    const std::string plain = builder.cache_key("rows/softmax.cuh", expr, "sm_90a");
    auto has_lineinfo = [] {
        const auto options = tileops::jit::base_compile_options("sm_90a");
        return std::find(options.begin(), options.end(), "-lineinfo") != options.end();
    };
    CHECK_FALSE(has_lineinfo());
    {
        tileops::test::ScopedEnv lineinfo("TILEOPS_KERNEL_LINEINFO", "1");
        CHECK(has_lineinfo());
        CHECK(builder.cache_key("rows/softmax.cuh", expr, "sm_90a") != plain);
    }
    {
        tileops::test::ScopedEnv yes("TILEOPS_KERNEL_LINEINFO", "yes");  // not silently off
        CHECK_THROWS_AS(has_lineinfo(), tileops::InvalidArgument);
    }
    tileops::test::ScopedEnv off("TILEOPS_KERNEL_LINEINFO", "0");
    CHECK_FALSE(has_lineinfo());
    CHECK(builder.cache_key("rows/softmax.cuh", expr, "sm_90a") == plain);
}

TEST_CASE("CUDA headers: the closure hash follows every included header's content, and only those", "[cache_key]") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("tileops_headers_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "inc" / "sub");
    auto write = [](const fs::path& path, const std::string& text) { std::ofstream(path) << text; };
    write(dir / "inc" / "top.h", "#pragma once\n#include \"sub/mid.h\"\n#include <stdint.h>\n");
    write(dir / "inc" / "sub" / "mid.h", "  #  include \"leaf.h\"\nint mid;\n");
    write(dir / "inc" / "sub" / "leaf.h", "int leaf;\n");
    write(dir / "inc" / "unrelated.h", "int unrelated;\n");
    const std::vector<std::string> dirs = {(dir / "inc").string()};
    size_t files = 0;
    const std::string base = tileops::jit::headers_closure_hash({"top.h"}, dirs, &files);
    CHECK(files == 3);  // top, mid, leaf (stdint.h is not in the include dirs)
    write(dir / "inc" / "unrelated.h", "int unrelated = 1;\n");
    CHECK(tileops::jit::headers_closure_hash({"top.h"}, dirs) == base);
    write(dir / "inc" / "sub" / "leaf.h", "int leaf = 2;\n");  // two includes down
    const std::string changed = tileops::jit::headers_closure_hash({"top.h"}, dirs);
    CHECK(changed != base);
    // The same content elsewhere hashes the same: no path goes into it.
    fs::copy(dir / "inc", dir / "moved", fs::copy_options::recursive);
    CHECK(tileops::jit::headers_closure_hash({"top.h"}, {(dir / "moved").string()}) == changed);
    fs::remove_all(dir);
}

TEST_CASE("a cached kernel compiled against other CUDA headers is rebuilt, or refused without compiling",
          "[cache_key]") {
    namespace fs = std::filesystem;
    REQUIRE(tileops::jit::cuda_headers_hash_if_found() != nullptr);  // the toolkit the tests build with
    const fs::path cache = fs::temp_directory_path() / ("tileops_headers_cache_" + std::to_string(::getpid()));
    fs::remove_all(cache);
    const std::string file = "elementwise/elementwise.cuh", expr = "tileops::elementwise_kernel<float, float, 2, 4, 1, 256>";
    tileops::jit::KernelBuilder builder(cache, 0, true);
    REQUIRE(builder.get(file, expr, "sm_80").compiled);
    // What a warm against other headers would have stored under the same key.
    const std::string key = builder.cache_key(file, expr, "sm_80");
    std::string payload = *builder.cache().load(key);
    const size_t newline = payload.find('\n');
    REQUIRE(payload.substr(0, newline) == *tileops::jit::cuda_headers_hash_if_found());
    builder.cache().store(key, "other-headers" + payload.substr(newline));

    tileops::jit::KernelBuilder serving(cache, 0, false);
    CHECK_THROWS_AS(serving.get(file, expr, "sm_80"), tileops::CacheMiss);
    tileops::jit::KernelBuilder compiling(cache, 0, true);
    CHECK(compiling.get(file, expr, "sm_80").compiled);  // rebuilt, not served
    CHECK(compiling.cache().load(key)->substr(0, newline) == *tileops::jit::cuda_headers_hash_if_found());
    CHECK_FALSE(compiling.get(file, expr, "sm_80").compiled);
    fs::remove_all(cache);
}
