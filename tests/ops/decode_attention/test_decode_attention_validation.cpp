// DecodeAttention refuses bad problems and bad operands before any launch, naming what was wrong;
// its configs, workspace and the problem factory behave as documented. No GPU needed.
#include <algorithm>
#include <cmath>

#include <set>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/kv_chunks.hpp"
#include "core/op_model.hpp"
#include "ops/decode_attention/decode_attention_config.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {

// Device addresses that check() never dereferences (test::fake_device_address).
void* const kQ = test::fake_device_address(1);
void* const kK = test::fake_device_address(2);
void* const kV = test::fake_device_address(3);
void* const kLengths = test::fake_device_address(4);
void* const kPages = test::fake_device_address(5);
void* const kOut = test::fake_device_address(6);
void* const kLse = test::fake_device_address(7);

DecodeAttentionProblem gqa() {
    DecodeAttentionProblem p;
    p.batch = 4;
    p.num_heads = 32;
    p.num_kv_heads = 8;
    p.head_dim = 128;
    p.max_kv_len = 4096;
    p.dtype = DType::bf16;
    return p;
}

DecodeAttentionProblem paged() {
    DecodeAttentionProblem p = gqa();
    p.page_size = 16;
    p.max_pages_per_seq = 256;
    p.num_pages = 1024;
    return p;
}

template <typename Edit>
DecodeAttentionProblem with(Edit edit, DecodeAttentionProblem p = gqa()) {
    edit(p);
    return p;
}

}  // namespace

TEST_CASE("DecodeAttention refuses bad problems by name", "[validation][decode]") {
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.num_heads = 30; })),
                      ContainsSubstring("num_heads (30) must be a multiple of num_kv_heads (8)"));
    for (int64_t head_dim : {0, 8, 72, 120, 264, 512, -16})
        CHECK_THROWS_WITH(DecodeAttention(with([&](auto& p) { p.head_dim = head_dim; })),
                          ContainsSubstring("head_dim must be a multiple of 16 from 16 to 256, got " + std::to_string(head_dim)));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.q_len = 9; })), ContainsSubstring("q_len must be in [1, 8]"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.batch = 0; })), ContainsSubstring("batch must be in [1, 65535]"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.max_kv_len = 0; })), ContainsSubstring("max_kv_len"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.dtype = DType::fp32; })), ContainsSubstring("dtype must be fp16 or bf16"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.dtype = DType::int32; })), ContainsSubstring("got int32"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.scale = -1.0f; })), ContainsSubstring("scale must be positive"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.softcap = -2.0f; })), ContainsSubstring("softcap must be >= 0"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.window_left = -2; })), ContainsSubstring("window_left"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.page_size = 48; }, paged())),
                      ContainsSubstring("page_size must be 16, 32, 64, 128 or 256"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.max_pages_per_seq = 8; }, paged())),
                      ContainsSubstring("max_kv_len (4096) exceeds max_pages_per_seq x page_size (8 x 16)"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.num_pages = 5; })), ContainsSubstring("need page_size > 0"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_token_stride = 1028; })),
                      ContainsSubstring("kv_token_stride = 1028 must be a multiple of 8 elements"));
    CHECK_THROWS_AS(DecodeAttention(with([](auto& p) { p.head_dim = 0; })), InvalidArgument);
    CHECK_THROWS_AS(DecodeAttention(with([](auto& p) { p.head_dim = 72; })), InvalidArgument);
    // An fp8 cache: only e4m3 beside dtype itself, positive finite scales, strides of whole 16-byte pieces.
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp32; })),
                      ContainsSubstring("kv_dtype must be dtype (bf16) or fp8_e4m3, got fp32"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp16; })),
                      ContainsSubstring("kv_dtype must be dtype (bf16) or fp8_e4m3, got fp16"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp8_e4m3, p.k_scale = 0.0f; })),
                      ContainsSubstring("k_scale must be positive and finite, got 0"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp8_e4m3, p.v_scale = std::nanf(""); })),
                      ContainsSubstring("v_scale must be positive and finite"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.k_scale = 2.0f; })),
                      ContainsSubstring("k_scale and v_scale apply to an fp8_e4m3 cache (kv_dtype) only"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp8_e4m3, p.kv_token_stride = 1032; })),
                      ContainsSubstring("kv_token_stride = 1032 must be a multiple of 16 elements"));
    CHECK_NOTHROW(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::bf16; })));  // the same as dtype
    // Output rows that overlap would be written by racing blocks.
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.o_head_stride = 64; })),
                      ContainsSubstring("o_batch_stride = 2048, o_token_stride = 2048 and o_head_stride = 64 make output "
                                        "rows overlap"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.o_token_stride = 2048, p.o_batch_stride = 1024; })),
                      ContainsSubstring("make output rows overlap"));
    // A stride left at 0 packs around the strides given inside it.
    const DecodeAttention padded(with([](auto& p) { p.o_head_stride = 256, p.kv_head_stride = 256; }));
    CHECK(padded.problem().o_token_stride == 32 * 256);
    CHECK(padded.problem().o_batch_stride == padded.problem().q_len * 32 * 256);
    CHECK(padded.problem().kv_token_stride == 8 * 256);
    CHECK(padded.problem().kv_outer_stride == 4096 * 8 * 256);
    const DecodeAttention bhsd(with([](auto& p) { p.kv_head_stride = 4096 * 128, p.kv_token_stride = 128; }));
    CHECK(bhsd.problem().kv_outer_stride == 8 * 4096 * 128);  // the heads span the sequence
    // The row ops refuse the index dtype too.
    CHECK_THROWS_WITH(RmsNorm({4, 16, DType::int32}), ContainsSubstring("dtype must be fp32, fp16 or bf16, got int32"));
}

