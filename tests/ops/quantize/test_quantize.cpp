// Quantize without a GPU: bad problems and operands refused by name, misaligned pointers taken at
// narrower vectors, tuning keys that round-trip through the registry, search spaces of valid
// configs (and hostile configs refused), and every config of each scaling's search space
// compiling for sm_80 and sm_90a.
#include <cstdint>
#include <limits>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/error.hpp"
#include "tileops/quantize.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
// Fake device addresses, a terabyte apart: check() never dereferences them.
char* const kX = reinterpret_cast<char*>(uintptr_t{1} << 40);
char* const kQ = reinterpret_cast<char*>(uintptr_t{2} << 40);
char* const kScales = reinterpret_cast<char*>(uintptr_t{3} << 40);
char* const kScale = reinterpret_cast<char*>(uintptr_t{4} << 40);

QuantizeProblem problem(int64_t rows, int64_t cols, QuantizeScaling scaling, DType dtype = DType::bf16) {
    return {rows, cols, dtype, DType::fp8_e4m3, scaling};
}

QuantizeProblem static_scale(int64_t rows, int64_t cols) {
    QuantizeProblem p = problem(rows, cols, QuantizeScaling::per_tensor);
    p.static_scale = true;
    return p;
}

}  // namespace

TEST_CASE("Quantize refuses bad problems by name", "[validation][quantize]") {
    const QuantizeScaling token = QuantizeScaling::per_token, block = QuantizeScaling::block_1x128;
    CHECK_THROWS_WITH(Quantize(problem(0, 64, token)), ContainsSubstring("Quantize") && ContainsSubstring("rows must be >= 1"));
    CHECK_THROWS_WITH(Quantize(problem(4, -3, token)), ContainsSubstring("cols must be >= 1"));
    CHECK_THROWS_WITH(Quantize(problem(4, 64, token, DType::fp32)), ContainsSubstring("dtype must be bf16 or fp16, got fp32"));
    CHECK_THROWS_WITH(Quantize(problem(4, 64, token, DType::fp8_e4m3)), ContainsSubstring("dtype must be bf16 or fp16"));
    QuantizeProblem p = problem(4, 64, token);
    p.out_dtype = DType::bf16;
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("out_dtype must be fp8_e4m3, got bf16"));
    p = problem(4, 64, token);
    p.x_stride = 32;
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("x_stride = 32 is smaller than a row"));
    p = problem(4, 64, token);
    p.q_stride = 63;
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("q_stride"));
    p = problem(4, 64, token);
    p.static_scale = true;
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("static_scale applies to per_tensor scaling only"));
    p = problem(4, 64, block);
    p.scale_stride = 3;
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("scale_stride = 3 is smaller than rows = 4"));
    p.scale_stride = -8;
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("scale_stride"));
    p = problem(4, 64, token);
    p.scaling = static_cast<QuantizeScaling>(7);
    CHECK_THROWS_WITH(Quantize(p), ContainsSubstring("scaling must be per_tensor, per_token or block_1x128"));
    CHECK_THROWS_WITH(Quantize(problem(int64_t{1} << 40, int64_t{1} << 30, token)), ContainsSubstring("overflows"));
    // scale_stride means nothing without blocks: a leftover value neither refuses nor keys anything.
    p = problem(4, 64, token);
    p.scale_stride = -7;
    CHECK(Quantize(p).problem().scale_stride == 0);
    p = problem(4, 64, block);
    CHECK(Quantize(p).problem().scale_stride == 4);  // packed by default
    CHECK(Quantize(p).problem().x_stride == 64);
}

