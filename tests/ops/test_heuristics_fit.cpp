// Every op gets a config its device can run, on each arch family the library compiles for: the
// heuristics were written for the sm_80 / sm_90 shared-memory sizes, and sm_86 / sm_89 parts have
// 99 KB a block (the decode tensor-core default needs 100 KB there), so the choice falls back to
// the first valid config of the search space.
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "ops/registry.hpp"
#include "tuning/op_config.hpp"

using tileops::DeviceInfo;
using tileops::detail::make_op;
using tileops::detail::ProblemSpec;

TEST_CASE("every op's heuristic config fits the device on sm_80, sm_86, sm_89 and sm_90a", "[config]") {
    const std::vector<ProblemSpec> problems = {
        {"rmsnorm", {8192, 4096}, "bf16", ""},
        {"rmsnorm", {256, 262144}, "fp32", "residual"},
        {"layernorm", {1024, 65536}, "bf16", ""},
        {"softmax", {4096, 32000}, "fp16", ""},
        {"silu_mul", {4096, 14336}, "bf16", ""},
        {"gemm", {4096, 4096, 4096}, "bf16", "nt"},
        {"gemm", {16, 4096, 4096}, "bf16", "nt"},
        {"decode_attention", {1, 32, 8, 128, 1, 4096}, "bf16", ""},
        {"decode_attention", {8, 32, 8, 256, 1, 16384}, "bf16", "page16"},
        {"decode_attention", {128, 32, 32, 128, 1, 1024}, "fp16", ""},
        {"decode_attention", {4, 32, 8, 128, 1, 8192}, "fp16", "kv_fp8"},
        {"flash_attention", {2, 16, 16, 64, 4096, 4096}, "bf16", "causal"},
        {"flash_attention", {1, 32, 8, 256, 2048, 2048}, "fp16", ""},
        {"mla_decode", {64, 128, 1, 8192}, "bf16", "page64"},
        {"mla_decode", {8, 16, 2, 4096}, "fp16", ""},
    };
    for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
        const DeviceInfo device = DeviceInfo::for_arch(arch);
        for (const ProblemSpec& spec : problems) {
            const auto op = make_op(spec);
            INFO(arch << ": " << op->describe());
            const tileops::Config config = tileops::tuning::heuristic_that_fits(op->model(), device);
            const auto reason = op->model().invalid_reason(config, device);
            CHECK_FALSE(reason.has_value());
            if (reason) UNSCOPED_INFO(*reason);
        }
    }
}

TEST_CASE("ops that need sm_80 say so on an older arch instead of failing to compile", "[config]") {
    const DeviceInfo turing = DeviceInfo::for_arch("sm_75");
    for (const ProblemSpec& spec : std::vector<ProblemSpec>{{"gemm", {1024, 1024, 1024}, "fp16", "nt"},
                                                            {"decode_attention", {1, 32, 8, 128, 1, 4096}, "fp16", ""},
                                                            {"flash_attention", {1, 8, 8, 128, 1024, 1024}, "fp16", ""},
                                                            {"mla_decode", {8, 16, 1, 4096}, "fp16", ""}}) {
        const auto op = make_op(spec);
        INFO(op->describe());
        const auto reason = op->model().invalid_reason(tileops::tuning::heuristic_that_fits(op->model(), turing), turing);
        REQUIRE(reason.has_value());
        CHECK(reason->find("sm_80") != std::string::npos);
    }
}