TEST_CASE("a paged problem as text whose page pool overflows is refused before any arithmetic wraps",
          "[validation][decode]") {
    // batch x pages per sequence does not fit 64 bits: the page count is computed checked, so it
    // is an error naming the pool, not signed overflow (undefined behaviour) before validation.
    const long long batch = 9223372036854775807LL;
    CHECK_THROWS_WITH(detail::make_op({"decode_attention", {batch, 32, 8, 128, 1, 16384}, "bf16", "page16"}),
                      ContainsSubstring("page pool") && ContainsSubstring("does not fit"));
    CHECK_THROWS_WITH(detail::make_op({"mla_decode", {batch, 128, 1, 8192}, "bf16", "page64"}),
                      ContainsSubstring("page pool"));
    CHECK_THROWS_WITH(detail::make_op({"decode_attention", {4, 32, 8, 128, 1, 9223372036854775807LL}, "bf16", "page16"}),
                      ContainsSubstring("tileops"));
}

TEST_CASE("problems as text with contradictory, repeated or malformed flags are refused", "[validation][config]") {
    const auto decode = [](const char* flags) {
        return detail::make_op({"decode_attention", {4, 32, 8, 128, 1, 4096}, "bf16", flags});
    };
    CHECK_THROWS_WITH(decode("page16,kv_fp8,page32"), ContainsSubstring("flag pageN given twice ('page32')"));
    CHECK_THROWS_WITH(decode("kv_fp8,kv_fp8"), ContainsSubstring("flag kv_fp8 given twice"));
    CHECK_THROWS_WITH(decode("page16x"), ContainsSubstring("'page16x' does not apply"));
    CHECK_THROWS_WITH(decode("page+16"), ContainsSubstring("does not apply"));
    CHECK_NOTHROW(decode("page16,kv_fp8"));
    const auto rope = [](const char* flags) { return detail::make_op({"rope", {8, 32, 8, 128}, "bf16", flags}); };
    CHECK_THROWS_WITH(rope("gptj,norot"), ContainsSubstring("contradict"));
    CHECK_THROWS_WITH(rope("norot,rot32"), ContainsSubstring("no rotN"));
    CHECK_THROWS_WITH(rope("rot32,rot64"), ContainsSubstring("rotN given twice"));
    CHECK_THROWS_WITH(detail::make_op({"flash_attention", {2, 16, 16, 128, 512, 512}, "bf16", "causal,causal"}),
                      ContainsSubstring("causal given twice"));
    CHECK_THROWS_WITH(detail::make_op({"gemm", {64, 64, 64}, "bf16", "nt,nt"}), ContainsSubstring("nt given twice"));
}

TEST_CASE("DecodeAttention checks its operands by name", "[validation][decode]") {
    DecodeAttention op(gqa());
    CHECK_NOTHROW(op.check({kQ, kK, kV, kLengths}, {kOut}));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV}, {kOut}), ContainsSubstring("expected 4 inputs (q, k, v, lengths), got 3"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kLengths}, {kOut, kLse}), ContainsSubstring("expected 1 outputs (out), got 2"));
    CHECK_THROWS_WITH(op.check({kQ, nullptr, kV, kLengths}, {kOut}), ContainsSubstring("argument 'k' is a null pointer"));
    void* k_off = static_cast<char*>(kK) + 8;
    CHECK_THROWS_WITH(op.check({kQ, k_off, kV, kLengths}, {kOut}), ContainsSubstring("argument 'k'") && ContainsSubstring("16 bytes"));
    void* q_odd = static_cast<char*>(kQ) + 1;
    CHECK_THROWS_WITH(op.check({q_odd, kK, kV, kLengths}, {kOut}), ContainsSubstring("argument 'q'") && ContainsSubstring("aligned"));
    // Views must agree: lengths are int32, k has the cache's shape.
    const TensorView lengths_fp32 = TensorView::contiguous(kLengths, DType::fp32, {4});
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, lengths_fp32}, {kOut}), ContainsSubstring("'lengths' has dtype fp32, expected int32"));
    const TensorView k_bhsd = TensorView::contiguous(kK, DType::bf16, {4, 8, 4096, 128});
    CHECK_THROWS_WITH(op.check({kQ, k_bhsd, kV, kLengths}, {kOut}),
                      ContainsSubstring("'k' must have shape [batch, max_kv_len, num_kv_heads, head_dim] = [4, 4096, 8, 128]"));
    const TensorView k_view = TensorView::contiguous(kK, DType::bf16, {4, 4096, 8, 128});
    CHECK_NOTHROW(op.check({TensorView::contiguous(kQ, DType::bf16, {4, 1, 32, 128}), k_view, kV,
                            TensorView::contiguous(kLengths, DType::int32, {4})},
                           {TensorView::contiguous(kOut, DType::bf16, {4, 1, 32, 128})}));

    // A view of an impossible rank is refused by name (its shape is not read past its four slots).
    for (int rank : {-1, 5, 1 << 20}) {
        TensorView bad = TensorView::contiguous(kK, DType::bf16, {4, 4096, 8, 128});
        bad.rank = rank;
        CHECK_THROWS_WITH(op.check({kQ, bad, kV, kLengths}, {kOut}), ContainsSubstring("'k' has rank " + std::to_string(rank)));
    }

    DecodeAttentionProblem with_lse = paged();
    with_lse.return_lse = true;
    DecodeAttention paged_op(with_lse);
    CHECK_NOTHROW(paged_op.check({kQ, kK, kV, kLengths, kPages}, {kOut, kLse}));
    CHECK_THROWS_WITH(paged_op.check({kQ, kK, kV, kLengths}, {kOut, kLse}), ContainsSubstring("q, k, v, lengths, page_table"));
    CHECK_THROWS_WITH(paged_op.check({kQ, kK, kV, kLengths, kPages}, {kOut}), ContainsSubstring("(out, lse)"));
    CHECK_THROWS_WITH(paged_op.check({kQ, kK, kV, kLengths, TensorView::contiguous(kPages, DType::int32, {4, 128})}, {kOut, kLse}),
                      ContainsSubstring("'page_table' must have shape [batch, max_pages_per_seq] = [4, 256]"));
}

