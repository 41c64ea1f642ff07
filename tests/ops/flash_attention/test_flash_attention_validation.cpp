// FlashAttention refuses bad problems and bad operands before any launch, naming what was wrong;
// its configs and the problem factory behave as documented. No GPU needed.
#include <cmath>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ops/flash_attention/flash_attention_config.hpp"
#include "ops/registry.hpp"
#include "core/op_model.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {

// Device addresses that check() never dereferences (test::fake_device_address).
void* const kQ = test::fake_device_address(1);
void* const kK = test::fake_device_address(2);
void* const kV = test::fake_device_address(3);
void* const kCuQ = test::fake_device_address(4);
void* const kCuK = test::fake_device_address(5);
void* const kOut = test::fake_device_address(6);
void* const kLse = test::fake_device_address(7);

FlashAttentionProblem gqa() {
    FlashAttentionProblem p;
    p.batch = 2;
    p.num_heads = 16;
    p.num_kv_heads = 4;
    p.head_dim = 128;
    p.seqlen_q = 1000;
    p.dtype = DType::bf16;
    return p;
}

template <typename Edit>
FlashAttentionProblem with(Edit edit, FlashAttentionProblem p = gqa()) {
    edit(p);
    return p;
}

}  // namespace

TEST_CASE("FlashAttention refuses bad problems by name", "[validation][flash]") {
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.num_heads = 18; })),
                      ContainsSubstring("num_heads (18) must be a multiple of num_kv_heads (4)"));
    CHECK_THROWS_AS(FlashAttention(with([](auto& p) { p.head_dim = 72; })), Unsupported);
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.head_dim = 72; })),
                      ContainsSubstring("head_dim must be a multiple of 16 from 16 to 256, got 72"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.head_dim = 272; })), ContainsSubstring("got 272"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.head_dim = 0; })), ContainsSubstring("head_dim must be"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.head_dim_v = 100; })),
                      ContainsSubstring("head_dim_v must be a multiple of 16 from 16 to 256, got 100"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.head_dim_v = -16; })), ContainsSubstring("head_dim_v must be"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.dtype = DType::fp32; })), ContainsSubstring("dtype must be fp16 or bf16, got fp32"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.seqlen_q = 0; })), ContainsSubstring("seqlen_q must be in [1,"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.seqlen_k = -5; })), ContainsSubstring("seqlen_k must be in [1,"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.batch = 0; })), ContainsSubstring("batch must be in [1, 65535]"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.num_kv_heads = 32; })), ContainsSubstring("num_kv_heads must be in [1, 16]"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.scale = -1.0f; })), ContainsSubstring("scale must be positive"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.window_left = -2; })), ContainsSubstring("window_left must be in [-1,"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.layout = static_cast<AttentionLayout>(7); })),
                      ContainsSubstring("layout 7 is not bshd or bhsd"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.q_seq_stride = 2052; })),
                      ContainsSubstring("q_seq_stride = 2052 must be a multiple of 8 elements"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.k_head_stride = -8; })), ContainsSubstring("k_head_stride must be >= 0"));
    // Output rows that would share elements: heads 64 elements apart but 128 long.
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.o_head_stride = 64; })), ContainsSubstring("make output rows overlap"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.o_seq_stride = 128, p.o_head_stride = 128; })),
                      ContainsSubstring("make output rows overlap"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.total_q = 100; })), ContainsSubstring("total_q and total_k are for varlen"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.varlen = true; })), ContainsSubstring("total_q must be in [1,"));
    // Packed defaults: MHA when num_kv_heads is 0, seqlen_k = seqlen_q, BSHD strides.
    const FlashAttention mha(with([](auto& p) { p.num_kv_heads = 0; }));
    CHECK(mha.problem().num_kv_heads == 16);
    CHECK(mha.problem().seqlen_k == 1000);
    CHECK(mha.problem().q_seq_stride == 16 * 128);
    CHECK(mha.problem().q_head_stride == 128);
    CHECK(mha.problem().q_batch_stride == 1000 * 16 * 128);
    const FlashAttention bhsd(with([](auto& p) { p.layout = AttentionLayout::bhsd; }));
    CHECK(bhsd.problem().k_seq_stride == 128);
    CHECK(bhsd.problem().k_head_stride == 1000 * 128);
    CHECK(bhsd.problem().k_batch_stride == 4 * 1000 * 128);
}