TEST_CASE("Quantize checks its operands by name and narrows vectors for misaligned pointers", "[validation][quantize]") {
    const Quantize token(problem(8, 4096, QuantizeScaling::per_token));
    CHECK(token.vector_width({kX}, {kQ, kScales}) == 8);
    CHECK_THROWS_WITH(token.check({kX, kScale}, {kQ, kScales}), ContainsSubstring("inputs") && ContainsSubstring("x"));
    CHECK_THROWS_WITH(token.check({kX}, {kQ}), ContainsSubstring("outputs") && ContainsSubstring("q, scales"));
    CHECK_THROWS_WITH(token.check({nullptr}, {kQ, kScales}), ContainsSubstring("'x' is a null pointer"));
    CHECK_THROWS_WITH(token.check({kX}, {kQ, nullptr}), ContainsSubstring("'scales' is a null pointer"));
    CHECK_THROWS_WITH(token.check({kX}, {kX, kScales}), ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(token.check({kX}, {kQ, kQ + 1000}), ContainsSubstring("overlaps"));  // scales inside q
    CHECK_THROWS_WITH(token.check({kX + 1}, {kQ, kScales}), ContainsSubstring("not aligned to its element size"));
    CHECK_THROWS_WITH(token.check({kX}, {kQ, kScales + 2}), ContainsSubstring("'scales'"));
    // One element off a 16-byte boundary: x one bf16 (2 bytes), q one code (1 byte).
    CHECK(token.vector_width({kX + 2}, {kQ, kScales}) == 1);
    CHECK(token.vector_width({kX + 4}, {kQ, kScales}) == 2);
    CHECK(token.vector_width({kX}, {kQ + 1, kScales}) == 1);
    CHECK(token.vector_width({kX}, {kQ + 4, kScales}) == 4);

    // Views are checked against the problem.
    const TensorView x_view = TensorView::rows(kX, DType::bf16, 8, 4096, 4096);
    const TensorView q_wrong = TensorView::rows(kQ, DType::bf16, 8, 4096, 4096);
    CHECK_THROWS_WITH(token.check({x_view}, {q_wrong, kScales}), ContainsSubstring("'q' has dtype bf16, expected fp8_e4m3"));
    const TensorView scales_wrong = TensorView::contiguous(kScales, DType::fp32, {9});
    CHECK_THROWS_WITH(token.check({x_view}, {kQ, scales_wrong}), ContainsSubstring("'scales' must be a contiguous vector of 8"));

    // Odd cols: one element a vector whatever the pointers.
    const Quantize odd(problem(8, 4095, QuantizeScaling::per_token));
    CHECK(odd.vector_width({kX}, {kQ, kScales}) == 1);

    // Blocks: scales are [ceil(cols / 128), rows] with the problem's scale stride.
    QuantizeProblem bp = problem(8, 1000, QuantizeScaling::block_1x128);
    bp.scale_stride = 16;
    const Quantize block(bp);
    CHECK(block.vector_width({kX}, {kQ, kScales}) == 8);
    const TensorView scales_view = TensorView::rows(kScales, DType::fp32, 8, 8, 16);
    CHECK_NOTHROW(block.check({kX}, {kQ, scales_view}));
    const TensorView packed = TensorView::rows(kScales, DType::fp32, 8, 8, 8);
    CHECK_THROWS_WITH(block.check({kX}, {kQ, packed}), ContainsSubstring("strides [16, 1]"));

    // A static per-tensor scale is an input, and there are no scales to write.
    const Quantize fixed(static_scale(8, 4096));
    CHECK(fixed.vector_width({kX, kScale}, {kQ}) == 8);
    CHECK_THROWS_WITH(fixed.check({kX}, {kQ, kScales}), ContainsSubstring("x, scale"));
    CHECK_THROWS_WITH(fixed.check({kX, kScale}, {kQ, kScales}), ContainsSubstring("expected 1 outputs (q)"));
    CHECK_THROWS_WITH(fixed.check({kX, kQ + 64}, {kQ}), ContainsSubstring("overlaps"));
    const Quantize computed(problem(8, 4096, QuantizeScaling::per_tensor));
    CHECK(computed.vector_width({kX}, {kQ, kScales}) == 8);
}

TEST_CASE("Quantize keys round-trip through the registry", "[config][quantize]") {
    struct Case {
        QuantizeProblem problem;
        const char* key;
    };
    const QuantizeProblem token = problem(4096, 4096, QuantizeScaling::per_token);
    const QuantizeProblem blocks = problem(77, 50257, QuantizeScaling::block_1x128);
    const QuantizeProblem fp16_tensor = problem(16384, 7168, QuantizeScaling::per_tensor, DType::fp16);
    for (const Case& c : {Case{token, "quantize 4096x4096 bf16->fp8_e4m3 [per_token] sm_90a"},
                          Case{blocks, "quantize 77x50257 bf16->fp8_e4m3 [block_1x128] sm_90a"},
                          Case{fp16_tensor, "quantize 16384x7168 fp16->fp8_e4m3 [per_tensor] sm_90a"},
                          Case{static_scale(1, 64), "quantize 1x64 bf16->fp8_e4m3 [per_tensor_static] sm_90a"}}) {
        const Quantize op(c.problem);
        const TuningKey key = op.model().tuning_key("sm_90a", "");
        CHECK(key.to_string() == c.key);
        const auto rebuilt = detail::make_op({key.op, key.shape, key.dtype, key.flags});
        CHECK(rebuilt->describe() == op.describe());
    }
    // The output dtype may be left out: fp8_e4m3 is the only one.
    CHECK(detail::make_op({"quantize", {8, 64}, "fp16", "per_token"})->describe() ==
          "quantize 8x64 fp16->fp8_e4m3 [per_token]");
    CHECK_THROWS_WITH(detail::make_op({"quantize", {8}, "bf16", "per_token"}), ContainsSubstring("rows x cols"));
    CHECK_THROWS_WITH(detail::make_op({"quantize", {8, 64}, "bf16", ""}), ContainsSubstring("needs its scaling as a flag"));
    CHECK_THROWS_WITH(detail::make_op({"quantize", {8, 64}, "bf16", "per_row"}), ContainsSubstring("flag 'per_row'"));
    CHECK_THROWS_WITH(detail::make_op({"quantize", {8, 64}, "bf16", "per_token,block_1x128"}),
                      ContainsSubstring("contradict"));
    CHECK_THROWS_WITH(detail::make_op({"quantize", {8, 64}, "bf16->bf16", "per_token"}), ContainsSubstring("out_dtype"));
    CHECK_THROWS_WITH(detail::make_op({"quantize", {8, 64}, "fp32", "per_token"}),
                      ContainsSubstring("dtype must be bf16 or fp16"));
}

TEST_CASE("Quantize search spaces hold valid configs; hostile configs are refused", "[config][quantize]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    for (const QuantizeScaling scaling :
         {QuantizeScaling::per_token, QuantizeScaling::block_1x128, QuantizeScaling::per_tensor}) {
        for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {16384, 7168}, {1, 64}, {3, 50257},
                                         {100000, 16}, {7, 100}}) {
            const Quantize op(problem(rows, cols, scaling));
            INFO(op.describe());
            const Config heuristic = op.model().heuristic(device);
            CHECK_FALSE(op.model().invalid_reason(heuristic, device).has_value());
            const auto space = op.model().search_space(device);
            CHECK(space.size() >= 4);
            for (const Config& config : space) CHECK_FALSE(op.model().invalid_reason(config, device).has_value());
        }
    }
    const Quantize token(problem(64, 4096, QuantizeScaling::per_token));
    CHECK(token.model().invalid_reason({{"threads_per_row", 96}, {"rows_per_block", 1}, {"items", 4}, {"vec", 8}}, device));
    CHECK(token.model().invalid_reason({{"threads_per_row", 256}, {"rows_per_block", 8}, {"items", 4}, {"vec", 8}}, device));
    CHECK(token.model().invalid_reason({{"threads_per_row", 256}, {"rows_per_block", 1}, {"items", 16}, {"vec", 8}}, device));
    CHECK(token.model().invalid_reason({{"threads_per_row", 256}, {"rows_per_block", 1}, {"items", 0}, {"vec", 8}}, device));
    CHECK(token.model().invalid_reason({{"threads_per_row", 256}, {"rows_per_block", 1}, {"items", 4}, {"vec", 16}}, device));
    CHECK(token.model().invalid_reason({{"threads_per_row", 256}, {"items", 4}, {"vec", 8}}, device));
    CHECK(token.model().invalid_reason({{"threads_per_row", 1LL << 40}, {"rows_per_block", 1}, {"items", 4}, {"vec", 8}}, device));
    const Quantize block(problem(64, 4096, QuantizeScaling::block_1x128));
    CHECK(block.model().invalid_reason({{"threads", 256}, {"lanes", 3}, {"items", 1}, {"vec", 8}}, device));
    CHECK(block.model().invalid_reason({{"threads", 256}, {"lanes", 32}, {"items", 1}, {"vec", 8}}, device));  // 256 columns
    CHECK(block.model().invalid_reason({{"threads", 1024}, {"lanes", 8}, {"items", 4}, {"vec", 8}}, device));  // would spill
    CHECK(block.model().invalid_reason({{"threads", 100}, {"lanes", 16}, {"items", 1}, {"vec", 8}}, device));
    const Quantize tensor(problem(64, 4096, QuantizeScaling::per_tensor));
    CHECK(tensor.model().invalid_reason({{"threads", 1024}, {"items", 8}, {"vec", 8}}, device));
    CHECK_FALSE(tensor.model().invalid_reason({{"threads", 1024}, {"items", 4}, {"vec", 8}}, device));
}