TEST_CASE("DecodeAttention refuses outputs that overlap its inputs or each other", "[validation][decode]") {
    DecodeAttentionProblem with_lse = paged();
    with_lse.return_lse = true;
    const DecodeAttention op(with_lse);
    void* const in_k = static_cast<char*>(kK) + 4096;  // inside the cache
    for (void* out : {kQ, kK, in_k, kV, kLengths, kPages})
        CHECK_THROWS_WITH(op.check({kQ, kK, kV, kLengths, kPages}, {out, kLse}),
                          ContainsSubstring("output 'out' overlaps") && ContainsSubstring("must be apart"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kLengths, kPages}, {kOut, kLengths}), ContainsSubstring("output 'lse' overlaps 'lengths'"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kLengths, kPages}, {kOut, kOut}), ContainsSubstring("output 'out' overlaps 'lse'"));
    // Just past q's last element is apart: 4 x 32 rows of 128 bf16.
    CHECK_NOTHROW(op.check({kQ, kK, kV, kLengths, kPages}, {static_cast<char*>(kQ) + 4 * 32 * 128 * 2, kLse}));
}

TEST_CASE("DecodeAttention strides whose tensors overflow 64-bit offsets are refused", "[validation][decode]") {
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.num_heads = 24, p.o_batch_stride = 128, p.o_head_stride = int64_t{1} << 58; })),
                      ContainsSubstring("o_token_stride") && ContainsSubstring("2^58"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.q_head_stride = int64_t{1} << 61; })),
                      ContainsSubstring("q_head_stride") && ContainsSubstring("larger than supported"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.q_batch_stride = int64_t{1} << 57; })),
                      ContainsSubstring("q spans more than 2^58 elements"));
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_outer_stride = int64_t{1} << 57; })),
                      ContainsSubstring("each of k and v spans more than 2^58 elements"));
    // The packed stride around a huge given one saturates and is refused, not wrapped.
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_head_stride = int64_t{1} << 56; })), ContainsSubstring("2^58"));
    // Subnormal fp8 scales would underflow the softmax scale to zero.
    CHECK_THROWS_WITH(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp8_e4m3, p.k_scale = 1e-45f; })),
                      ContainsSubstring("k_scale") && ContainsSubstring("subnormal"));
    CHECK_NOTHROW(DecodeAttention(with([](auto& p) { p.kv_dtype = DType::fp8_e4m3, p.v_scale = 1e-30f; })));
}

