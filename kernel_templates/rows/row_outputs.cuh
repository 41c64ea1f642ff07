// What each row op writes for one vector of its row, given the row's statistics: shared by the
// register kernels (rmsnorm.cuh, layernorm.cuh, softmax.cuh) and the resident ones
// (*_resident.cuh), so the two cannot drift apart. fp32 arithmetic, stored as TOut. WHOLE: each
// vector stored as one access (store_whole), which the ragged kernels need.
#pragma once

#include "common/types.cuh"
#include "common/whole_store.cuh"

namespace tileops {

// log2(e) and ln(2): softmax works in base 2 (exp2), with log2(e) folded into its inputs.
// Functions, not namespace-scope variables, which NVRTC would emit as globals in every cubin.
__host__ __device__ constexpr float log2_e() { return 1.4426950408889634f; }
__host__ __device__ constexpr float ln_2() { return 0.6931471805599453f; }

// RMSNorm: y = h * scale * weight at columns [col, col + VEC) of the row at y_row; v holds h.
template <typename TOut, int VEC, bool WHOLE = false>
__device__ __forceinline__ void store_rmsnorm_scaled(TOut* y_row, long long col, float (&v)[VEC], const float (&w)[VEC],
                                                     float scale) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = v[k] * scale * w[k];
    if constexpr (WHOLE)
        store_whole<TOut, VEC>(y_row + col, v);
    else
        store_vec<TOut, VEC>(y_row + col, v);
}

// RMSNorm with the weights loaded here from `weight`.
template <typename T, typename TOut, int VEC>
__device__ __forceinline__ void store_rmsnorm(TOut* y_row, const T* weight, long long col, const Vec<T, VEC>& h,
                                              float scale) {
    float v[VEC], w[VEC];
    unpack(h, v);
    load_vec<T, VEC>(weight + col, w);
    store_rmsnorm_scaled<TOut, VEC>(y_row, col, v, w, scale);
}

// RMSNorm with the weights of the columns already loaded (w_raw).
template <typename T, typename TOut, int VEC, bool WHOLE = false>
__device__ __forceinline__ void store_rmsnorm(TOut* y_row, const Vec<T, VEC>& w_raw, long long col,
                                              const Vec<T, VEC>& h, float scale) {
    float v[VEC], w[VEC];
    unpack(h, v);
    unpack(w_raw, w);
    store_rmsnorm_scaled<TOut, VEC, WHOLE>(y_row, col, v, w, scale);
}

// LayerNorm: y = (x - mean) * scale * weight + bias at columns [col, col + VEC); v holds x.
template <typename TOut, int VEC, bool WHOLE = false>
__device__ __forceinline__ void store_layernorm_scaled(TOut* y_row, long long col, float (&v)[VEC],
                                                       const float (&w)[VEC], const float (&b)[VEC], float mean,
                                                       float scale) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mean) * scale * w[k] + b[k];
    if constexpr (WHOLE)
        store_whole<TOut, VEC>(y_row + col, v);
    else
        store_vec<TOut, VEC>(y_row + col, v);
}

// LayerNorm with the weights and biases loaded here.
template <typename T, typename TOut, int VEC>
__device__ __forceinline__ void store_layernorm(TOut* y_row, const T* weight, const T* bias, long long col,
                                                const Vec<T, VEC>& raw, float mean, float scale) {
    float v[VEC], w[VEC], b[VEC];
    unpack(raw, v);
    load_vec<T, VEC>(weight + col, w);
    load_vec<T, VEC>(bias + col, b);
    store_layernorm_scaled<TOut, VEC>(y_row, col, v, w, b, mean, scale);
}

// The weights and biases of a vector's columns, loaded ahead of its output.
template <typename T, int VEC>
struct LayerNormSide {
    Vec<T, VEC> weight, bias;
};

// LayerNorm with the weights and biases already loaded.
template <typename T, typename TOut, int VEC, bool WHOLE = false>
__device__ __forceinline__ void store_layernorm(TOut* y_row, const LayerNormSide<T, VEC>& side, long long col,
                                                const Vec<T, VEC>& raw, float mean, float scale) {
    float v[VEC], w[VEC], b[VEC];
    unpack(raw, v);
    unpack(side.weight, w);
    unpack(side.bias, b);
    store_layernorm_scaled<TOut, VEC, WHOLE>(y_row, col, v, w, b, mean, scale);
}

// Softmax (or log-softmax when LOG), from the row max pre-scaled by log2 e and log2 of the row's
// sum of exponentials.
template <bool LOG, typename T, typename TOut, int VEC, bool WHOLE = false>
__device__ __forceinline__ void store_softmax(TOut* y_row, long long col, const Vec<T, VEC>& raw, float max_scaled,
                                              float log2_sum) {
    constexpr float kLog2e = log2_e();
    constexpr float kLn2 = ln_2();
    float v[VEC];
    unpack(raw, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const float shifted = v[k] * kLog2e - max_scaled - log2_sum;  // log2 of the probability
        v[k] = LOG ? shifted * kLn2 : exp2f(shifted);
    }
    if constexpr (WHOLE)
        store_whole<TOut, VEC>(y_row + col, v);
    else
        store_vec<TOut, VEC>(y_row + col, v);
}

}  // namespace tileops
