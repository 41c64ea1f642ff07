// Sampling without a GPU: bad problems and operands refused by name, tuning keys that round-trip
// through the registry, and the search space compiling for sm_80 and sm_90a.
#include <cstdint>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/error.hpp"
#include "tileops/sampling.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
// Fake device addresses, a terabyte apart: check() never dereferences them.
void* address(int i) { return reinterpret_cast<void*>(uintptr_t(i) << 40); }
}  // namespace

TEST_CASE("Sampling refuses bad problems by name", "[validation][sampling]") {
    CHECK_THROWS_WITH(Sampling({0, 1000}), ContainsSubstring("Sampling") && ContainsSubstring("rows"));
    CHECK_THROWS_WITH(Sampling({4, 0}), ContainsSubstring("Sampling"));
    CHECK_THROWS_WITH(Sampling({4, int64_t{1} << 32}), ContainsSubstring("vocab_size"));
    CHECK_THROWS_WITH(Sampling({4, 1000, DType::int32}), ContainsSubstring("dtype"));
    CHECK_THROWS_WITH(Sampling({4, 1000, DType::fp32, 999}), ContainsSubstring("logits_stride"));
    CHECK_THROWS_WITH(Sampling({int64_t{1} << 40, 1000, DType::fp32, int64_t{1} << 30}), ContainsSubstring("overflows"));
    // A greedy op has no seed: two differing only in it are the same op.
    CHECK(Sampling({4, 1000, DType::fp32, 0, true, 7}).problem().seed == 0);
}

TEST_CASE("Sampling checks its operands by name", "[validation][sampling]") {
    Sampling op({8, 128256, DType::bf16});
    void* logits = address(1);
    const std::vector<void*> params{address(2), address(3), address(4), address(5), address(6)};
    void* tokens = address(7);
    CHECK(op.vector_width({logits, params[0], params[1], params[2], params[3], params[4]}, {tokens}) == 8);
    CHECK_THROWS_WITH(op.check({logits}, {tokens}), ContainsSubstring("logits, temperature, top_k, top_p, min_p, offsets"));
    CHECK_THROWS_WITH(op.check({logits, params[0], nullptr, params[2], params[3], params[4]}, {tokens}),
                      ContainsSubstring("top_k"));
    CHECK_THROWS_WITH(op.check({logits, params[0], params[1], params[2], params[3], params[4]}, {params[4]}),
                      ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(op.check({logits, params[0], params[1], params[2], params[3], params[4]}, {logits}),
                      ContainsSubstring("overlaps"));
    // A float array 2 bytes off its alignment.
    CHECK_THROWS_WITH(op.check({logits, static_cast<char*>(params[0]) + 2, params[1], params[2], params[3], params[4]},
                               {tokens}),
                      ContainsSubstring("temperature"));
    Sampling greedy({8, 50257, DType::fp32, 0, true});
    CHECK(greedy.vector_width({logits}, {tokens}) == 4);
    CHECK_THROWS_WITH(greedy.check({logits, params[0]}, {tokens}), ContainsSubstring("inputs"));
}

TEST_CASE("Sampling keys round-trip through the registry", "[config][sampling]") {
    for (const bool greedy : {false, true}) {
        const Sampling op({64, 128256, DType::bf16, 0, greedy, 5});
        const TuningKey key = op.model().tuning_key("sm_90a", "");
        CHECK(key.to_string() == (greedy ? "sampling 64x128256 bf16 [greedy] sm_90a" : "sampling 64x128256 bf16 sm_90a"));
        CHECK(detail::make_op({key.op, key.shape, key.dtype, key.flags})->describe() == op.describe());
    }
    CHECK_THROWS_WITH(detail::make_op({"sampling", {4}, "fp32", ""}), ContainsSubstring("batch x vocab"));
    CHECK_THROWS_WITH(detail::make_op({"sampling", {4, 100}, "fp32", "topk5"}), ContainsSubstring("flag 'topk5'"));
}

// Every config, spills checked: the sampler streams rows from one block a row, and local memory
// traffic would take the bandwidth it needs.
TEST_CASE("Sampling configs compile for sm_80 and sm_90a without spilling", "[compile][sampling]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (const SamplingProblem& p : {SamplingProblem{64, 128256, DType::fp32}, SamplingProblem{3, 50257, DType::bf16},
                                     SamplingProblem{8, 128256, DType::fp16, 0, true}}) {
        const Sampling op(p);
        const auto space = op.model().search_space(device);
        REQUIRE(space.size() >= 3);
        if (!p.greedy) CHECK(op.model().invalid_reason({{"threads", 1024}, {"vec", 4}}, device).has_value());
        for (const Config& config : space)
            for (int vec : op.model().vector_widths(config)) test::add_kernels(kernels, op.model(), config, vec, device);
    }
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        INFO(arch << " " << name);
        CHECK(report.spill_bytes == 0);
    }
}