TEST_CASE("Quantize plans: the computed per-tensor scale runs an amax pass first, with a workspace", "[config][quantize]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    const Quantize computed(problem(4096, 4096, QuantizeScaling::per_tensor));
    const Config config = computed.model().heuristic(device);
    const detail::LaunchPlan plan = computed.model().plan(config, 8, device);
    CHECK(plan.template_file == "quantize/per_tensor.cuh");
    CHECK(plan.before.name_expression.find("quantize_tensor_amax_kernel") != std::string::npos);
    CHECK(plan.before.grid[0] * plan.before.grid[1] <= static_cast<unsigned>(device.sm_count * 8));
    CHECK(computed.model().workspace_bytes(config, 8) == 8);
    const Quantize fixed(static_scale(4096, 4096));
    CHECK_FALSE(static_cast<bool>(fixed.model().plan(config, 8, device).before));
    CHECK(fixed.model().workspace_bytes(config, 8) == 0);
    // Contiguous rows run as one long row: 4095 x 4096 elements take 16-byte vectors.
    const Quantize odd(problem(4096, 4095, QuantizeScaling::per_tensor));
    CHECK(odd.vector_width({kX}, {kQ, kScales}) == 8);

    // Blocks: a CTA's teams spread along a row as far as its blocks go, then over rows.
    const Quantize narrow(problem(1000, 100, QuantizeScaling::block_1x128));
    const detail::LaunchPlan narrow_plan =
        narrow.model().plan({{"threads", 256}, {"lanes", 16}, {"items", 1}, {"vec", 4}}, 4, device);
    CHECK(narrow_plan.grid[0] == 1);
    CHECK(narrow_plan.grid[1] == 1000 / 16 + 1);  // 16 teams, each a row
    const Quantize wide(problem(10, 7168, QuantizeScaling::block_1x128));  // 56 blocks
    const detail::LaunchPlan wide_plan =
        wide.model().plan({{"threads", 256}, {"lanes", 16}, {"items", 2}, {"vec", 8}}, 8, device);
    CHECK(wide_plan.grid[0] == 2);  // 16 teams x 2 blocks a tile
    CHECK(wide_plan.grid[1] == 10);

    // per_token at a narrower vector keeps the chunk: items grow.
    const Quantize token(problem(64, 4096, QuantizeScaling::per_token));
    const Config t{{"threads_per_row", 128}, {"rows_per_block", 2}, {"items", 4}, {"vec", 8}};
    CHECK(token.model().plan(t, 8, device).name_expression.find(", 8, 128, 2, 4>") != std::string::npos);
    CHECK(token.model().plan(t, 2, device).name_expression.find(", 2, 128, 2, 16>") != std::string::npos);
}

