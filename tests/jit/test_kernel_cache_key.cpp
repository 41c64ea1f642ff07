// The kernel cache key changes when anything that makes a cubin valid changes, and only then.
#include <catch2/catch_test_macros.hpp>

#include "jit/kernel_builder.hpp"

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
