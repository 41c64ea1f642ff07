// Varlen sequences as the flash attention kernels see them. cu_seqlens are the caller's device
// data, which the host cannot read without a sync; so each sequence's rows are clamped into the
// packed tensors here: offsets below 0 or past the last row, or an end before its start, give a
// shorter or empty sequence (rows already covered by another sequence may be covered twice), never
// a read or write outside Q, K, V, O or the LSE.
#pragma once

#include "common/attention.cuh"

namespace tileops {

__device__ __forceinline__ AttentionSequence flash_sequence(const FlashAttentionArgs& p, const FlashPackedRows& rows,
                                                           int batch) {
    if (p.cu_seqlens_q == nullptr) return attention_sequence(p, batch);
    const int q_begin = min(max(p.cu_seqlens_q[batch], 0), rows.q);
    const int q_end = min(max(p.cu_seqlens_q[batch + 1], q_begin), rows.q);
    const int k_begin = min(max(p.cu_seqlens_k[batch], 0), rows.k);
    const int k_end = min(max(p.cu_seqlens_k[batch + 1], k_begin), rows.k);
    AttentionSequence s;
    s.q_first = q_begin;
    s.k_first = k_begin;
    s.len_q = q_end - q_begin;
    s.len_k = k_end - k_begin;
    return s;
}

}  // namespace tileops