TEST_CASE("FlashAttention checks its operands by name", "[validation][flash]") {
    const FlashAttention op(gqa());
    CHECK_NOTHROW(op.check({kQ, kK, kV}, {kOut}));
    CHECK_THROWS_WITH(op.check({kQ, kK}, {kOut}), ContainsSubstring("expected 3 inputs (q, k, v), got 2"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV}, {kOut, kLse}), ContainsSubstring("expected 1 outputs (out), got 2"));
    CHECK_THROWS_WITH(op.check({kQ, nullptr, kV}, {kOut}), ContainsSubstring("argument 'k' is a null pointer"));
    void* v_off = static_cast<char*>(kV) + 8;
    CHECK_THROWS_WITH(op.check({kQ, kK, v_off}, {kOut}), ContainsSubstring("argument 'v'") && ContainsSubstring("16 bytes"));
    // Views must match the problem: BSHD [batch, seqlen, heads, head_dim].
    CHECK_NOTHROW(op.check({TensorView::contiguous(kQ, DType::bf16, {2, 1000, 16, 128}), kK, kV}, {kOut}));
    CHECK_THROWS_WITH(op.check({TensorView::contiguous(kQ, DType::bf16, {2, 16, 1000, 128}), kK, kV}, {kOut}),
                      ContainsSubstring("argument 'q'") && ContainsSubstring("[batch, seqlen, heads, head_dim]"));
    CHECK_THROWS_WITH(op.check({kQ, TensorView::contiguous(kK, DType::fp16, {2, 1000, 4, 128}), kV}, {kOut}),
                      ContainsSubstring("'k' has dtype fp16, expected bf16"));

    const FlashAttention with_lse(with([](auto& p) { p.return_lse = true; }));
    CHECK_NOTHROW(with_lse.check({kQ, kK, kV}, {kOut, kLse}));
    CHECK_THROWS_WITH(with_lse.check({kQ, kK, kV}, {kOut}), ContainsSubstring("(out, lse)"));
    CHECK_THROWS_WITH(with_lse.check({kQ, kK, kV}, {kOut, TensorView::contiguous(kLse, DType::fp32, {2, 1000, 16})}),
                      ContainsSubstring("argument 'lse'"));

    const FlashAttention varlen(with([](auto& p) { p.varlen = true, p.total_q = 3000, p.total_k = 5000, p.seqlen_k = 4000; }));
    CHECK_NOTHROW(varlen.check({kQ, kK, kV, kCuQ, kCuK}, {kOut}));
    CHECK_THROWS_WITH(varlen.check({kQ, kK, kV}, {kOut}), ContainsSubstring("q, k, v, cu_seqlens_q, cu_seqlens_k"));
    CHECK_THROWS_WITH(varlen.check({kQ, kK, kV, TensorView::contiguous(kCuQ, DType::int32, {2}), kCuK}, {kOut}),
                      ContainsSubstring("argument 'cu_seqlens_q'"));
    CHECK_NOTHROW(varlen.check({kQ, TensorView::contiguous(kK, DType::bf16, {5000, 4, 128}), kV, kCuQ, kCuK}, {kOut}));
}

TEST_CASE("FlashAttention refuses outputs that overlap its inputs or each other", "[validation][flash]") {
    const FlashAttention with_lse(with([](auto& p) { p.return_lse = true; }));
    for (void* out : {kQ, kK, kV, static_cast<void*>(static_cast<char*>(kV) + 4096)})
        CHECK_THROWS_WITH(with_lse.check({kQ, kK, kV}, {out, kLse}), ContainsSubstring("output 'out' overlaps"));
    CHECK_THROWS_WITH(with_lse.check({kQ, kK, kV}, {kOut, kOut}), ContainsSubstring("output 'out' overlaps 'lse'"));
    CHECK_THROWS_WITH(with_lse.check({kQ, kK, kV}, {kOut, kK}), ContainsSubstring("output 'lse' overlaps 'k'"));
    const FlashAttention varlen(with([](auto& p) { p.varlen = true, p.total_q = 3000, p.total_k = 5000, p.seqlen_k = 4000; }));
    CHECK_THROWS_WITH(varlen.check({kQ, kK, kV, kCuQ, kCuK}, {kCuK}), ContainsSubstring("output 'out' overlaps 'cu_seqlens_k'"));
}

