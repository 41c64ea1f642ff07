// The MoE routing ops without a GPU: bad problems and operands refused by name, misaligned rows
// taken at narrower vectors, tuning keys that round-trip through the registry (and the CLI's
// flags refused by name), search spaces of valid configs (hostile configs refused), the permute's
// plan (routing kernel first, its workspace), and every config of each search space compiling
// for sm_80 and sm_90a without spills.
#include <cstdint>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/error.hpp"
#include "tileops/moe_routing.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
constexpr unsigned kRouteThreads = 256;  // the routing kernel's block (moe_routing_args.cuh)
constexpr size_t kWorkspaceHeader = 32;  // ints before the per-run counts
// Fake device addresses, a terabyte apart: check() never dereferences them.
char* const kA = reinterpret_cast<char*>(uintptr_t{1} << 40);
char* const kB = reinterpret_cast<char*>(uintptr_t{2} << 40);
char* const kC = reinterpret_cast<char*>(uintptr_t{3} << 40);
char* const kD = reinterpret_cast<char*>(uintptr_t{4} << 40);
char* const kE = reinterpret_cast<char*>(uintptr_t{5} << 40);

MoeTopKProblem topk(int64_t tokens, int64_t experts, int64_t k, MoeScoring scoring = MoeScoring::softmax) {
    MoeTopKProblem p;
    p.tokens = tokens, p.experts = experts, p.k = k, p.scoring = scoring;
    return p;
}

MoeTopKProblem deepseek(int64_t tokens) {
    MoeTopKProblem p = topk(tokens, 256, 8, MoeScoring::sigmoid);
    p.renormalize = true, p.n_group = 8, p.topk_group = 4, p.correction_bias = true, p.routed_scaling_factor = 2.5f;
    return p;
}

MoePermuteProblem masked(int64_t tokens, int64_t hidden, int64_t experts, int64_t k, int64_t capacity) {
    return {tokens, hidden, experts, k, DType::bf16, MoeLayout::masked, capacity};
}

}  // namespace

TEST_CASE("MoeTopK refuses bad problems by name", "[validation][moe_routing]") {
    CHECK_THROWS_WITH(MoeTopK(topk(0, 8, 2)), ContainsSubstring("MoeTopK") && ContainsSubstring("tokens must be in"));
    CHECK_THROWS_WITH(MoeTopK(topk(4, 0, 1)), ContainsSubstring("experts must be in [1, 512], got 0"));
    CHECK_THROWS_WITH(MoeTopK(topk(4, 513, 8)), ContainsSubstring("experts must be in [1, 512], got 513"));
    CHECK_THROWS_WITH(MoeTopK(topk(4, 8, 0)), ContainsSubstring("k must be in [1, 32], got 0"));
    CHECK_THROWS_WITH(MoeTopK(topk(4, 64, 33)), ContainsSubstring("k must be in [1, 32], got 33"));
    CHECK_THROWS_WITH(MoeTopK(topk(4, 8, 9)), ContainsSubstring("k = 9 is more than experts = 8"));
    MoeTopKProblem p = topk(4, 8, 2);
    p.dtype = DType::int32;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("dtype must be fp32, fp16 or bf16, got int32"));
    p = topk(4, 8, 2);
    p.scoring = static_cast<MoeScoring>(5);
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("scoring must be softmax or sigmoid"));
    p = topk(4, 8, 2);
    p.routed_scaling_factor = 1.0f / 0.0f;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("routed_scaling_factor must be finite"));
    p = topk(4, 8, 2);
    p.correction_bias = true;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("correction_bias applies to sigmoid scoring only"));
    p = deepseek(4);
    p.n_group = 7;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("experts = 256 must split into n_group = 7 groups"));
    p = deepseek(4);
    p.n_group = 64;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("n_group must be in [1, 32], got 64"));
    p = deepseek(4);
    p.topk_group = 9;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("topk_group must be in [1, 8], got 9"));
    p = deepseek(4);
    p.topk_group = 1;
    p.k = 33;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("k must be in [1, 32]"));
    p.k = 32;
    p.n_group = 16;  // groups of 16 experts, one kept: fewer than k
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("k = 32 is more than the 16 experts of topk_group = 1 groups"));
    p = topk(4, 8, 2);
    p.logits_stride = 7;
    CHECK_THROWS_WITH(MoeTopK(p), ContainsSubstring("logits_stride = 7 is smaller than a row"));
    // Ungrouped, topk_group means nothing: a leftover value neither refuses nor keys anything.
    p = topk(4, 8, 2);
    p.topk_group = 99;
    CHECK(MoeTopK(p).problem().topk_group == 1);
    CHECK(MoeTopK(p).problem().logits_stride == 8);
    // The limits themselves are accepted.
    CHECK_NOTHROW(MoeTopK(topk(16384, 512, 32)));
    CHECK_NOTHROW(MoeTopK(topk(1, 1, 1)));
    CHECK_NOTHROW(MoeTopK(deepseek(1)));
}