TEST_CASE("DecodeAttention over an fp8 cache: operands of one byte, on either kernel", "[validation][decode]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    DecodeAttentionProblem p = gqa();
    p.kv_dtype = DType::fp8_e4m3;
    p.k_scale = 0.5f;
    DecodeAttention op(p);
    CHECK_NOTHROW(op.check({kQ, kK, kV, kLengths}, {kOut}));
    // k as bf16 where the problem says fp8.
    CHECK_THROWS_WITH(op.check({kQ, TensorView::contiguous(kK, DType::bf16, {4, 4096, 8, 128}), kV, kLengths}, {kOut}),
                      ContainsSubstring("'k'"));
    const detail::OpModel& model = op.model();
    CHECK(model.flags() == "kv_fp8");
    CHECK(DecodeAttention(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3; }, paged())).model().flags() == "page16,kv_fp8");
    // GQA 4 at batch 4: the CUDA cores; at batch 64 (filling the GPU) or with more than 8 rows a KV
    // head, the tensor cores, which widen the codes in a kernel that takes v_scale.
    CHECK(model.heuristic(h100).at("kernel") == detail::kDecodeCudaCores);
    CHECK(DecodeAttention(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.batch = 64; })).model().heuristic(h100).at("kernel") ==
          detail::kDecodeTensorCores);
    CHECK(DecodeAttention(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.num_kv_heads = 2; })).model().heuristic(h100).at(
              "kernel") == detail::kDecodeTensorCores);
    CHECK(DecodeAttention(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.batch = 64, q.num_kv_heads = 32; }))
              .model()
              .heuristic(h100)
              .at("kernel") == detail::kDecodeCudaCores);  // MHA
    // Past head dim 128 a batch that fills the GPU keeps the CUDA cores (the tensor-core kernel's
    // two warps lost there), unless more than 8 rows share a KV head.
    CHECK(DecodeAttention(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.batch = 128, q.head_dim = 256; }))
              .model()
              .heuristic(h100)
              .at("kernel") == detail::kDecodeCudaCores);
    CHECK(DecodeAttention(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 256, q.num_kv_heads = 2; }))
              .model()
              .heuristic(h100)
              .at("kernel") == detail::kDecodeTensorCores);
    const Config tensor_cores{{"kernel", 1}, {"warps", 4}, {"tile", 16}, {"stages", 3}, {"splits", 1}};
    CHECK_FALSE(model.invalid_reason(tensor_cores, h100).has_value());
    CHECK_FALSE(model.invalid_reason(model.heuristic(h100), h100).has_value());
    CHECK(model.plan(tensor_cores, 1, h100).name_expression.find("decode_attention_mma_fp8_kernel<__nv_bfloat16, 128") !=
          std::string::npos);
    int kernels[2] = {0, 0};
    for (const Config& config : model.search_space(h100)) ++kernels[config.at("kernel")];
    CHECK(kernels[detail::kDecodeCudaCores] > 0);
    CHECK(kernels[detail::kDecodeTensorCores] > 0);
    const Config cuda_cores{{"kernel", 0}, {"rows", 4}, {"warps", 8}, {"unroll", 2}, {"stages", 2}, {"splits", 1}};
    CHECK(model.plan(cuda_cores, 1, h100).name_expression.find("__nv_fp8_e4m3") != std::string::npos);
    // Tiles of 16 keys at head dim 80 are 80 chunks of codes, not whole copies of a warp: 32 keys are.
    DecodeAttention dim80(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 80; }));
    const Config tile16{{"kernel", 1}, {"warps", 4}, {"tile", 16}, {"stages", 3}, {"splits", 1}};
    CHECK(dim80.model().invalid_reason(tile16, h100).value_or("").find("not whole 16-byte copies") != std::string::npos);
    DecodeAttention dim80_batch(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 80, q.batch = 64; }));
    CHECK(dim80_batch.model().heuristic(h100).at("tile") == 32);
    CHECK_FALSE(dim80_batch.model().invalid_reason(dim80_batch.model().heuristic(h100), h100).has_value());
    // Head dim 16: a row is one copy; the tensor cores refuse it, the heuristic keeps the CUDA cores.
    DecodeAttention dim16(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 16, q.batch = 64; }));
    CHECK(dim16.model().invalid_reason(tile16, h100).value_or("").find("head dim 32 or more") != std::string::npos);
    CHECK(dim16.model().heuristic(h100).at("kernel") == detail::kDecodeCudaCores);
}

TEST_CASE("DecodeAttention configs: heuristic valid, workspace only where keys are split", "[decode]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    for (auto p : {gqa(), paged(), with([](auto& q) { q.batch = 1; q.max_kv_len = 100000; }),
                   with([](auto& q) { q.batch = 256; q.num_heads = 8; q.q_len = 8; })}) {
        DecodeAttention op(p);
        const detail::OpModel& model = op.model();
        INFO(model.describe());
        const Config heuristic = model.heuristic(h100);
        CHECK_FALSE(model.invalid_reason(heuristic, h100).has_value());
        CHECK_FALSE(model.search_space(h100).empty());
        for (const Config& config : model.search_space(h100)) {
            const size_t bytes = model.workspace_bytes(config, 1);
            // A batch's keys are cut by the lengths on the device: any sequence may be split.
            CHECK((config.at("splits") > 1 || p.batch > 1) == (bytes > 0));
        }
    }
    // A long single sequence is split; a large batch of short ones is not.
    CHECK(DecodeAttention(with([](auto& q) { q.batch = 1; q.max_kv_len = 100000; })).model().heuristic(h100).at("splits") > 8);
    CHECK(DecodeAttention(with([](auto& q) { q.batch = 256; q.max_kv_len = 1024; })).model().heuristic(h100).at("splits") == 1);
    // GQA takes the tensor-core kernel; one row per KV head (MHA, one token) too when batch x kv
    // heads fills the GPU, else the CUDA-core kernel.
    CHECK(DecodeAttention(gqa()).model().heuristic(h100).at("kernel") == detail::kDecodeTensorCores);
    CHECK(DecodeAttention(with([](auto& q) { q.num_heads = 8; })).model().heuristic(h100).at("kernel") ==
          detail::kDecodeCudaCores);
    CHECK(DecodeAttention(with([](auto& q) { q.num_heads = 8, q.batch = 32; })).model().heuristic(h100).at("kernel") ==
          detail::kDecodeTensorCores);
    // Configs that cannot run are refused with a reason.
    DecodeAttention op(gqa());
    Config bad{{"kernel", 0}, {"rows", 3}, {"warps", 4}, {"unroll", 2}, {"stages", 2}, {"splits", 1}};
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("rows = 3") != std::string::npos);
    bad.erase("stages");
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("'stages'") != std::string::npos);
    bad = op.model().heuristic(h100);
    bad["tile"] = 24;
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("tile = 24") != std::string::npos);
    bad["tile"] = 32;
    bad["stages"] = 8;
    bad["warps"] = 8;  // 8 x 8 x 16 KB of ring
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("shared memory") != std::string::npos);
    bad.erase("kernel");
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("'kernel'") != std::string::npos);
}

