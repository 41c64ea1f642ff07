// GemmGrouped without a GPU: bad problems and operands refused by name, the tuning key and the
// CLI's problem syntax, configs restricted to what the grouped schedule runs, and every config
// of the search space compiling with NVRTC (sm_80 kernel for sm_80, TMA kernel for sm_90a, without
// spills).
#include <limits>
#include <tuple>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autotune/operand_buffers.hpp"
#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
void* const kA = reinterpret_cast<void*>(0x100000);
void* const kB = reinterpret_cast<void*>(0x20000000);
void* const kRows = reinterpret_cast<void*>(0x40000000);
void* const kD = reinterpret_cast<void*>(0x50000000);

GemmGroupedProblem problem(int64_t groups, int64_t rows, int64_t n, int64_t k) {
    GemmGroupedProblem p;
    p.groups = groups, p.rows = rows, p.n = n, p.k = k;
    return p;
}
}  // namespace

TEST_CASE("GemmGrouped refuses bad problems with the argument's name", "[validation][gemm_grouped]") {
    CHECK_THROWS_WITH(GemmGrouped(problem(0, 8, 8, 8)), ContainsSubstring("groups = 0 is not in [1, 4096]"));
    CHECK_THROWS_WITH(GemmGrouped(problem(5000, 8, 8, 8)), ContainsSubstring("groups = 5000"));
    CHECK_THROWS_WITH(GemmGrouped(problem(8, 0, 8, 8)), ContainsSubstring("rows must be >= 1, got 0"));
    CHECK_THROWS_WITH(GemmGrouped(problem(8, 64, 8, 100)),
                      ContainsSubstring("lda = 100 is not a multiple of 8") && ContainsSubstring("GemmGrouped"));
    GemmGroupedProblem fp32 = problem(8, 64, 64, 64);
    fp32.dtype = DType::fp32;
    CHECK_THROWS_AS(GemmGrouped(fp32), Unsupported);
    GemmGroupedProblem huge = problem(4096, 1 << 20, 64, 64);
    huge.group_layout = GemmGroupLayout::masked;
    CHECK_THROWS_WITH(GemmGrouped(huge), ContainsSubstring("groups x capacity"));
    GemmGroupedProblem strided = problem(8, 64, 64, 64);
    strided.group_stride_b = 64 * 64 + 4;
    CHECK_THROWS_WITH(GemmGrouped(strided), ContainsSubstring("group_stride_b = 4100 is not a multiple of 8"));
    GemmGroupedProblem nan_alpha = problem(8, 64, 64, 64);
    nan_alpha.alpha = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH(GemmGrouped(nan_alpha), ContainsSubstring("alpha must be finite"));
}

TEST_CASE("GemmGrouped checks run()'s operands by name", "[validation][gemm_grouped]") {
    GemmGrouped contiguous(problem(8, 256, 128, 64));
    CHECK_NOTHROW(contiguous.check({kA, kB, kRows}, {kD}));
    CHECK_THROWS_WITH(contiguous.check({kA, kB}, {kD}), ContainsSubstring("expected 3 inputs (A, B, group_rows), got 2"));
    CHECK_THROWS_WITH(contiguous.check({kA, kB, nullptr}, {kD}), ContainsSubstring("argument 'group_rows' is a null pointer"));
    CHECK_THROWS_WITH(contiguous.check({static_cast<char*>(kA) + 8, kB, kRows}, {kD}),
                      ContainsSubstring("argument 'A' must start on 16 bytes"));
    // Offsets are groups + 1 int32; counts groups.
    CHECK_THROWS_WITH(contiguous.check({kA, kB, TensorView::contiguous(kRows, DType::int32, {8})}, {kD}),
                      ContainsSubstring("argument 'group_rows'"));
    CHECK_NOTHROW(contiguous.check({kA, kB, TensorView::contiguous(kRows, DType::int32, {9})}, {kD}));
    CHECK_THROWS_WITH(contiguous.check({kA, kB, TensorView::contiguous(kRows, DType::fp32, {9})}, {kD}),
                      ContainsSubstring("argument 'group_rows' has dtype fp32, expected int32"));
    // B is [groups, N, K] (nt, the default).
    CHECK_NOTHROW(contiguous.check({kA, TensorView::contiguous(kB, DType::bf16, {8, 128, 64}), kRows}, {kD}));
    CHECK_THROWS_WITH(contiguous.check({kA, TensorView::contiguous(kB, DType::bf16, {8, 64, 128}), kRows}, {kD}),
                      ContainsSubstring("argument 'B'"));
    // D over A.
    CHECK_THROWS_WITH(contiguous.check({kA, kB, kRows}, {static_cast<char*>(kA) + 64}), ContainsSubstring("overlaps"));

    GemmGroupedProblem m = problem(4, 16, 128, 64);
    m.group_layout = GemmGroupLayout::masked;
    GemmGrouped masked(m);
    CHECK_NOTHROW(masked.check({TensorView::contiguous(kA, DType::bf16, {4, 16, 64}), kB,
                                TensorView::contiguous(kRows, DType::int32, {4})},
                               {TensorView::contiguous(kD, DType::bf16, {4, 16, 128})}));
    CHECK_THROWS_WITH(masked.check({kA, kB, TensorView::contiguous(kRows, DType::int32, {5})}, {kD}),
                      ContainsSubstring("argument 'group_rows'"));
}

