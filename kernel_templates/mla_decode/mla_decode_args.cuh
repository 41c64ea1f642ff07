// The argument block of the MLA decode kernels and of their merge kernel. Plain C++: the host
// code that fills it (src/ops/mla_decode/mla_decode.cpp) includes this same header.
#pragma once

namespace tileops {

struct MlaDecodeArgs {
    const void* q;               // [batch, q_len, num_heads, 576] with strides
    const void* kv;              // [batch, max_kv_len, 576] or paged [num_pages, page_size, 576]
    const int* lengths;          // [batch]
    const int* page_table;       // [batch, page_table_stride] (paged)
    void* out;                   // [batch, q_len, num_heads, 512] with strides
    float* lse;                  // [batch, q_len, num_heads] or null
    float* workspace;            // splits: partial outputs [chunks][row blocks][BLOCK_M][512], their lse,
                                 // then (balanced) each sequence's chunks [batch] (mla_sequence_chunks)
    long long q_batch_stride, q_token_stride, q_head_stride;
    long long kv_outer_stride, kv_token_stride;  // outer: between sequences, or pages when paged
    long long page_table_stride;
    long long o_batch_stride, o_token_stride, o_head_stride;
    int num_heads, q_len, num_pages, max_kv_len;
    int num_splits;              // CTAs per sequence and row block: gridDim.x, or gridDim.y balanced
    int balanced;                // 1: a batch's keys cut into chunks by the lengths (common/kv_chunks.cuh)
    float scale_log2;            // softmax scale * log2(e)
    float scale;
};

static_assert(sizeof(MlaDecodeArgs) == 160, "MlaDecodeArgs: the kernels' parameter block changed size");

}  // namespace tileops
