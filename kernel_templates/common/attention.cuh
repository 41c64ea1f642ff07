// What the flash attention kernels (flash_attention_sm80.cuh, flash_attention_sm90.cuh) share: the
// argument block, where a block's sequence lives, which keys a query row may see, and the online
// softmax's pieces.
//
// Masks. Query row i (0-based within its sequence of len_q rows) sits at key position
// i + (len_k - len_q): causal attention is aligned bottom-right, so the last query row sees every key.
// It sees key j when j <= i + len_k - len_q (causal) and j >= i + len_k - len_q - window_left (window).
// A row that sees no key (causal with len_q > len_k, for its first rows) gets a zero output and an
// lse of -inf.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "flash_attention/flash_attention_args.cuh"

// NVRTC has no math.h: INFINITY as the bit pattern (nvcc's host pass gets the math.h one).
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace tileops {

// exp2 on the special-function unit (ex2.approx: 2 ulp, -inf -> 0).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}


// The sequence a block works on: its first q/k rows in the tensors and its lengths.
struct AttentionSequence {
    long long q_first, k_first;  // rows, from the tensor's start (varlen) or 0
    int len_q, len_k;
};

__device__ __forceinline__ AttentionSequence attention_sequence(const FlashAttentionArgs& p, int batch) {
    AttentionSequence s;
    if (p.cu_seqlens_q != nullptr) {
        const int q0 = p.cu_seqlens_q[batch], k0 = p.cu_seqlens_k[batch];
        s.q_first = q0;
        s.k_first = k0;
        s.len_q = p.cu_seqlens_q[batch + 1] - q0;
        s.len_k = p.cu_seqlens_k[batch + 1] - k0;
    } else {
        s.q_first = 0;
        s.k_first = 0;
        s.len_q = p.seqlen_q;
        s.len_k = p.seqlen_k;
    }
    return s;
}

// The keys [begin, end) that any of the query rows [row0, row0 + rows) may see, and whether a key
// tile starting at n0 of `cols` keys needs an element-wise mask for those rows.
struct AttentionKeyRange {
    int begin, end;
    int offset;        // len_k - len_q: query row i sits at key position i + offset
    int window;        // < 0: none
    int len_k;

    template <bool CAUSAL, bool WINDOW>
    __device__ __forceinline__ bool tile_needs_mask(int row0, int rows, int n0, int cols) const {
        if (n0 + cols > len_k) return true;
        if (CAUSAL && n0 + cols - 1 > row0 + offset) return true;
        if (WINDOW && n0 < row0 + rows - 1 + offset - window) return true;
        return false;
    }
    template <bool CAUSAL, bool WINDOW>
    __device__ __forceinline__ bool visible(int row, int col) const {
        if (col >= len_k) return false;
        if (CAUSAL && col > row + offset) return false;
        if (WINDOW && col < row + offset - window) return false;
        return true;
    }
};

template <bool CAUSAL, bool WINDOW>
__device__ __forceinline__ AttentionKeyRange attention_key_range(const AttentionSequence& s, int window_left, int row0,
                                                                 int rows) {
    AttentionKeyRange r;
    r.offset = s.len_k - s.len_q;
    r.window = window_left;
    r.len_k = s.len_k;
    r.begin = 0;
    r.end = s.len_k;
    const int last_row = min(row0 + rows, s.len_q) - 1;
    if (CAUSAL) r.end = min(r.end, max(0, last_row + r.offset + 1));
    if (WINDOW) r.begin = max(0, row0 + r.offset - window_left);
    if (r.begin > r.end) r.begin = r.end;
    return r;
}

// The scale used to bring a running sum and output up to date when a row's max moves from `old_max`
// to `new_max` (both raw scores); exp2 of the scaled difference. A row that has seen nothing yet
// (-inf) has nothing to rescale.
__device__ __forceinline__ float attention_rescale(float old_max, float new_max, float scale_log2) {
    return old_max == -INFINITY ? 0.0f : exp2f((old_max - new_max) * scale_log2);
}

// The subtrahend of exp2(score * scale_log2 - shift): a row whose max is still -inf (all masked)
// uses 0, so its probabilities come out as exp2(-inf) = 0 instead of NaN.
__device__ __forceinline__ float attention_shift(float row_max, float scale_log2) {
    return row_max == -INFINITY ? 0.0f : row_max * scale_log2;
}

// Natural-log log-sum-exp of a finished row: max * scale + ln(sum); -inf for a row that saw nothing.
__device__ __forceinline__ float attention_lse(float row_max, float row_sum, float scale) {
    if (row_sum == 0.0f || row_max == -INFINITY) return -INFINITY;
    return row_max * scale + __logf(row_sum);
}

// A pair of floats as two 16-bit values in one register (the low half is `lo`): the A fragment of
// an MMA built from an accumulator.
template <typename T>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack_pair<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned pack_pair<__half>(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

}  // namespace tileops