TEST_CASE("DecodeAttention's CUDA-core kernel takes at most 4 rows over an fp8 cache", "[validation][decode]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    // 32 rows a KV head (GQA 4, 8 query tokens): 8 rows of widened fp8 keys spill (compile test).
    const DecodeAttention fp8(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.q_len = 8; }, paged()));
    const Config eight{{"kernel", detail::kDecodeCudaCores}, {"rows", 8}, {"warps", 4}, {"unroll", 1}, {"stages", 2},
                       {"splits", 1}};
    CHECK(fp8.model().invalid_reason(eight, h100).value_or("").find("fp8 cache spill") != std::string::npos);
    Config four = eight;
    four["rows"] = 4;
    CHECK_FALSE(fp8.model().invalid_reason(four, h100));
    for (const Config& config : fp8.model().search_space(h100))
        if (config.at("kernel") == detail::kDecodeCudaCores) CHECK(config.at("rows") <= 4);
    // A 16-bit cache keeps 8.
    const DecodeAttention bf16(with([](auto& q) { q.q_len = 8; }));
    CHECK_FALSE(bf16.model().invalid_reason(eight, h100));
}

TEST_CASE("DecodeAttention may split more than 16 rows of a KV head over the warps", "[validation][decode]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    // 16 rows or fewer: one CTA of 16 rows, the warps splitting the keys.
    for (auto p : {gqa(), with([](auto& q) { q.q_len = 4; }), with([](auto& q) { q.num_heads = 64, q.q_len = 2; })}) {
        const DecodeAttention op(p);
        CHECK(op.model().heuristic(h100).count("row_warps") == 0);
        for (const Config& config : op.model().search_space(h100)) CHECK(config.count("row_warps") == 0);
    }
    // More: in the search space (16 rows a warp), never the heuristic's (it lost on most such
    // batches on an H100). Falcon's 71 heads on one KV head, 4 tokens: 284 rows in 5 CTAs of 64
    // with four warps instead of 18 of 16.
    const DecodeAttention falcon_op(with([](auto& q) { q.num_heads = 71, q.num_kv_heads = 1, q.head_dim = 64, q.q_len = 4; }));
    CHECK(falcon_op.model().heuristic(h100).count("row_warps") == 0);
    const Config falcon{{"kernel", detail::kDecodeTensorCores}, {"warps", 4}, {"tile", 16}, {"stages", 4}, {"splits", 1},
                        {"row_warps", 1}};
    const auto space = falcon_op.model().search_space(h100);
    CHECK(std::find(space.begin(), space.end(), falcon) != space.end());
    const detail::DecodeShape shape = detail::decode_shape(falcon_op.problem());
    const detail::DecodeLaunch l = detail::decode_launch(shape, falcon);
    CHECK(l.rows == 64);
    CHECK(l.row_blocks == 5);
    // Configs that cannot run are refused with a reason.
    const auto refusal = [&](const DecodeAttention& op, Config config) {
        return op.model().invalid_reason(config, h100).value_or("");
    };
    Config bad = falcon;
    bad["row_warps"] = 2;
    CHECK(refusal(falcon_op, bad).find("row_warps = 2") != std::string::npos);
    bad["row_warps"] = 1;
    bad["warps"] = 1;
    CHECK(refusal(falcon_op, bad).find("2 warps or more") != std::string::npos);
    bad["warps"] = 8;  // 16 keys of head dim 64: 4 copies a lane, not a whole number for 8 warps
    bad["tile"] = 16;
    CHECK(refusal(falcon_op, bad).find("do not split") != std::string::npos);
    CHECK(refusal(falcon_op, {{"kernel", 0}, {"rows", 4}, {"warps", 4}, {"unroll", 2}, {"stages", 2}, {"splits", 1},
                              {"row_warps", 1}})
              .find("kernel 1") != std::string::npos);
    // 128 rows of head dim 256: a 64 KB query tile, more than a kernel may declare statically.
    const DecodeAttention wide(with([](auto& q) { q.head_dim = 256, q.num_heads = 64, q.q_len = 4; }));
    CHECK(refusal(wide, {{"kernel", 1}, {"warps", 8}, {"tile", 16}, {"stages", 2}, {"splits", 1}, {"row_warps", 1}})
              .find("static shared memory") != std::string::npos);
    for (const Config& config : wide.model().search_space(h100)) CHECK(refusal(wide, config).empty());
}