TEST_CASE("FlashAttention tensors that overflow 64-bit offsets are refused", "[validation][flash]") {
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.seqlen_q = 1 << 21, p.seqlen_k = 1024, p.o_seq_stride = int64_t{1} << 38; })),
                      ContainsSubstring("overflows"));
    CHECK_THROWS_WITH(FlashAttention(with([](auto& p) { p.seqlen_q = 1 << 21, p.seqlen_k = 1024, p.q_seq_stride = int64_t{1} << 38; })),
                      ContainsSubstring("q spans more than 2^58 elements"));
}

TEST_CASE("FlashAttention configs: the kernel per arch, shared memory, the tuning key", "[validation][flash]") {
    const FlashAttention op(with([](auto& p) { p.causal = true, p.window_left = 256; }));
    const detail::OpModel& model = op.model();
    CHECK(model.describe() == "flash_attention 2x16x4x128x1000x1000 bf16 [causal,window]");
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    const DeviceInfo a100 = DeviceInfo::for_arch("sm_80");
    CHECK(model.heuristic(h100).at("kernel") == 1);
    CHECK(model.heuristic(a100).at("kernel") == 0);
    for (const Config& config : model.search_space(a100)) CHECK(config.at("kernel") == 0);
    const Config tma{{"kernel", 1}, {"block_m", 128}, {"block_n", 128}, {"warps", 12}, {"stages", 2}, {"pingpong", 1}};
    CHECK_FALSE(model.invalid_reason(tma, h100).has_value());
    CHECK_THAT(*model.invalid_reason(tma, a100), ContainsSubstring("needs sm_90"));
    Config odd = tma;
    odd["block_m"] = 96;
    CHECK_THAT(*model.invalid_reason(odd, h100), ContainsSubstring("block_m = 96 is not 64, 128 (or 192 at head dims up to 64)"));
    // One consumer (64 rows, 8 warps): no ping-pong, value head dims up to 192; two blocks an SM.
    const Config one{{"kernel", 1}, {"block_m", 64}, {"block_n", 128}, {"warps", 8}, {"stages", 2}, {"pingpong", 0}};
    CHECK_FALSE(model.invalid_reason(one, h100).has_value());
    Config one_pingpong = one;
    one_pingpong["pingpong"] = 1;
    CHECK_THAT(*model.invalid_reason(one_pingpong, h100), ContainsSubstring("takes no ping-pong"));
    const FlashAttention dv256(with([](auto& p) { p.head_dim = 256; }));
    Config one_64 = one;
    one_64["block_n"] = 64;
    CHECK_THAT(*dv256.model().invalid_reason(one_64, h100), ContainsSubstring("value head dims up to 192"));
    const detail::LaunchPlan one_plan = model.plan(one, 1, h100);
    CHECK(one_plan.block[0] == 256);
    // Head dim 128 with 128-key tiles: about 160 KB of shared memory, so one block an SM.
    CHECK(one_plan.grid[0] == 132);
    // Head dim 64: two blocks an SM fit, 16 x 16 x 2 work tiles of 64 rows over 264 blocks.
    const FlashAttention d64_one(with([](auto& p) { p.head_dim = 64; }));
    CHECK(d64_one.model().plan(one, 1, h100).grid[0] == 264);
    const FlashAttention d64_few(with([](auto& p) { p.head_dim = 64, p.seqlen_q = 64, p.batch = 1; }));
    CHECK(d64_few.model().plan(one, 1, h100).grid[0] == 16);  // one work tile a head
    CHECK(one_plan.name_expression ==
          "tileops::flash_attention_sm90_kernel<__nv_bfloat16, 128, 128, 128, 2, 1, 2, false, true, true>");
    bool searched = false;
    for (const Config& config : model.search_space(h100)) searched |= config.at("block_m") == 64;
    CHECK(searched);
    odd["block_m"] = 192;
    CHECK_THAT(*model.invalid_reason(odd, h100), ContainsSubstring("block_m = 192 is not 64, 128"));
    odd["warps"] = 16;
    const FlashAttention d64(with([](auto& p) { p.head_dim = 64; }));
    CHECK_FALSE(d64.model().invalid_reason(odd, h100).has_value());
    CHECK(d64.model().heuristic(h100).at("block_m") == 192);
    // Short causal sequences at head dim 64 keep 128-row tiles (with three stages); long ones 192.
    const FlashAttention d64_causal(with([](auto& p) { p.head_dim = 64, p.causal = true; }));
    CHECK(d64_causal.model().heuristic(h100).at("block_m") == 128);
    CHECK(d64_causal.model().heuristic(h100).at("stages") == 3);
    const FlashAttention d64_causal_4k(with([](auto& p) { p.head_dim = 64, p.causal = true, p.seqlen_q = 4096; }));
    CHECK(d64_causal_4k.model().heuristic(h100).at("block_m") == 192);
    // Not causal, up to 512 tokens: 64-row tiles with one consumer, two blocks an SM; then 128 or 192.
    const FlashAttention d64_512(with([](auto& p) { p.head_dim = 64, p.seqlen_q = 512, p.seqlen_k = 512; }));
    CHECK(d64_512.model().heuristic(h100) == Config{{"kernel", 1}, {"block_m", 64}, {"block_n", 128}, {"warps", 8},
                                                    {"stages", 2}, {"pingpong", 0}});
    const FlashAttention d64_777(with([](auto& p) { p.head_dim = 64, p.seqlen_q = 777, p.seqlen_k = 777; }));
    CHECK(d64_777.model().heuristic(h100).at("block_m") == 192);
    const FlashAttention d128_256(with([](auto& p) { p.seqlen_q = 256, p.seqlen_k = 256; }));
    CHECK(d128_256.model().heuristic(h100).at("block_m") == 128);
    odd["warps"] = 12;
    CHECK_THAT(*d64.model().invalid_reason(odd, h100), ContainsSubstring("runs 192 query rows with 16 warps, not 12"));
    Config big{{"kernel", 0}, {"block_m", 128}, {"block_n", 128}, {"warps", 8}, {"stages", 3}};
    const FlashAttention d256(with([](auto& p) { p.head_dim = 256; }));
    CHECK_THAT(*d256.model().invalid_reason(big, a100), ContainsSubstring("bytes of shared memory"));
    CHECK_THAT(*model.invalid_reason({{"kernel", 0}}, a100), ContainsSubstring("block_m"));
    const Config spilling{{"kernel", 0}, {"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}};
    CHECK_THAT(*model.invalid_reason(spilling, a100), ContainsSubstring("warps of 32 rows spill registers"));
    const detail::LaunchPlan plan = model.plan(tma, 1, h100);
    CHECK(plan.block[0] == 384);
    CHECK(plan.grid[0] == 132);  // persistent: 8 x 16 x 2 work tiles over the SMs
    const Config sm80{{"kernel", 0}, {"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"stages", 2}};
    const detail::LaunchPlan plan80 = model.plan(sm80, 1, a100);
    CHECK(plan80.grid[0] == 8);  // ceil(1000 / 128)
    CHECK(plan80.grid[1] == 16);
    CHECK(plan80.grid[2] == 2);
    CHECK(plan80.block[0] == 256);
    CHECK(plan.name_expression == "tileops::flash_attention_sm90_kernel<__nv_bfloat16, 128, 128, 128, 2, 2, 2, true, true, true>");
    // The sm_90 kernel takes its work tiles from two counters, causal or not; the sm_80 one has none.
    CHECK(model.workspace_bytes(tma, 1) == 2 * sizeof(int));
    CHECK(d64.model().workspace_bytes(d64.model().heuristic(h100), 1) == 2 * sizeof(int));  // non-causal
    CHECK(model.workspace_bytes(sm80, 1) == 0);
}

TEST_CASE("FlashAttention head dims that are not multiples of 64, and a value head dim of its own", "[validation][flash]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    const DeviceInfo a100 = DeviceInfo::for_arch("sm_80");
    // DeepSeek's prefill: Q and K of 192, V and the output of 128; packed strides follow each dim.
    const FlashAttention mla(with([](auto& p) { p.head_dim = 192, p.head_dim_v = 128; }));
    const FlashAttentionProblem& normalized = mla.problem();
    CHECK(normalized.q_seq_stride == 16 * 192);  // bshd: 16 query heads, 4 KV heads
    CHECK(normalized.k_seq_stride == 4 * 192);
    CHECK(normalized.v_seq_stride == 4 * 128);
    CHECK(normalized.o_seq_stride == 16 * 128);
    CHECK(normalized.scale == Catch::Approx(1.0 / std::sqrt(192.0)));
    CHECK(mla.model().describe() == "flash_attention 2x16x4x192x1000x1000 bf16 [dv128]");
    const Config mla_config = mla.model().heuristic(h100);
    CHECK_FALSE(mla.model().invalid_reason(mla_config, h100).has_value());
    CHECK(mla.model().plan(mla_config, 1, h100).name_expression ==
          "tileops::flash_attention_sm90_kernel<__nv_bfloat16, 192, 128, 128, 2, 2, 1, true, false, false>");
    CHECK_FALSE(mla.model().invalid_reason(mla.model().heuristic(a100), a100).has_value());
    // An equal value head dim adds no flag: the tuning key of head dims 64/128/256 is unchanged.
    const FlashAttention same(with([](auto& p) { p.head_dim = 80, p.head_dim_v = 80; }));
    CHECK(same.model().describe() == "flash_attention 2x16x4x80x1000x1000 bf16");
    for (int64_t d = 16; d <= 256; d += 16) {
        CAPTURE(d);
        const FlashAttention op(with([d](auto& p) { p.head_dim = d; }));
        for (const DeviceInfo& device : {h100, a100}) {
            CHECK_FALSE(op.model().invalid_reason(op.model().heuristic(device), device).has_value());
            CHECK_FALSE(op.model().search_space(device).empty());
        }
    }
    // Shared memory counts rows in whole 128-byte lines: head dim 80 costs what 128 does.
    const Config sm80{{"kernel", 0}, {"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"stages", 2}};
    CHECK(same.model().plan(sm80, 1, a100).shared_bytes == (128 * 128 + 2 * 64 * (128 + 128)) * 2);
    CHECK(mla.model().plan(sm80, 1, a100).shared_bytes == (128 * 192 + 2 * 64 * (192 + 128)) * 2);
    // v and out are checked against the value head dim.
    CHECK_NOTHROW(mla.check({kQ, kK, TensorView::contiguous(kV, DType::bf16, {2, 1000, 4, 128})}, {kOut}));
    CHECK_THROWS_WITH(mla.check({kQ, kK, TensorView::contiguous(kV, DType::bf16, {2, 1000, 4, 192})}, {kOut}),
                      ContainsSubstring("argument 'v'"));
    CHECK_THROWS_WITH(mla.check({kQ, kK, kV}, {TensorView::contiguous(kOut, DType::bf16, {2, 1000, 16, 192})}),
                      ContainsSubstring("argument 'out'"));
}

TEST_CASE("flash_attention through the problem factory", "[validation][flash]") {
    auto op = detail::make_op({"flash_attention", {4, 16, 16, 128, 4096, 4096}, "bf16", "causal"});
    CHECK(op->describe() == "flash_attention 4x16x16x128x4096x4096 bf16 [causal]");
    auto varlen = detail::make_op({"flash_attention", {4, 32, 8, 64, 1024, 2048}, "fp16", "varlen,window128"});
    CHECK(varlen->describe() == "flash_attention 4x32x8x64x1024x2048 fp16 [window,varlen]");
    const auto operands = varlen->model().operands();
    REQUIRE(operands.size() == 6);
    CHECK(operands[3].name == "cu_seqlens_q");
    CHECK(operands[3].fill == detail::OperandFill::multiples);
    CHECK(operands[3].fill_value == 1024);
    CHECK_THROWS_WITH(detail::make_op({"flash_attention", {4, 16, 16, 128}, "bf16", ""}),
                      ContainsSubstring("batch x heads x kv_heads x head_dim x seqlen_q x seqlen_k"));
    CHECK_THROWS_WITH(detail::make_op({"flash_attention", {1, 1, 1, 64, 8, 8}, "bf16", "windowx"}),
                      ContainsSubstring("flag 'windowx' does not apply to flash_attention"));
    // dvN: a value head dim of its own; the key names it, so its entries never serve head_dim_v = head_dim.
    auto deepseek = detail::make_op({"flash_attention", {1, 128, 128, 192, 4096, 4096}, "bf16", "causal,dv128"});
    CHECK(deepseek->describe() == "flash_attention 1x128x128x192x4096x4096 bf16 [causal,dv128]");
    CHECK(deepseek->model().operands()[2].cols == (4096 - 1) * 128 * 128 + (128 - 1) * 128 + 128);  // v
    CHECK_THROWS_WITH(detail::make_op({"flash_attention", {1, 1, 1, 64, 8, 8}, "bf16", "dv0"}),
                      ContainsSubstring("flag 'dv0' does not apply"));
    CHECK_THROWS_WITH(detail::make_op({"flash_attention", {1, 1, 1, 64, 8, 8}, "bf16", "dv72"}),
                      ContainsSubstring("head_dim_v must be a multiple of 16"));
    CHECK_THROWS_WITH(detail::make_op({"flash_attention", {1, 1, 1, 64, 8, 8}, "bf16", "dv64,dv128"}),
                      ContainsSubstring("dv"));
}