TEST_CASE("GemmGrouped tuning keys and the CLI's problem syntax", "[validation][gemm_grouped]") {
    auto op = detail::make_op({"gemm_grouped", {8, 4096, 14336, 4096}, "bf16", "nt,silu"});
    CHECK(op->describe() == "gemm_grouped 8x4096x14336x4096 bf16 [nt,silu]");
    const auto& grouped = dynamic_cast<const GemmGrouped&>(*op);
    CHECK(grouped.problem().layout == GemmLayout::nt);
    CHECK(grouped.problem().group_layout == GemmGroupLayout::contiguous);
    auto masked = detail::make_op({"gemm_grouped", {128, 16, 2048, 768}, "fp16->fp32", "masked"});
    CHECK(masked->describe() == "gemm_grouped 128x16x2048x768 fp16->fp32 [masked]");
    CHECK(dynamic_cast<const GemmGrouped&>(*masked).problem().layout == GemmLayout::nn);
    CHECK_THROWS_WITH(detail::make_op({"gemm_grouped", {16, 16, 16}, "bf16", ""}), ContainsSubstring("GxRxNxK"));
    CHECK_THROWS_WITH(detail::make_op({"gemm_grouped", {2, 16, 16, 16}, "bf16", "bias"}), ContainsSubstring("flag 'bias'"));
}

// The tuner and benchmarks fill the group offsets from the operand's spec: every row must fall in
// a group, or the rows past the last group stay unwritten and every candidate fails the tuner's
// output check (49152 rows in 160 groups used to leave 32 rows out).
TEST_CASE("GemmGrouped's group offsets for tuning cover every row", "[validation][gemm_grouped]") {
    const auto [groups, rows] = GENERATE(table<int64_t, int64_t>({{160, 49152}, {384, 131072}, {8, 4096}, {3, 2}, {1, 7}}));
    auto op = detail::make_op({"gemm_grouped", {groups, rows, 256, 128}, "bf16", ""});
    const auto operands = op->model().operands();
    REQUIRE(operands.size() == 4);
    const detail::OperandSpec& offsets = operands[2];
    REQUIRE(offsets.name == "group_rows");
    REQUIRE(offsets.cols == groups + 1);
    const auto n = static_cast<size_t>(offsets.cols);
    CHECK(tuning::index_fill(offsets, 0, n) == 0);
    CHECK(tuning::index_fill(offsets, n - 1, n) == rows);
    for (size_t g = 0; g + 1 < n; ++g) {
        const long long group_rows = tuning::index_fill(offsets, g + 1, n) - tuning::index_fill(offsets, g, n);
        CHECK(group_rows >= rows / groups);
        CHECK(group_rows <= rows / groups + 1);
    }
    auto masked = detail::make_op({"gemm_grouped", {4, 16, 256, 128}, "bf16", "masked"});
    const detail::OperandSpec counts = masked->model().operands()[2];
    CHECK(counts.cols == 4);
    CHECK(tuning::index_fill(counts, 3, 4) == 16);
}

