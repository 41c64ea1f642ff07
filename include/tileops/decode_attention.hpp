// Decode attention over a KV cache: a few query tokens per sequence (1 for plain decoding, up to 8
// for speculative decoding) against that sequence's cached keys and values.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct DecodeAttentionProblem {
    int64_t batch = 1;           // sequences
    int64_t num_heads = 32;      // query heads; a multiple of num_kv_heads (GQA/MQA)
    int64_t num_kv_heads = 8;
    int64_t head_dim = 128;      // a multiple of 16 from 16 to 256
    int64_t q_len = 1;           // query tokens per sequence, 1..8: the last q_len positions
    int64_t max_kv_len = 0;      // lengths[b] above this are clamped to it (contiguous: k/v's token extent)
    DType dtype = DType::bf16;   // q and the output; k and v too unless kv_dtype says otherwise
    // A quantized cache: kv_dtype = DType::fp8_e4m3 makes k and v e4m3 codes (1 byte each), a key
    // element being k_scale x its code's value and a value element v_scale x its (per-tensor
    // scales, as vLLM keeps them). Empty: k and v are dtype, and the scales must stay 1.
    std::optional<DType> kv_dtype = std::nullopt;
    float k_scale = 1.0f, v_scale = 1.0f;
    float scale = 0.0f;          // softmax scale; 0: 1 / sqrt(head_dim)
    float softcap = 0.0f;        // > 0: scores become softcap * tanh(score / softcap)
    int64_t window_left = -1;    // >= 0: a query at position p sees keys p - window_left .. p
    bool return_lse = false;     // also write the log-sum-exp (natural log, fp32) per query row

    // Paged KV (page_size > 0): k and v are [num_pages, page_size, num_kv_heads, head_dim] and
    // page_table is [batch, max_pages_per_seq] int32 (page of token t: page_table[b][t / page_size]).
    // page_size is 16, 32, 64, 128 or 256; max_kv_len <= max_pages_per_seq * page_size.
    int64_t page_size = 0;
    int64_t num_pages = 0;
    int64_t max_pages_per_seq = 0;

    // Strides in elements. The head dim is always contiguous. A stride left at 0 packs around the
    // ones given inside it: the token stride is heads x head stride, the outer (batch or page)
    // stride is what the tokens and heads span (so [batch, heads, len, dim] needs only the head and
    // token strides). Output rows that would overlap are refused.
    int64_t q_batch_stride = 0, q_token_stride = 0, q_head_stride = 0;  // q: [batch, q_len, num_heads, head_dim]
    int64_t o_batch_stride = 0, o_token_stride = 0, o_head_stride = 0;  // out: like q
    // k, v: [batch, max_kv_len, num_kv_heads, head_dim] (kv_outer_stride between sequences), or
    // paged as above (kv_outer_stride between pages). k and v share the strides.
    int64_t kv_outer_stride = 0, kv_token_stride = 0, kv_head_stride = 0;
};

// o = softmax(scale * q k^T) v per (sequence, query token, query head), over the keys the token
// may see: causal within the sequence (query token i of q_len sits at position len - q_len + i,
// so it sees keys 0 .. len - q_len + i), limited by the window. Query head h reads KV head
// h / (num_heads / num_kv_heads). fp32 accumulation; the KV length is split over CTAs (flash
// decoding) when batch x kv_heads does not fill the GPU.
//
// Operands of run(): inputs {q, k, v, lengths} or, paged, {q, k, v, lengths, page_table};
// lengths: [batch] int32 on the device, tokens in each sequence's cache including the current
// ones. outputs {out} or, with return_lse, {out, lse} (lse: [batch, q_len, num_heads] fp32).
// A query row that sees no key (length 0, or shorter than q_len) gets a zero output and an lse
// of -inf. Page table entries outside [0, num_pages) are skipped, never read through.
// k and v must be 16-byte aligned, as must every stride of them times the element size.
// An fp8_e4m3 cache runs on either kernel (config kernel 0, CUDA cores, or 1, tensor cores, which
// needs head dim 32 or more there); its tuning entries carry the flag kv_fp8.
// Runs of one DecodeAttention object on different streams must not overlap: they share the
// op's split-KV workspace (allocated when the launch is resolved; call Runtime::prepare before
// capturing a CUDA graph).
class TILEOPS_EXPORT DecodeAttention : public Op {
public:
    explicit DecodeAttention(const DecodeAttentionProblem& problem);
    // The problem as normalized (defaults filled in).
    const DecodeAttentionProblem& problem() const noexcept { return *problem_; }

private:
    const DecodeAttentionProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
