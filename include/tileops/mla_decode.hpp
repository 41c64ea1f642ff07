// Multi-head latent attention decode (DeepSeek-V2/V3 MLA): every query head attends to one shared
// latent KV head of 576 dims (512 latent + 64 rope), cached per token, paged or contiguous.
#pragma once

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct MlaDecodeProblem {
    int64_t batch = 1;           // sequences
    int64_t num_heads = 128;     // query heads, 1..1024 (DeepSeek: 16, 32, 64 or 128 per GPU)
    int64_t q_len = 1;           // query tokens per sequence, 1..8: the last q_len positions
    int64_t max_kv_len = 0;      // lengths[b] above this are clamped to it (contiguous: kv's token extent)
    DType dtype = DType::bf16;   // q, kv and the output
    float scale = 0.0f;          // softmax scale; 0: 1 / sqrt(576)
    bool return_lse = false;     // also write the log-sum-exp (natural log, fp32) per query row

    // Paged KV (page_size > 0): kv is [num_pages, page_size, 576] and page_table is
    // [batch, max_pages_per_seq] int32 (page of token t: page_table[b][t / page_size]).
    // page_size is 16, 32, 64, 128 or 256; max_kv_len <= max_pages_per_seq * page_size.
    int64_t page_size = 0;
    int64_t num_pages = 0;
    int64_t max_pages_per_seq = 0;

    // Strides in elements; 0 means packed. The last dim is always contiguous.
    int64_t q_batch_stride = 0, q_token_stride = 0, q_head_stride = 0;  // q: [batch, q_len, num_heads, 576]
    int64_t o_batch_stride = 0, o_token_stride = 0, o_head_stride = 0;  // out: [batch, q_len, num_heads, 512]
    // kv: [batch, max_kv_len, 576] (kv_outer_stride between sequences) or paged as above
    // (kv_outer_stride between pages).
    int64_t kv_outer_stride = 0, kv_token_stride = 0;
};

// o = softmax(scale * q kv^T) kv[..., :512] per (sequence, query token, query head), over the keys
// the token may see: query token i of q_len sits at position len - q_len + i and sees keys
// 0 .. len - q_len + i. The 576 query dims are the absorbed latent query (512) followed by its rope
// part (64), as the key rows are. fp32 accumulation on the tensor cores; the KV length is split over
// CTAs (flash decoding) when batch x row blocks does not fill the GPU.
//
// Operands of run(): inputs {q, kv, lengths} or, paged, {q, kv, lengths, page_table}; lengths:
// [batch] int32 on the device, tokens in each sequence's cache including the current ones.
// outputs {out} or, with return_lse, {out, lse} (lse: [batch, q_len, num_heads] fp32).
// A query row that sees no key (length 0, or shorter than q_len) gets a zero output and an lse of
// -inf. Page table entries outside [0, num_pages) are skipped, never read through.
// q, kv and out must be 16-byte aligned, as must their strides times the element size.
// Runs of one MlaDecode object on different streams must not overlap: they share the op's
// split-KV workspace (call Runtime::prepare before capturing a CUDA graph).
class TILEOPS_EXPORT MlaDecode : public Op {
public:
    static constexpr int64_t kLatentDim = 512;  // value and output dims
    static constexpr int64_t kRopeDim = 64;
    static constexpr int64_t kKeyDim = kLatentDim + kRopeDim;

    explicit MlaDecode(const MlaDecodeProblem& problem);
    // The problem as normalized (defaults filled in).
    const MlaDecodeProblem& problem() const noexcept { return *problem_; }

private:
    const MlaDecodeProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