// The fp8 kernel's launch bounds hold four warps on 16-key tiles up to head dim 128 to the registers
// of three CTAs an SM; the heuristic's ring must leave room for three in an H100's or H200's 228 KB
// of shared memory (1 KB of each CTA's is the driver's).
TEST_CASE("DecodeAttention over an fp8 cache: the heuristic's tensor-core CTAs fit three an SM", "[validation][decode]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    for (int64_t head_dim : {64, 96, 128}) {
        CAPTURE(head_dim);
        const DecodeAttention op(with([&](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.batch = 64, q.head_dim = head_dim; }));
        const Config config = op.model().heuristic(h100);
        REQUIRE(config.at("kernel") == detail::kDecodeTensorCores);
        CHECK(config.at("warps") == 4);
        CHECK(config.at("tile") == 16);
        const detail::DecodeLaunch l = detail::decode_launch(detail::decode_shape(op.problem()), config);
        CHECK(3 * (l.dynamic_shared_bytes + l.static_shared_bytes + 1024) <= 228 * 1024);
    }
}

TEST_CASE("DecodeAttention takes every head dim that is a multiple of 16 up to 256", "[validation][decode]") {
    for (const char* arch : {"sm_80", "sm_90a"}) {
        const DeviceInfo device = DeviceInfo::for_arch(arch);
        for (int64_t head_dim = 16; head_dim <= 256; head_dim += 16)
            for (auto p : {with([&](auto& q) { q.head_dim = head_dim; }),
                           with([&](auto& q) { q.head_dim = head_dim, q.num_heads = 8, q.batch = 1; }),  // MHA: CUDA cores
                           with([&](auto& q) { q.head_dim = head_dim, q.kv_dtype = DType::fp8_e4m3; }, paged())}) {
                DecodeAttention op(p);
                const detail::OpModel& model = op.model();
                INFO(arch << ": " << model.describe());
                const Config heuristic = model.heuristic(device);
                CHECK_FALSE(model.invalid_reason(heuristic, device).has_value());
                // The head dim follows the element types in the template arguments: the CUDA-core
                // kernel names the cache's, the tensor cores' kernels only the query's (the fp8 one
                // says so in its name).
                const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
                const std::string types = heuristic.at("kernel") == detail::kDecodeCudaCores
                                              ? std::string("_kernel<__nv_bfloat16, ") + (fp8 ? "__nv_fp8_e4m3" : "__nv_bfloat16")
                                              : std::string(fp8 ? "_fp8" : "") + "_kernel<__nv_bfloat16";
                CHECK_THAT(model.plan(heuristic, 1, device).name_expression,
                           ContainsSubstring(types + ", " + std::to_string(head_dim) + ", "));
                CHECK_FALSE(model.search_space(device).empty());
            }
    }
    // Shared memory as the kernels lay it out. Tensor cores at head dim 80: rows of 10 16-byte
    // chunks are padded to 11 (88 elements); at 128 they are swizzled, unpadded.
    const auto launch = [](const DecodeAttentionProblem& p, const Config& config) {
        return detail::decode_launch(detail::decode_shape(DecodeAttention(p).problem()), config);
    };
    const Config mma{{"kernel", 1}, {"warps", 4}, {"tile", 16}, {"stages", 3}, {"splits", 1}};
    const detail::DecodeLaunch mma80 = launch(with([](auto& q) { q.head_dim = 80; }), mma);
    CHECK(mma80.dynamic_shared_bytes == 4 * 3 * (2 * 16 * 88 * 2 + 4));
    CHECK(mma80.static_shared_bytes == 16 * 88 * 2 + kKvChunkSharedBytes);
    CHECK(launch(gqa(), mma).dynamic_shared_bytes == 4 * 3 * (2 * 16 * 128 * 2 + 4));
    // fp8: a ring of codes, then a widened tile of keys and one of values per warp.
    CHECK(launch(with([](auto& q) { q.kv_dtype = DType::fp8_e4m3; }), mma).dynamic_shared_bytes ==
          4 * (3 * (2 * 16 * 128 + 4) + 2 * 16 * 128 * 2));
    // CUDA cores: the fp32 query tile spans the idle lanes too (fp8 at 80: 5 slices on 8 lanes).
    const Config cuda_cores{{"kernel", 0}, {"rows", 4}, {"warps", 8}, {"unroll", 2}, {"stages", 2}, {"splits", 1}};
    CHECK(launch(with([](auto& q) { q.head_dim = 80, q.kv_dtype = DType::fp8_e4m3; }), cuda_cores).static_shared_bytes ==
          4 * 128 * 4 + kKvChunkSharedBytes);
    CHECK(launch(with([](auto& q) { q.head_dim = 80; }), cuda_cores).static_shared_bytes == 4 * 128 * 4 + kKvChunkSharedBytes);
    CHECK(launch(with([](auto& q) { q.head_dim = 96; }), cuda_cores).static_shared_bytes == 4 * 128 * 4 + kKvChunkSharedBytes);
    CHECK(launch(with([](auto& q) { q.head_dim = 192; }), cuda_cores).static_shared_bytes == 4 * 256 * 4 + kKvChunkSharedBytes);
    // The tensor-core default keeps a ring of about 96 KB or less: four warps up to 128, two above.
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    for (int64_t head_dim : {80, 96, 112, 128, 160, 192, 256}) {
        const Config heuristic = DecodeAttention(with([&](auto& q) { q.head_dim = head_dim; })).model().heuristic(h100);
        CHECK(heuristic.at("kernel") == detail::kDecodeTensorCores);
        CHECK(heuristic.at("warps") == (head_dim <= 128 ? 4 : 2));
    }
    // MHA batches (one row a KV head, chunks cut by the lengths): two warps on two stages; a
    // single sequence, GQA and fp8 caches keep their rules.
    const auto mha = [&](int64_t batch, int64_t head_dim, bool fp8) {
        return DecodeAttention(with([&](auto& q) {
                   q.batch = batch, q.num_kv_heads = 32, q.head_dim = head_dim;
                   if (fp8) q.kv_dtype = DType::fp8_e4m3;
               }))
            .model()
            .heuristic(h100);
    };
    for (int64_t head_dim : {64, 96, 128}) {
        const Config batch = mha(256, head_dim, false);
        CHECK(batch.at("kernel") == detail::kDecodeTensorCores);
        CHECK((batch.at("warps") == 2 && batch.at("stages") == 2));
    }
    CHECK(mha(256, 256, false).at("stages") == 3);
    CHECK(mha(1, 128, false).at("kernel") == detail::kDecodeCudaCores);
    const Config fp8_batch = mha(256, 128, true);
    CHECK_FALSE((fp8_batch.at("kernel") == detail::kDecodeTensorCores && fp8_batch.at("warps") == 2));
    // Tiles of 32 keys are refused where rows copied chunk by chunk would spill (past 128, unless
    // the rows are whole 128-byte lines: 192, 256), and left out of the search space there.
    const Config tile32{{"kernel", 1}, {"warps", 2}, {"tile", 32}, {"stages", 2}, {"splits", 1}};
    for (int64_t head_dim : {80, 112, 160, 192, 240, 256}) {
        const DecodeAttention op(with([&](auto& q) { q.head_dim = head_dim; }));
        const bool spills = head_dim == 160 || head_dim == 240;
        CAPTURE(head_dim);
        CHECK(op.model().invalid_reason(tile32, h100).has_value() == spills);
        for (const Config& config : op.model().search_space(h100))
            CHECK_FALSE(op.model().invalid_reason(config, h100).has_value());
    }
}