TEST_CASE("GemmGrouped configs: no skinny kernel, no split K; heuristics valid", "[validation][gemm_grouped]") {
    for (const char* arch : {"sm_80", "sm_90a"}) {
        const DeviceInfo device = DeviceInfo::for_arch(arch);
        // Decode (a few rows a group), prefill, and few long groups.
        for (const auto& [groups, rows] : {std::pair{256, 64}, std::pair{128, 32768}, std::pair{8, 16384}}) {
            GemmGrouped op(problem(groups, rows, 2048, 7168));
            const detail::OpModel& model = op.model();
            INFO(arch << " " << model.describe());
            const Config heuristic = model.heuristic(device);
            CHECK_FALSE(model.invalid_reason(heuristic, device).has_value());
            const auto space = model.search_space(device);
            CHECK(space.size() >= 3);
            for (const Config& config : space) {
                CHECK(config.at("kernel") != 2);
                CHECK((config.count("split_k") == 0 || config.at("split_k") == 1));
            }
        }
    }
}

TEST_CASE("GemmGrouped's decode heuristic: narrow 64-row tiles that a one-token step spreads over every SM",
          "[validation][gemm_grouped]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    // Qwen3-30B-A3B's up projection, capacity 8: 1536 columns over the 8 experts a token
    // activates need 64-column tiles (192 tiles for 132 SMs); Mixtral's 28672 keep 256.
    for (const auto& [n, block_n] : {std::pair{1536, 64}, std::pair{28672, 256}}) {
        GemmGroupedProblem p = problem(128, 8, n, 2048);
        p.group_layout = GemmGroupLayout::masked;
        const Config config = GemmGrouped(p).model().heuristic(device);
        CHECK(config.at("block_m") == 64);
        CHECK(config.at("block_n") == block_n);
    }
}

TEST_CASE("GemmGrouped's prefill heuristic: ping-pong 128 x 128 tiles for groups of a few hundred rows",
          "[validation][gemm_grouped]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    // DeepSeek-V2's down projection at 49152 routed rows (307 a group) and Kimi K2's (341);
    // 128 rows a group and 1024 keep the batched GEMM's choice.
    for (const auto& [groups, rows, pingpong] :
         {std::tuple{160, 49152, true}, std::tuple{384, 131072, true}, std::tuple{160, 24576, true},
          std::tuple{64, 8192, false}, std::tuple{128, 131072, false}}) {
        const Config config = GemmGrouped(problem(groups, rows, 5120, 768)).model().heuristic(device);
        INFO(groups << " groups, " << rows << " rows");
        CHECK((config.at("pingpong") == 1) == pingpong);
        if (pingpong) {
            CHECK(config.at("block_m") == 128);
            CHECK(config.at("block_n") == 128);
        }
    }
    // Not on sm_80, whose kernel has no ping-pong.
    CHECK(GemmGrouped(problem(160, 49152, 5120, 768)).model().heuristic(DeviceInfo::for_arch("sm_80")).at("kernel") == 0);
}

TEST_CASE("every GemmGrouped config of the search space compiles for sm_80 and sm_90a", "[compile][gemm_grouped]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    // Contiguous with B as weights (every config), then the heuristic's config of a masked
    // problem with B as K x N and fp32 D at every width.
    GemmGroupedProblem contiguous = problem(8, 4096, 4096, 4096);
    contiguous.layout = GemmLayout::nt, contiguous.epilogue = GemmEpilogue::silu;
    GemmGrouped op(contiguous);
    for (const Config& config : op.model().search_space(device))
        test::add_kernels(kernels, op.model(), config, op.model().vector_widths(config).front(), device);
    GemmGroupedProblem masked = problem(64, 128, 512, 256);
    masked.group_layout = GemmGroupLayout::masked, masked.layout = GemmLayout::nn, masked.out_dtype = DType::fp32;
    // A decode step: the decode heuristic's narrow tiles.
    GemmGroupedProblem decode = problem(128, 8, 1536, 2048);
    decode.group_layout = GemmGroupLayout::masked;
    for (const GemmGroupedProblem& p : {masked, decode}) {
        GemmGrouped heuristic_op(p);
        const Config heuristic = heuristic_op.model().heuristic(device);
        for (int width : heuristic_op.model().vector_widths(heuristic))
            test::add_kernels(kernels, heuristic_op.model(), heuristic, width, device);
    }
    if (arch == "sm_80") {
        test::compile_all(kernels, arch);
        return;
    }
    // The TMA kernel's stores of a group's last rows (from registers, per 64-row box) must not
    // push its accumulators into local memory, nor serialize its wgmmas.
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        INFO(name << ": " << report.spill_bytes << " bytes of spill stores");
        CHECK(report.spill_bytes == 0);
        CHECK_FALSE(report.wgmma_serialized);
    }
}
