// The decode attention family: a few query tokens per sequence over a KV cache (contiguous or
// paged, fp16/bf16 or fp8 e4m3). Kernels: kernel_templates/decode_attention/.
#include <algorithm>
#include <tuple>

#include "core/op_family.hpp"
#include "tileops/decode_attention.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "batch x heads x kv_heads x head_dim x q_len x max_kv_len";

// Flags pageN for a paged KV cache of N-token pages (a page pool of exactly batch x pages per
// sequence) and kv_fp8 for an fp8 e4m3 cache.
std::unique_ptr<Op> make_decode_attention(const ProblemSpec& spec) {
    require_rank(spec, 6, kShape);
    DecodeAttentionProblem p;
    p.batch = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.num_kv_heads = spec.shape[2];
    p.head_dim = spec.shape[3];
    p.q_len = spec.shape[4];
    p.max_kv_len = spec.shape[5];
    p.dtype = parse_dtype(spec.dtype);
    std::vector<std::string> flags = split_flags(spec.flags);
    if (const auto fp8 = std::find(flags.begin(), flags.end(), "kv_fp8"); fp8 != flags.end()) {
        p.kv_dtype = DType::fp8_e4m3;
        flags.erase(fp8);
    }
    const PagedCache cache = paged_cache(spec.op, flags, p.batch, p.max_kv_len);
    p.page_size = cache.page_size, p.max_pages_per_seq = cache.max_pages_per_seq, p.num_pages = cache.num_pages;
    return std::make_unique<DecodeAttention>(p);
}

void page_cache(DecodeAttentionProblem& p, int64_t page_size) {
    if (page_size == 0) return;
    p.page_size = page_size;
    p.max_pages_per_seq = (p.max_kv_len + page_size - 1) / page_size;
    p.num_pages = p.batch * p.max_pages_per_seq;
}

std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    // The power-of-two head dims and a few between them (models' 80, 96, 192): an odd number of
    // k-steps, padded shared-memory rows, idle lanes on the CUDA cores, Q in registers at its limit.
    for (DType dtype : {DType::fp16, DType::bf16})
        for (int64_t head_dim : {64, 80, 96, 128, 192, 256})
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
    // An fp8 e4m3 cache: GQA (the tensor cores) and MHA (the CUDA cores), paged, over 4 to 16 lanes a token.
    for (int64_t head_dim : {64, 80, 128, 192, 256})
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
    return ops;
}

}  // namespace

OpFamily decode_attention_family() {
    return {"decode_attention",
            {{"decode_attention", kShape, "pageN (a paged KV cache of N-token pages), kv_fp8 (an fp8 e4m3 cache)",
              make_decode_attention}},
            representative_ops};
}

}  // namespace tileops::detail