TEST_CASE("every Quantize config of the search space compiles for sm_80 and sm_90a", "[compile][quantize]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    QuantizeProblem fixed = static_scale(4096, 4096);
    fixed.dtype = DType::fp16;
    for (const QuantizeProblem& p :
         {problem(4096, 4096, QuantizeScaling::per_token), problem(16, 50257, QuantizeScaling::per_token, DType::fp16),
          problem(4096, 7168, QuantizeScaling::block_1x128), problem(64, 100, QuantizeScaling::block_1x128, DType::fp16),
          problem(4096, 4096, QuantizeScaling::per_tensor), fixed}) {
        const Quantize op(p);
        for (const Config& config : op.model().search_space(device))
            for (int vec : op.model().vector_widths(config)) test::add_kernels(kernels, op.model(), config, vec, device);
    }
    REQUIRE(kernels.size() == 3);
    // The held vectors are bounded so that they stay in registers (held_bytes_limit in
    // quantize.cpp, and half as many single elements at a launch width of 1). The kernels declare
    // one CTA an SM as their minimum: with the block size alone, ptxas squeezed some of them below
    // what they hold for occupancy and spilled a few bytes.
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        INFO(arch << " " << name << ": " << report.spill_bytes << " bytes of spill stores");
        CHECK(report.spill_bytes == 0);
    }
}