namespace {

// Every kernel of the search spaces of the problems below that `template_file` holds, compiled for
// `arch`: none may spill. The kernels of one arch and file are cut in three parts (the names at
// positions part.index, + part.count, ...), a test case each: all of a file for sm_80 took more
// than CTest's 15-minute limit on a slow two-core machine.
void check_decode_kernels_compile_without_spills(const std::string& arch, const std::string& template_file,
                                                 test::Shard part) {
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    std::map<std::string, size_t> counted_static_bytes;  // main kernel -> the least the host counts for it
    // Batches (keys cut by the lengths on the device) and a single sequence (fixed splits); head
    // dims between the powers of two: 80 (an odd number of k-steps, pages of 16 under tiles of
    // 32), 192 (Q in registers at its limit) and 96 over an fp8 cache (6 slices on 8 lanes; codes
    // copied in row order on the tensor cores). More than 16 rows a KV head, where the warps may
    // split the rows: Falcon's 71/1 heads with 4 query tokens, head dim 80 (copies chunk by chunk),
    // 256 (Q read per tile) and an fp8 cache.
    for (auto p : {gqa(), with([](auto& q) { q.batch = 1; }), with([](auto& q) { q.dtype = DType::fp16, q.head_dim = 64; }, paged()),
                   with([](auto& q) { q.head_dim = 256, q.page_size = 64, q.max_pages_per_seq = 64; }, paged()),
                   with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.dtype = DType::fp16; }),
                   with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 256, q.num_heads = 8; }, paged()),
                   with([](auto& q) { q.head_dim = 80; }, paged()),
                   with([](auto& q) { q.dtype = DType::fp16, q.head_dim = 192, q.batch = 1; }),
                   with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 96; }, paged()),
                   with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 160; }, paged()),
                   with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.head_dim = 192; }),
                   with([](auto& q) { q.num_heads = 71, q.num_kv_heads = 1, q.head_dim = 64, q.q_len = 4; }, paged()),
                   with([](auto& q) { q.head_dim = 80, q.q_len = 6; }),
                   with([](auto& q) { q.head_dim = 256, q.q_len = 8, q.batch = 1; }),
                   with([](auto& q) { q.kv_dtype = DType::fp8_e4m3, q.q_len = 8; }, paged())}) {
        DecodeAttention op(p);
        const detail::DecodeShape shape = detail::decode_shape(op.problem());
        for (const Config& config : op.model().search_space(device)) {
            test::add_kernels(kernels, op.model(), config, 1, device);
            const std::string name = op.model().plan(config, 1, device).name_expression;
            const size_t counted = detail::decode_launch(shape, config).static_shared_bytes;
            const auto [it, added] = counted_static_bytes.emplace(name, counted);
            if (!added) it->second = std::min(it->second, counted);
        }
    }
    CHECK(kernels.size() == 2);  // CUDA-core and tensor-core kernels (files)
    REQUIRE(kernels.count(template_file) == 1);
    const std::set<std::string>& names = kernels.at(template_file);
    const std::vector<std::string> in_part = test::this_shard(std::vector<std::string>(names.begin(), names.end()), part);
    REQUIRE_FALSE(in_part.empty());
    const test::KernelsByFile of_file{{template_file, std::set<std::string>(in_part.begin(), in_part.end())}};
    for (const auto& [name, report] : test::compile_all_with_report(of_file, arch)) {
        INFO(arch << " " << name << ": " << report.spill_bytes << " bytes of spill stores, " << report.static_shared_bytes
                  << " bytes of static shared memory");
        CHECK(report.spill_bytes == 0);
        // The host counts the static bytes when it checks a config against the device's limit and
        // its occupancy: it must not count fewer than ptxas laid out (main kernels; the merge
        // kernel holds only the chunk search's).
        const auto counted = counted_static_bytes.find(name);
        const size_t bound = counted == counted_static_bytes.end() ? kKvChunkSharedBytes : counted->second;
        CHECK(static_cast<size_t>(report.static_shared_bytes) <= bound);
    }
}

