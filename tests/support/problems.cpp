#include "support/problems.hpp"

#include <tuple>

namespace tileops::test {
namespace {

// A decode problem's cache as pages of `page_size` tokens (0: contiguous), a pool of exactly
// batch x pages per sequence.
template <typename Problem>
void page_cache(Problem& p, int64_t page_size) {
    if (page_size == 0) return;
    p.page_size = page_size;
    p.max_pages_per_seq = (p.max_kv_len + page_size - 1) / page_size;
    p.num_pages = p.batch * p.max_pages_per_seq;
}

}  // namespace

std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}, {16384, 1024}, {16384, 4096},
                                 {4096, 16384}, {1024, 65536}, {256, 262144}};
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        for (const auto& s : shapes) {
            const int64_t rows = s[0], cols = s[1];
            ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype, {}, 1e-6f, true}));
            ops.push_back(std::make_unique<LayerNorm>(LayerNormProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype, {}, true}));
            for (int kind = 0; kind <= 5; ++kind)
                ops.push_back(std::make_unique<Elementwise>(
                    ElementwiseProblem{static_cast<ElementwiseOp>(kind), rows, cols, dtype}));
        }
        ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{64, 4096, dtype, DType::fp32}));
    }
    for (DType dtype : {DType::fp16, DType::bf16})
        for (int64_t head_dim : {64, 128, 256})
            for (auto [heads, kv_heads, q_len] : {std::tuple{32, 8, 1}, {32, 32, 1}, {32, 8, 4}, {64, 8, 8}, {16, 16, 2}})
                for (int64_t page_size : {0, 16, 256}) {
                    DecodeAttentionProblem p;
                    p.batch = 3;
                    p.num_heads = heads;
                    p.num_kv_heads = kv_heads;
                    p.head_dim = head_dim;
                    p.q_len = q_len;
                    p.max_kv_len = 4097;
                    p.dtype = dtype;
                    page_cache(p, page_size);
                    ops.push_back(std::make_unique<DecodeAttention>(p));
                }
    // Decode attention over an fp8 e4m3 cache (the CUDA-core kernel): each head dim, GQA and MHA, paged.
    for (int64_t head_dim : {64, 128, 256})
        for (auto [heads, kv_heads, page_size] : {std::tuple{32, 8, 0}, {32, 32, 16}, {64, 8, 64}}) {
            DecodeAttentionProblem p;
            p.batch = 3;
            p.num_heads = heads;
            p.num_kv_heads = kv_heads;
            p.head_dim = head_dim;
            p.max_kv_len = 4097;
            p.kv_dtype = DType::fp8_e4m3;
            p.k_scale = 0.5f;
            p.v_scale = 2.0f;
            page_cache(p, page_size);
            ops.push_back(std::make_unique<DecodeAttention>(p));
        }
    // GEMM (each kernel takes seconds to compile, so few problems; the whole GEMM search space has
    // its own compile test): both layouts, tiny and large M, a ragged shape (narrow copies), every
    // epilogue option, fp32 output, a batch.
    auto gemm = [&](int64_t m, int64_t n, int64_t k, DType dtype, GemmLayout layout) {
        GemmProblem p;
        p.m = m, p.n = n, p.k = k, p.dtype = dtype, p.layout = layout;
        return p;
    };
    ops.push_back(std::make_unique<Gemm>(gemm(4096, 4096, 4096, DType::bf16, GemmLayout::nn)));
    ops.push_back(std::make_unique<Gemm>(gemm(1, 4096, 4096, DType::fp16, GemmLayout::nt)));
    ops.push_back(std::make_unique<Gemm>(gemm(1000, 127, 129, DType::fp16, GemmLayout::nn)));
    GemmProblem fused = gemm(512, 1024, 256, DType::bf16, GemmLayout::nt);
    fused.out_dtype = DType::fp32, fused.has_c = true, fused.beta = 0.5f, fused.bias = true;
    fused.epilogue = GemmEpilogue::gelu;
    ops.push_back(std::make_unique<Gemm>(fused));
    GemmProblem batched = gemm(256, 256, 64, DType::bf16, GemmLayout::nn);
    batched.batch = 8, batched.epilogue = GemmEpilogue::silu;
    ops.push_back(std::make_unique<Gemm>(batched));
    // (NT at 4096^3 is the first problem of the GEMM search-space compile test.)
    // Flash attention: every head dim and dtype, causal or not, a window, varlen (the whole search
    // space has its own compile test).
    for (DType dtype : {DType::fp16, DType::bf16})
        for (int64_t head_dim : {64, 128, 256})
            for (int variant = 0; variant < 3; ++variant) {
                FlashAttentionProblem p;
                p.batch = 2, p.num_heads = 16, p.num_kv_heads = 4, p.head_dim = head_dim, p.dtype = dtype;
                p.seqlen_q = p.seqlen_k = 4096;
                p.causal = variant >= 1;
                if (variant == 2) p.window_left = 512, p.varlen = true, p.total_q = p.total_k = 8192;
                ops.push_back(std::make_unique<FlashAttention>(p));
            }
    // MLA decode: both dtypes, few and many heads (block_m 16 and 64), speculative tokens, paged.
    for (DType dtype : {DType::fp16, DType::bf16})
        for (auto [heads, q_len, page_size] : {std::tuple{16, 1, 0}, {128, 1, 64}, {32, 2, 16}}) {
            MlaDecodeProblem p;
            p.batch = 4;
            p.num_heads = heads;
            p.q_len = q_len;
            p.max_kv_len = 4097;
            p.dtype = dtype;
            page_cache(p, page_size);
            ops.push_back(std::make_unique<MlaDecode>(p));
        }
    return ops;
}

}  // namespace tileops::test