TEST_CASE("MoePermute and MoeUnpermute refuse bad problems by name", "[validation][moe_routing]") {
    CHECK_THROWS_WITH(MoePermute({0, 64, 8, 2}), ContainsSubstring("MoePermute") && ContainsSubstring("tokens must be in"));
    CHECK_THROWS_WITH(MoePermute({4, 0, 8, 2}), ContainsSubstring("hidden must be in"));
    CHECK_THROWS_WITH(MoePermute({4, 64, 600, 2}), ContainsSubstring("experts must be in [1, 512], got 600"));
    CHECK_THROWS_WITH(MoePermute({4, 64, 8, 40}), ContainsSubstring("k must be in [1, 32], got 40"));
    CHECK_THROWS_WITH(MoePermute({4, 64, 8, 2, DType::fp32}), ContainsSubstring("dtype must be bf16, fp16 or fp8_e4m3, got fp32"));
    CHECK_THROWS_WITH(MoePermute({int64_t{1} << 30, 64, 8, 8}), ContainsSubstring("does not fit the int32 row_map"));
    CHECK_THROWS_WITH(MoePermute(masked(4, 64, 8, 2, 0)), ContainsSubstring("capacity must be in"));
    CHECK_THROWS_WITH(MoePermute(masked(4, 64, 256, 2, int64_t{1} << 30)), ContainsSubstring("capacity must be in"));
    MoePermuteProblem p{4, 64, 8, 2};
    p.layout = static_cast<MoeLayout>(9);
    CHECK_THROWS_WITH(MoePermute(p), ContainsSubstring("layout must be contiguous or masked"));
    p = {4, 64, 8, 2};
    p.x_stride = 32;
    CHECK_THROWS_WITH(MoePermute(p), ContainsSubstring("x_stride = 32 is smaller than a row"));
    p = {4, 64, 8, 2};
    p.out_stride = 63;
    CHECK_THROWS_WITH(MoePermute(p), ContainsSubstring("out_stride"));
    p = {4, 64, 8, 2};
    p.capacity = 77;  // contiguous: unused
    CHECK(MoePermute(p).problem().capacity == 0);
    // Scales go with fp8 rows only, one a token or one per 128 elements.
    p = {4, 7168, 8, 2, DType::bf16};
    p.scale_blocks = 56;
    CHECK_THROWS_WITH(MoePermute(p), ContainsSubstring("scale_blocks needs fp8_e4m3 rows, x is bf16"));
    p.dtype = DType::fp8_e4m3;
    CHECK_NOTHROW(MoePermute(p));
    p.scale_blocks = 1;
    CHECK_NOTHROW(MoePermute(p));
    for (const int64_t bad : {int64_t{-1}, int64_t{2}, int64_t{55}, int64_t{57}, int64_t{7168}}) {
        p.scale_blocks = bad;
        CHECK_THROWS_WITH(MoePermute(p), ContainsSubstring("scale_blocks must be 0 (no scales), 1 (a scale a token) or 56"));
    }
    p.scale_blocks = 56;
    p.scales_stride = 3;  // fewer than the 4 tokens
    CHECK_THROWS_WITH(MoePermute(p), ContainsSubstring("scales_stride = 3 is smaller than a row"));
    p.scales_stride = 0;
    CHECK(MoePermute(p).problem().scales_stride == 4);

    CHECK_THROWS_WITH(MoeUnpermute({4, 64, 0}), ContainsSubstring("MoeUnpermute") && ContainsSubstring("k must be in"));
    CHECK_THROWS_WITH(MoeUnpermute({4, 64, 2, DType::fp8_e4m3}), ContainsSubstring("dtype must be bf16 or fp16, got fp8_e4m3"));
    CHECK_THROWS_WITH(MoeUnpermute({4, 64, 2, DType::bf16, -3}), ContainsSubstring("y_rows must be in"));
    MoeUnpermuteProblem u{4, 64, 2};
    u.y_stride = 8;
    CHECK_THROWS_WITH(MoeUnpermute(u), ContainsSubstring("y_stride = 8 is smaller than a row"));
    CHECK(MoeUnpermute({4, 64, 2}).problem().y_rows == 8);  // tokens x k by default
}

