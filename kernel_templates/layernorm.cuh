// LayerNorm over the last dimension with weight and bias (biased variance, like torch):
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic)
//
// In register mode each thread takes the mean of its held values and the sum of squared
// deviations from it (a second pass over registers), which is exact where E[x^2] - E[x]^2 would
// cancel; the threads' (count, mean, deviations) then combine in one exchange (common/reduce.cuh).
// Streaming mode (ITEMS == 0) sums deviations from a shift (the row's first element), one read for
// the statistics and one for the output. Template parameters as in rmsnorm.cuh.
#pragma once

#include "common/reduce.cuh"
#include "common/row_layout.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    layernorm_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y, long long y_stride,
                     long long rows, long long cols, float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    __shared__ StatsScratch<MeanVarStats, THREADS_PER_ROW, ROWS_PER_BLOCK> scratch;
    const float inv_cols = 1.0f / static_cast<float>(cols);

    auto store_y = [&](TOut* y_row, long long col, const Vec<T, VEC>& raw, float mean, float scale) {
        float v[VEC], w[VEC], b[VEC];
        unpack(raw, v);
        load_vec<T, VEC>(weight + col, w);
        load_vec<T, VEC>(bias + col, b);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mean) * scale * w[k] + b[k];
        store_vec<TOut, VEC>(y_row + col, v);
    };

    if constexpr (ITEMS > 0) {
        const T* const x_bases[1] = {x};
        const long long x_strides[1] = {x_stride};
        for_each_row_group<Layout, T, VEC, ITEMS, 1, PREFETCH>(
            rows, cols, x_bases, x_strides, [&](const Layout& at, const Vec<T, VEC> (&held)[1][ITEMS]) {
                const bool active = at.row < rows;
                // This thread's count, mean and squared deviations (two passes over registers),
                // then one exchange for the whole row.
                float count = 0.0f, sum = 0.0f;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < cols)) continue;  // padding is not part of the row
                    float v[VEC];
                    unpack(held[0][i], v);
                    count += VEC;
#pragma unroll
                    for (int k = 0; k < VEC; ++k) sum += v[k];
                }
                const float local_mean = count > 0.0f ? sum / count : 0.0f;
                float m2 = 0.0f;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < cols)) continue;
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) m2 += (v[k] - local_mean) * (v[k] - local_mean);
                }
                const MeanVarStats row = row_reduce<MeanVarStats, THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>(
                    MeanVarStats{{count, local_mean, m2}}, scratch);
                const float mean = row.mean();
                const float var = row.m2() * inv_cols;
                const float scale = rsqrtf(var + eps);
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const long long col = at.column(i);
                    if (active && col < cols) store_y(y + at.row * y_stride, col, held[0][i], mean, scale);
                }
            });
    } else {
        const Layout at;
        const bool active = at.row < rows;
        const T* x_row = x + at.row * x_stride;
        const float shift = active ? to_float(x_row[0]) : 0.0f;
        float count = 0.0f, sum = 0.0f, squares = 0.0f;
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC) {
                float v[VEC];
                load_vec<T, VEC>(x_row + col, v);
                count += VEC;
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = v[k] - shift;
                    sum += d;
                    squares += d * d;
                }
            }
        }
        // This thread's stats from its shifted sums, then one exchange for the whole row (all its
        // threads share the shift, so the means stay shifted until the end).
        const float local_mean = count > 0.0f ? sum / count : 0.0f;
        const float m2 = fmaxf(squares - sum * local_mean, 0.0f);
        const MeanVarStats row = row_reduce<MeanVarStats, THREADS_PER_ROW, ROWS_PER_BLOCK, 1>(
            MeanVarStats{{count, local_mean, m2}}, scratch);
        const float mean = shift + row.mean();
        const float scale = rsqrtf(row.m2() * inv_cols + eps);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                store_y(y + at.row * y_stride, col, load_raw<T, VEC>(x_row + col), mean, scale);
        }
    }
}

}  // namespace tileops