constexpr const char* kCudaCoreKernels = "decode_attention/decode_attention.cuh";
constexpr const char* kTensorCoreKernels = "decode_attention/decode_attention_mma.cuh";

}  // namespace

TEST_CASE("every CUDA-core DecodeAttention kernel of the search spaces compiles for sm_80 without spilling (part 1 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_80", kCudaCoreKernels, {0, 3});
}

TEST_CASE("every CUDA-core DecodeAttention kernel of the search spaces compiles for sm_80 without spilling (part 2 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_80", kCudaCoreKernels, {1, 3});
}

TEST_CASE("every CUDA-core DecodeAttention kernel of the search spaces compiles for sm_80 without spilling (part 3 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_80", kCudaCoreKernels, {2, 3});
}

TEST_CASE("every CUDA-core DecodeAttention kernel of the search spaces compiles for sm_90a without spilling (part 1 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_90a", kCudaCoreKernels, {0, 3});
}

TEST_CASE("every CUDA-core DecodeAttention kernel of the search spaces compiles for sm_90a without spilling (part 2 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_90a", kCudaCoreKernels, {1, 3});
}

TEST_CASE("every CUDA-core DecodeAttention kernel of the search spaces compiles for sm_90a without spilling (part 3 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_90a", kCudaCoreKernels, {2, 3});
}

TEST_CASE("every tensor-core DecodeAttention kernel of the search spaces compiles for sm_80 without spilling (part 1 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_80", kTensorCoreKernels, {0, 3});
}

TEST_CASE("every tensor-core DecodeAttention kernel of the search spaces compiles for sm_80 without spilling (part 2 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_80", kTensorCoreKernels, {1, 3});
}

TEST_CASE("every tensor-core DecodeAttention kernel of the search spaces compiles for sm_80 without spilling (part 3 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_80", kTensorCoreKernels, {2, 3});
}

TEST_CASE("every tensor-core DecodeAttention kernel of the search spaces compiles for sm_90a without spilling (part 1 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_90a", kTensorCoreKernels, {0, 3});
}

TEST_CASE("every tensor-core DecodeAttention kernel of the search spaces compiles for sm_90a without spilling (part 2 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_90a", kTensorCoreKernels, {1, 3});
}

TEST_CASE("every tensor-core DecodeAttention kernel of the search spaces compiles for sm_90a without spilling (part 3 of 3)",
          "[compile][decode]") {
    check_decode_kernels_compile_without_spills("sm_90a", kTensorCoreKernels, {2, 3});
}

TEST_CASE("decode_attention problems parse from tileops-tune's text form", "[decode]") {
    auto op = detail::make_op({"decode_attention", {8, 32, 8, 128, 1, 16384}, "bf16", "page16"});
    CHECK(op->describe() == "decode_attention 8x32x8x128x1x16384 bf16 [page16]");
    const auto& p = static_cast<DecodeAttention&>(*op).problem();
    CHECK(p.page_size == 16);
    CHECK(p.max_pages_per_seq == 1024);
    CHECK(p.num_pages == 8 * 1024);
    CHECK_THROWS_WITH(detail::make_op({"decode_attention", {8, 32, 8, 128}, "bf16", ""}),
                      ContainsSubstring("batch x heads x kv_heads x head_dim x q_len x max_kv_len"));
    CHECK_THROWS_WITH(detail::make_op({"decode_attention", {8, 32, 8, 128, 1, 64}, "bf16", "pagex"}),
                      ContainsSubstring("flag 'pagex' does not apply"));
    auto fp8 = detail::make_op({"decode_attention", {8, 32, 8, 128, 1, 16384}, "bf16", "page16,kv_fp8"});
    CHECK(fp8->describe() == "decode_attention 8x32x8x128x1x16384 bf16 [page16,kv_fp8]");
    CHECK(static_cast<DecodeAttention&>(*fp8).problem().kv_dtype == DType::fp8_e4m3);
    CHECK(static_cast<DecodeAttention&>(*fp8).problem().page_size == 16);
    CHECK(static_cast<DecodeAttention&>(*detail::make_op({"decode_attention", {1, 32, 8, 128, 1, 64}, "fp16", "kv_fp8"}))
              .problem()
              .kv_dtype == DType::fp8_e4m3);
}
