// GemmFp8Grouped without a GPU: bad problems and operands refused by name, the tuning key and
// the CLI's problem syntax, Unsupported off sm_90, and every config of the search space compiling
// for sm_90a without spills.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
void* const kA = reinterpret_cast<void*>(0x100000);
void* const kB = reinterpret_cast<void*>(0x20000000);
void* const kScalesA = reinterpret_cast<void*>(0x30000000);
void* const kScalesB = reinterpret_cast<void*>(0x38000000);
void* const kRows = reinterpret_cast<void*>(0x40000000);
void* const kD = reinterpret_cast<void*>(0x50000000);

GemmFp8GroupedProblem problem(int64_t groups, int64_t rows, int64_t n, int64_t k, GemmFp8Scaling scaling) {
    GemmFp8GroupedProblem p;
    p.groups = groups, p.rows = rows, p.n = n, p.k = k, p.scaling = scaling;
    return p;
}
}  // namespace

TEST_CASE("GemmFp8Grouped refuses bad problems and operands by name", "[validation][gemm_fp8_grouped]") {
    CHECK_THROWS_WITH(GemmFp8Grouped(problem(0, 8, 64, 64, GemmFp8Scaling::per_tensor)), ContainsSubstring("groups = 0"));
    CHECK_THROWS_WITH(GemmFp8Grouped(problem(8, 64, 64, 40, GemmFp8Scaling::per_tensor)),
                      ContainsSubstring("k = 40 is not a multiple of 16"));
    GemmFp8GroupedProblem int_out = problem(8, 64, 64, 64, GemmFp8Scaling::per_tensor);
    int_out.out_dtype = DType::int32;
    CHECK_THROWS_WITH(GemmFp8Grouped(int_out), ContainsSubstring("out_dtype"));

    // Scales: per_tensor [1] and [groups]; per_row [rows] and [groups x N]; blocks [K/128 x rows]
    // and [groups x N/128 x K/128].
    GemmFp8Grouped tensor(problem(4, 256, 128, 256, GemmFp8Scaling::per_tensor));
    auto vec = [](void* p, int64_t n, DType dtype = DType::fp32) { return TensorView::contiguous(p, dtype, {n}); };
    CHECK_NOTHROW(tensor.check({kA, kB, vec(kScalesA, 1), vec(kScalesB, 4), vec(kRows, 5, DType::int32)}, {kD}));
    CHECK_THROWS_WITH(tensor.check({kA, kB, vec(kScalesA, 1), vec(kScalesB, 1), kRows}, {kD}),
                      ContainsSubstring("argument 'scales_b'"));
    GemmFp8Grouped blocks(problem(4, 256, 200, 272, GemmFp8Scaling::blocks));
    CHECK_NOTHROW(blocks.check({kA, kB, vec(kScalesA, 3 * 256), vec(kScalesB, 4 * 2 * 3), kRows}, {kD}));
    CHECK_THROWS_WITH(blocks.check({kA, kB, vec(kScalesA, 256), vec(kScalesB, 4 * 2 * 3), kRows}, {kD}),
                      ContainsSubstring("argument 'scales_a'"));
    CHECK_THROWS_WITH(blocks.check({kA, kB, kScalesA, kScalesB}, {kD}),
                      ContainsSubstring("expected 5 inputs (A, B, scales_a, scales_b, group_rows), got 4"));
    CHECK_THROWS_WITH(blocks.check({static_cast<char*>(kA) + 8, kB, kScalesA, kScalesB, kRows}, {kD}),
                      ContainsSubstring("argument 'A' must start on 16 bytes"));
}

TEST_CASE("GemmFp8Grouped tuning keys, the CLI's syntax, and Unsupported off sm_90", "[validation][gemm_fp8_grouped]") {
    auto op = detail::make_op({"gemm_fp8_grouped", {256, 32768, 4096, 7168}, "fp8_e4m3->bf16", "block"});
    CHECK(op->describe() == "gemm_fp8_grouped 256x32768x4096x7168 fp8_e4m3->bf16 [block]");
    auto masked = detail::make_op({"gemm_fp8_grouped", {64, 16, 2048, 768}, "fp8_e4m3->fp32", "row,masked,silu"});
    CHECK(masked->describe() == "gemm_fp8_grouped 64x16x2048x768 fp8_e4m3->fp32 [row,masked,silu]");
    CHECK_THROWS_WITH(detail::make_op({"gemm_fp8_grouped", {2, 16, 16, 16}, "bf16", ""}), ContainsSubstring("fp8_e4m3"));
    CHECK_THROWS_WITH(detail::make_op({"gemm_fp8_grouped", {2, 16, 16, 16}, "fp8_e4m3->bf16", "beta"}),
                      ContainsSubstring("flag 'beta'"));
    const auto reason = op->model().unsupported_reason(DeviceInfo::for_arch("sm_80"));
    REQUIRE(reason.has_value());
    CHECK_THAT(*reason, ContainsSubstring("wgmma"));
}

TEST_CASE("every GemmFp8Grouped config of the search space compiles for sm_90a without spills", "[compile][gemm_fp8_grouped]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    test::KernelsByFile kernels;
    for (GemmFp8Scaling scaling : {GemmFp8Scaling::per_row, GemmFp8Scaling::blocks}) {
        GemmFp8GroupedProblem p = problem(64, 32768, 4096, 7168, scaling);
        p.epilogue = GemmEpilogue::silu;
        GemmFp8Grouped op(p);
        const auto space = op.model().search_space(device);
        CHECK(space.size() >= 4);
        for (const Config& config : space)
            for (int width : op.model().vector_widths(config)) test::add_kernels(kernels, op.model(), config, width, device);
    }
    for (const auto& [name, report] : test::compile_all_with_report(kernels, "sm_90a")) {
        INFO(name << ": " << report.spill_bytes << " bytes of spill stores");
        CHECK(report.spill_bytes == 0);
        CHECK_FALSE(report.wgmma_serialized);
    }
}