TEST_CASE("MoE routing ops check their operands by name and narrow vectors for misaligned rows",
          "[validation][moe_routing]") {
    const MoeTopK router(deepseek(16));
    CHECK(router.vector_width({kA, kB}, {kC, kD}) == 1);
    CHECK_THROWS_WITH(router.check({kA}, {kC, kD}), ContainsSubstring("logits, correction_bias"));
    CHECK_THROWS_WITH(router.check({kA, kB}, {kC}), ContainsSubstring("topk_weights, topk_ids"));
    CHECK_THROWS_WITH(router.check({nullptr, kB}, {kC, kD}), ContainsSubstring("'logits' is a null pointer"));
    CHECK_THROWS_WITH(router.check({kA, nullptr}, {kC, kD}), ContainsSubstring("'correction_bias' is a null pointer"));
    CHECK_THROWS_WITH(router.check({kA, kB}, {kC, kC + 100}), ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(router.check({kA, kB}, {kA, kD}), ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(router.check({kA + 1, kB}, {kC, kD}), ContainsSubstring("not aligned to its element size"));
    const TensorView ids_wrong = TensorView::rows(kD, DType::fp32, 16, 8, 8);
    CHECK_THROWS_WITH(router.check({kA, kB}, {kC, ids_wrong}), ContainsSubstring("'topk_ids' has dtype fp32, expected int32"));
    const TensorView weights_short = TensorView::rows(kC, DType::fp32, 16, 4, 4);
    CHECK_THROWS_WITH(router.check({kA, kB}, {weights_short, kD}), ContainsSubstring("'topk_weights' must have shape [16, 8]"));

    const MoePermute permute({64, 7168, 256, 8});
    CHECK(permute.vector_width({kA, kB}, {kC, kD, kE}) == 8);
    CHECK(permute.vector_width({kA + 2, kB}, {kC, kD, kE}) == 1);  // x one element off 16 bytes
    CHECK(permute.vector_width({kA, kB}, {kC + 4, kD, kE}) == 2);
    CHECK_THROWS_WITH(permute.check({kA}, {kC, kD, kE}), ContainsSubstring("x, topk_ids"));
    CHECK_THROWS_WITH(permute.check({kA, kB}, {kC, kD}), ContainsSubstring("x_perm, expert_offsets, row_map"));
    CHECK_THROWS_WITH(permute.check({kA, nullptr}, {kC, kD, kE}), ContainsSubstring("'topk_ids' is a null pointer"));
    CHECK_THROWS_WITH(permute.check({kA, kB}, {kA, kD, kE}), ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(permute.check({kA, kB}, {kC, kC + 64, kE}), ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(permute.check({kA, kB}, {kC, kD, kB}), ContainsSubstring("overlaps"));
    const TensorView offsets_short = TensorView::contiguous(kD, DType::int32, {256});
    CHECK_THROWS_WITH(permute.check({kA, kB}, {kC, offsets_short, kE}),
                      ContainsSubstring("'expert_offsets' must be a contiguous vector of 257"));
    // fp8 codes take 16-byte vectors of 16 elements.
    CHECK(MoePermute({64, 7168, 256, 8, DType::fp8_e4m3}).vector_width({kA, kB}, {kC, kD, kE}) == 16);
    // An odd row: one element an access.
    CHECK(MoePermute({64, 7167, 256, 8}).vector_width({kA, kB}, {kC, kD, kE}) == 1);

    // With scales: x_scales after topk_ids, perm_scales last; 1 x 128 blocks as [blocks, rows].
    MoePermuteProblem blocks{64, 7168, 256, 8, DType::fp8_e4m3};
    blocks.scale_blocks = 56;
    const MoePermute scaled(blocks);
    char* const kF = reinterpret_cast<char*>(uintptr_t{6} << 40);
    char* const kG = reinterpret_cast<char*>(uintptr_t{7} << 40);
    CHECK_NOTHROW(scaled.check({kA, kB, kF}, {kC, kD, kE, kG}));
    CHECK_THROWS_WITH(scaled.check({kA, kB}, {kC, kD, kE, kG}), ContainsSubstring("x, topk_ids, x_scales"));
    CHECK_THROWS_WITH(scaled.check({kA, kB, kF}, {kC, kD, kE}),
                      ContainsSubstring("x_perm, expert_offsets, row_map, perm_scales"));
    CHECK_THROWS_WITH(scaled.check({kA, kB, nullptr}, {kC, kD, kE, kG}), ContainsSubstring("'x_scales' is a null pointer"));
    CHECK_THROWS_WITH(scaled.check({kA, kB, kF}, {kC, kD, kE, kF}), ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(scaled.check({kA, kB, kF}, {kC, kD, kE, kE}), ContainsSubstring("overlaps"));
    const TensorView scales_view = TensorView::rows(kF, DType::fp32, 56, 64, 64);
    const TensorView perm_view = TensorView::rows(kG, DType::fp32, 56, 512, 512);
    CHECK_NOTHROW(scaled.check({kA, kB, scales_view}, {kC, kD, kE, perm_view}));
    const TensorView perm_wrong = TensorView::rows(kG, DType::fp32, 512, 56, 56);  // rows-major: not what GemmFp8 reads
    CHECK_THROWS_WITH(scaled.check({kA, kB, scales_view}, {kC, kD, kE, perm_wrong}),
                      ContainsSubstring("'perm_scales' must have shape [56, 512]"));
    // One scale a token: plain vectors.
    MoePermuteProblem per_token = masked(64, 7168, 256, 8, 32);
    per_token.dtype = DType::fp8_e4m3, per_token.scale_blocks = 1;
    const TensorView token_scales = TensorView::contiguous(kF, DType::fp32, {64});
    const TensorView slot_scales = TensorView::contiguous(kG, DType::fp32, {256 * 32});
    CHECK_NOTHROW(MoePermute(per_token).check({kA, kB, token_scales}, {kC, kD, kE, slot_scales}));

    const MoePermute drop(masked(64, 512, 16, 8, 40));
    CHECK_THROWS_WITH(drop.check({kA, kB}, {kC, kD}), ContainsSubstring("x_masked, expert_counts, row_map"));
    const TensorView counts_long = TensorView::contiguous(kD, DType::int32, {17});
    CHECK_THROWS_WITH(drop.check({kA, kB}, {kC, counts_long, kE}),
                      ContainsSubstring("'expert_counts' must be a contiguous vector of 16"));
    const TensorView x_masked = TensorView::contiguous(kC, DType::bf16, {16, 40, 512});
    CHECK_NOTHROW(drop.check({kA, kB}, {x_masked, kD, kE}));
    const TensorView x_masked_wrong = TensorView::contiguous(kC, DType::bf16, {16, 41, 512});
    CHECK_THROWS_WITH(drop.check({kA, kB}, {x_masked_wrong, kD, kE}), ContainsSubstring("[experts, capacity, hidden]"));

    const MoeUnpermute unpermute({64, 7168, 8});
    CHECK(unpermute.vector_width({kA, kB, kC}, {kD}) == 8);
    CHECK(unpermute.vector_width({kA + 8, kB, kC}, {kD}) == 4);
    CHECK_THROWS_WITH(unpermute.check({kA, kB}, {kD}), ContainsSubstring("y, row_map, topk_weights"));
    CHECK_THROWS_WITH(unpermute.check({kA, kB, nullptr}, {kD}), ContainsSubstring("'topk_weights' is a null pointer"));
    CHECK_THROWS_WITH(unpermute.check({kA, kB, kC}, {kA}), ContainsSubstring("overlaps"));
    const TensorView y_short = TensorView::rows(kA, DType::bf16, 500, 7168, 7168);
    CHECK_THROWS_WITH(unpermute.check({y_short, kB, kC}, {kD}), ContainsSubstring("'y' must have shape [512, 7168]"));
}

// DeepSeek-V3's serving batch in fp8: 1 x 128 block scales contiguous, or a scale a token masked.
MoePermuteProblem scaled_permute(bool masked_layout) {
    MoePermuteProblem p{4096, 7168, 256, 8, DType::fp8_e4m3};
    if (masked_layout) p.layout = MoeLayout::masked, p.capacity = 64;
    p.scale_blocks = masked_layout ? 1 : 56;
    return p;
}

TEST_CASE("MoE routing keys round-trip through the registry; bad CLI flags are refused by name", "[config][moe_routing]") {
    struct Case {
        std::unique_ptr<Op> op;
        const char* key;
    };
    MoeTopKProblem mixtral = topk(512, 8, 2);
    mixtral.renormalize = true;
    MoeUnpermuteProblem residual{16, 4096, 8, DType::fp16, 256 * 32};
    residual.accumulate = true;
    Case cases[] = {
        {std::make_unique<MoeTopK>(mixtral), "moe_topk 512x8x2 bf16 [softmax,renorm] sm_90a"},
        {std::make_unique<MoeTopK>(deepseek(4096)), "moe_topk 4096x256x8 bf16 [sigmoid,renorm,group8,topk_group4,bias] sm_90a"},
        {std::make_unique<MoePermute>(MoePermuteProblem{4096, 7168, 256, 8}), "moe_permute 4096x7168x256x8 bf16 sm_90a"},
        {std::make_unique<MoePermute>(MoePermuteProblem{64, 7168, 256, 8, DType::fp8_e4m3, MoeLayout::masked, 32}),
         "moe_permute 64x7168x256x8 fp8_e4m3 [capacity32] sm_90a"},
        {std::make_unique<MoePermute>(scaled_permute(false)), "moe_permute 4096x7168x256x8 fp8_e4m3 [scales56] sm_90a"},
        {std::make_unique<MoePermute>(scaled_permute(true)),
         "moe_permute 4096x7168x256x8 fp8_e4m3 [capacity64,scales1] sm_90a"},
        {std::make_unique<MoeUnpermute>(MoeUnpermuteProblem{4096, 7168, 8}), "moe_unpermute 4096x7168x8 bf16 sm_90a"},
        {std::make_unique<MoeUnpermute>(residual), "moe_unpermute 16x4096x8 fp16 [rows8192,accumulate] sm_90a"},
    };
    for (const Case& c : cases) {
        const TuningKey key = c.op->model().tuning_key("sm_90a", "");
        CHECK(key.to_string() == c.key);
        const auto rebuilt = detail::make_op({key.op, key.shape, key.dtype, key.flags});
        CHECK(rebuilt->describe() == c.op->describe());
    }
    using detail::make_op;
    CHECK_THROWS_WITH(make_op({"moe_topk", {8, 64}, "bf16", "softmax"}), ContainsSubstring("tokens x experts x k"));
    CHECK_THROWS_WITH(make_op({"moe_topk", {8, 64, 4}, "bf16", ""}), ContainsSubstring("needs its scoring as a flag"));
    CHECK_THROWS_WITH(make_op({"moe_topk", {8, 64, 4}, "bf16", "softmax,sigmoid"}), ContainsSubstring("given twice"));
    CHECK_THROWS_WITH(make_op({"moe_topk", {8, 64, 4}, "bf16", "softmax,topk"}), ContainsSubstring("flag 'topk'"));
    CHECK_THROWS_WITH(make_op({"moe_topk", {8, 64, 4}, "bf16", "sigmoid,group8"}), ContainsSubstring("go together"));
    CHECK_THROWS_WITH(make_op({"moe_topk", {8, 64, 4}, "bf16", "softmax,bias"}), ContainsSubstring("correction_bias"));
    CHECK_THROWS_WITH(make_op({"moe_permute", {8, 64, 4}, "bf16", ""}), ContainsSubstring("tokens x hidden x experts x k"));
    CHECK_THROWS_WITH(make_op({"moe_permute", {8, 64, 4, 2}, "bf16", "masked"}), ContainsSubstring("flag 'masked'"));
    CHECK_THROWS_WITH(make_op({"moe_permute", {8, 64, 4, 2}, "bf16", "capacity4,capacity8"}), ContainsSubstring("twice"));
    CHECK_THROWS_WITH(make_op({"moe_permute", {8, 64, 4, 2}, "fp8_e4m3", "scales1,scales1"}), ContainsSubstring("twice"));
    CHECK_THROWS_WITH(make_op({"moe_permute", {8, 640, 4, 2}, "fp8_e4m3", "scales4"}), ContainsSubstring("or 5"));
    CHECK_THROWS_WITH(make_op({"moe_permute", {8, 640, 4, 2}, "bf16", "scales5"}), ContainsSubstring("needs fp8_e4m3"));
    CHECK_THROWS_WITH(make_op({"moe_unpermute", {8, 64, 2}, "bf16", "beta"}), ContainsSubstring("flag 'beta'"));
    CHECK(make_op({"moe_permute", {8, 64, 4, 2}, "fp8_e4m3", "capacity4"})->describe() ==
          "moe_permute 8x64x4x2 fp8_e4m3 [capacity4]");
}

TEST_CASE("MoE routing search spaces hold valid configs; hostile configs are refused", "[config][moe_routing]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    std::vector<std::unique_ptr<Op>> ops;
    for (int64_t tokens : {1, 64, 16384}) {
        ops.push_back(std::make_unique<MoeTopK>(topk(tokens, 8, 2)));
        ops.push_back(std::make_unique<MoeTopK>(topk(tokens, 97, 8, MoeScoring::sigmoid)));
        ops.push_back(std::make_unique<MoeTopK>(topk(tokens, 512, 32)));
        ops.push_back(std::make_unique<MoeTopK>(deepseek(tokens)));
        ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{tokens, 7168, 256, 8}));
        ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{tokens, 16, 8, 2, DType::fp8_e4m3}));
        ops.push_back(std::make_unique<MoePermute>(masked(tokens, 2050, 60, 4, 33)));
        ops.push_back(std::make_unique<MoeUnpermute>(MoeUnpermuteProblem{tokens, 7168, 8}));
        ops.push_back(std::make_unique<MoeUnpermute>(MoeUnpermuteProblem{tokens, 3, 1, DType::fp16}));
    }
    for (const auto& op : ops) {
        INFO(op->describe());
        const Config heuristic = op->model().heuristic(device);
        const auto why = op->model().invalid_reason(heuristic, device);
        CHECK_FALSE(why.has_value());
        const auto space = op->model().search_space(device);
        CHECK(space.size() >= 3);
        for (const Config& config : space) CHECK_FALSE(op->model().invalid_reason(config, device).has_value());
    }
    const MoeTopK router(topk(64, 256, 8));
    CHECK(router.model().invalid_reason({{"lanes", 4}, {"threads", 128}}, device));   // fewer lanes than k
    CHECK(router.model().invalid_reason({{"lanes", 12}, {"threads", 120}}, device));  // not a power of two
    CHECK(router.model().invalid_reason({{"lanes", 64}, {"threads", 128}}, device));
    CHECK(router.model().invalid_reason({{"lanes", 32}, {"threads", 2048}}, device));
    CHECK(router.model().invalid_reason({{"lanes", 32}}, device));
    CHECK(MoeTopK(topk(64, 512, 8)).model().invalid_reason({{"lanes", 8}, {"threads", 128}}, device));  // 64 a lane
    CHECK_FALSE(MoeTopK(deepseek(64)).model().invalid_reason({{"lanes", 16}, {"threads", 128}}, device));
    CHECK(MoeTopK(deepseek(64)).model().invalid_reason({{"lanes", 8}, {"threads", 128}}, device));  // 32 a lane
    MoeTopKProblem many_groups = topk(64, 256, 8, MoeScoring::sigmoid);
    many_groups.n_group = 16, many_groups.topk_group = 4;
    CHECK(MoeTopK(many_groups).model().invalid_reason({{"lanes", 8}, {"threads", 128}}, device));  // 16 groups
    const MoePermute permute({64, 7168, 256, 8});
    const Config good{{"threads_per_row", 224}, {"rows_per_block", 1}, {"items", 4}, {"vec", 8}};
    CHECK_FALSE(permute.model().invalid_reason(good, device));
    Config bad = good;
    bad["vec"] = 16;  // 32 bytes
    CHECK(permute.model().invalid_reason(bad, device));
    bad = good, bad["items"] = 8;  // 64 elements a thread
    CHECK(permute.model().invalid_reason(bad, device));
    bad = good, bad["rows_per_block"] = 100;
    CHECK(permute.model().invalid_reason(bad, device));
    bad = good, bad["threads_per_row"] = 100;  // not whole warps
    CHECK(permute.model().invalid_reason(bad, device));
    bad = good, bad.erase("items");
    CHECK(permute.model().invalid_reason(bad, device));
}

TEST_CASE("MoePermute plans its routing kernel first, over at most 128 runs, with a workspace", "[config][moe_routing]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    struct Case {
        int64_t tokens, experts, k;
        unsigned groups;
        const char* route;
    };
    for (const Case& c : {Case{1, 8, 2, 1, "<32>"}, Case{64, 256, 8, 2, "<256>"}, Case{4096, 256, 8, 128, "<256>"},
                          Case{16384, 512, 8, 128, "<512>"}, Case{100000, 60, 4, 121, "<64>"}}) {
        const MoePermute op({c.tokens, 1024, c.experts, c.k});
        INFO(op.describe());
        const Config config = op.model().heuristic(device);
        const detail::LaunchPlan plan = op.model().plan(config, 8, device);
        CHECK(plan.template_file == "moe_routing/permute.cuh");
        CHECK(plan.name_expression.find("moe_permute_gather_kernel<unsigned short, 8,") != std::string::npos);
        CHECK(plan.before.name_expression == std::string("tileops::moe_permute_route_kernel") + c.route);
        CHECK(plan.before.grid[0] == c.groups);
        CHECK(plan.before.block[0] == kRouteThreads);
        CHECK(op.model().workspace_bytes(config, 8) == (kWorkspaceHeader + c.groups * static_cast<size_t>(c.experts)) * sizeof(int));
    }
    // The heuristic of DeepSeek-V3's hidden size: 896 vectors as 224 threads of 4.
    const MoePermute serving({4096, 7168, 256, 8});
    const Config config = serving.model().heuristic(device);
    CHECK(config.at("threads_per_row") == 224);
    CHECK(config.at("items") == 4);
    CHECK(config.at("vec") == 8);
    CHECK(MoeUnpermute({4096, 7168, 8}).model().workspace_bytes(config, 8) == 0);
    CHECK_FALSE(static_cast<bool>(MoeUnpermute({4096, 7168, 8}).model().plan(config, 8, device).before));
}

