// The two parameters of the flash attention kernels. Plain C++: the host code that fills them
// (src/ops/flash_attention/flash_attention.cpp) includes this same header.
#pragma once

namespace tileops {

struct FlashAttentionArgs {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;                 // null unless requested: lse[b * lse_batch_stride + h * lse_head_stride + row]
    const int* cu_seqlens_q;    // varlen: [batch + 1] offsets of each sequence's first row; else null
    const int* cu_seqlens_k;
    // Strides in elements; the head dim is contiguous. Varlen: the batch strides are 0 and rows
    // are counted from the packed tensor's first row.
    long long q_batch_stride, q_row_stride, q_head_stride;
    long long k_batch_stride, k_row_stride, k_head_stride;
    long long v_batch_stride, v_row_stride, v_head_stride;
    long long o_batch_stride, o_row_stride, o_head_stride;
    long long lse_batch_stride, lse_head_stride;
    int seqlen_q, seqlen_k;     // every sequence's lengths (varlen: unused, read from cu_seqlens)
    int group;                  // query heads per KV head
    int window_left;            // < 0: no window
    float scale_log2;           // softmax scale * log2(e): scores are exponentiated with exp2
    float scale;                // softmax scale (for the natural-log lse)
    int num_heads, batch;       // query heads, sequences
    int* scheduler;             // sm_90 causal: the work-tile counters (2 ints, zero between launches)
};

// Rows of the packed Q and K/V tensors (total_q, total_k); unused without varlen.
struct FlashPackedRows {
    int q, k;
};

static_assert(sizeof(FlashAttentionArgs) == 208, "FlashAttentionArgs: the kernels' parameter block changed size");
static_assert(sizeof(FlashPackedRows) == 8, "FlashPackedRows: the kernels' parameter changed size");

}  // namespace tileops
