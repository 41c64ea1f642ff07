// Flash attention forward (prefill): O = softmax(scale * Q K^T + mask) V over whole sequences,
// never materialising the score matrix.
#pragma once

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

// Where the sequence and head dimensions sit in q, k, v and the output.
enum class AttentionLayout {
    bshd,  // [batch, seqlen, heads, head_dim] (the packed layout of most inference servers)
    bhsd,  // [batch, heads, seqlen, head_dim]
};

struct FlashAttentionProblem {
    int64_t batch = 1;
    int64_t num_heads = 16;      // query heads
    int64_t num_kv_heads = 0;    // 0: num_heads (MHA); else num_heads must be a multiple (GQA/MQA)
    int64_t head_dim = 128;      // of q and k: a multiple of 16 up to 256
    int64_t head_dim_v = 0;      // of v and the output; 0: head_dim (DeepSeek's prefill: 192 and 128)
    int64_t seqlen_q = 0;        // rows per sequence (varlen: the longest sequence)
    int64_t seqlen_k = 0;        // keys per sequence; 0: seqlen_q (varlen: the longest)
    DType dtype = DType::bf16;   // q, k, v and the output: fp16 or bf16
    float scale = 0.0f;          // softmax scale; 0: 1 / sqrt(head_dim)
    bool causal = false;         // aligned bottom-right: query row i sees keys <= i + seqlen_k - seqlen_q
    int64_t window_left = -1;    // >= 0: query row i also sees no key below i + seqlen_k - seqlen_q - window_left
    bool return_lse = false;     // also write the log-sum-exp per query row (natural log, fp32)
    AttentionLayout layout = AttentionLayout::bshd;

    // Varlen: sequences of different lengths packed one after another. q and out are
    // [total_q, num_heads, head_dim], k and v [total_k, num_kv_heads, head_dim] (v and out with
    // head_dim_v; layout and batch
    // strides are ignored), and run() takes cu_seqlens_q and cu_seqlens_k ([batch + 1] int32 on
    // the device: sequence b owns rows cu[b] .. cu[b + 1] - 1). seqlen_q/seqlen_k bound every
    // sequence's length: the query rows of a longer sequence past seqlen_q are not computed (an
    // error the kernel cannot report: keep lengths in bound). The kernels clamp the offsets into
    // [0, total_q] and [0, total_k], an end before its start giving an empty sequence, so that
    // malformed offsets never read or write outside the tensors.
    bool varlen = false;
    int64_t total_q = 0, total_k = 0;

    // Strides in elements, 0 meaning packed for the layout. The head dim is always contiguous.
    // Every stride must be a multiple of 8 elements (16 bytes).
    int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
    int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
    int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
    int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
};

// Operands of run(): inputs {q, k, v} (varlen: {q, k, v, cu_seqlens_q, cu_seqlens_k}); outputs
// {out} or, with return_lse, {out, lse}: lse is [batch, num_heads, seqlen_q] fp32 (varlen:
// [num_heads, total_q]). q, k, v and out must be 16-byte aligned.
// A query row that sees no key (causal with seqlen_q > seqlen_k) gets a zero output and an lse of -inf.
// Query head h reads KV head h / (num_heads / num_kv_heads).
// On sm_90 the kernel is FlashAttention-3 style (TMA, wgmma, warp specialization, a persistent
// grid); elsewhere (sm_80, sm_86, sm_89) FlashAttention-2 style (cp.async, ldmatrix, mma.sync).
// Causal runs on sm_90 hand work out through two counters in the op's workspace (allocated when
// the launch is resolved): runs of one FlashAttention object on different streams must not
// overlap (call Runtime::prepare before capturing a CUDA graph).
class TILEOPS_EXPORT FlashAttention : public Op {
public:
    explicit FlashAttention(const FlashAttentionProblem& problem);
    // The problem as normalized (defaults filled in).
    const FlashAttentionProblem& problem() const noexcept { return *problem_; }

private:
    const FlashAttentionProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