TEST_CASE("every MoE routing config of the search space compiles for sm_80 and sm_90a", "[compile][moe_routing]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    MoeTopKProblem biased = topk(64, 60, 6, MoeScoring::sigmoid);
    biased.correction_bias = true;
    MoeTopKProblem grouped_softmax = topk(64, 64, 4);
    grouped_softmax.n_group = 4, grouped_softmax.topk_group = 2;
    std::vector<std::unique_ptr<Op>> ops;
    ops.push_back(std::make_unique<MoeTopK>(topk(4096, 8, 2)));
    ops.push_back(std::make_unique<MoeTopK>(deepseek(4096)));
    ops.push_back(std::make_unique<MoeTopK>(biased));
    ops.push_back(std::make_unique<MoeTopK>(grouped_softmax));
    ops.push_back(std::make_unique<MoeTopK>([] {
        MoeTopKProblem p = topk(64, 512, 4);
        p.dtype = DType::fp32;
        return p;
    }()));
    ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{4096, 7168, 256, 8}));
    ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{64, 7168, 512, 8, DType::fp8_e4m3, MoeLayout::masked, 16}));
    ops.push_back(std::make_unique<MoeUnpermute>(MoeUnpermuteProblem{4096, 7168, 8}));
    MoeUnpermuteProblem residual{64, 4096, 6, DType::fp16};
    residual.accumulate = true;
    ops.push_back(std::make_unique<MoeUnpermute>(residual));
    for (const auto& op : ops)
        for (const Config& config : op->model().search_space(device))
            for (int vec : op->model().vector_widths(config)) test::add_kernels(kernels, op->model(), config, vec, device);
    REQUIRE(kernels.size() == 3);  // topk.cuh, permute.cuh, unpermute.cuh
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        INFO(arch << " " << name << ": " << report.spill_bytes << " bytes of spill stores");
        CHECK(report.spill_bytes == 0);
    }
}
