// LayerNorm over the last dimension with weight and bias (biased variance, like torch):
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic)
//
// In register mode the variance is a second pass over the held row (sum of squared deviations
// from the mean), which is exact where E[x^2] - E[x]^2 would cancel. Streaming mode (ITEMS == 0)
// sums deviations from a shift (the row's first element), one read for the statistics and one
// for the output. Template parameters as in rmsnorm.cuh.
#pragma once

#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/row_layout.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    layernorm_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y, long long y_stride,
                     long long rows, long long cols, float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    using Reducer = RowReducer<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    Reducer reducer(reduce_shared);
    const float inv_cols = 1.0f / static_cast<float>(cols);

    auto store_y = [&](TOut* y_row, long long col, const Vec<T, VEC>& raw, float mean, float scale) {
        store_layernorm<T, TOut, VEC>(y_row, weight, bias, col, raw, mean, scale);
    };

    if constexpr (ITEMS > 0) {
        const T* const x_bases[1] = {x};
        const long long x_strides[1] = {x_stride};
        for_each_row_group<Layout, T, VEC, ITEMS, 1, PREFETCH>(
            rows, cols, x_bases, x_strides, [&](const Layout& at, const Vec<T, VEC> (&held)[1][ITEMS]) {
                const bool active = at.row < rows;
                float sum = 0.0f;  // held vectors past the row are zeros
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) sum += v[k];
                }
                const float mean = reducer.template reduce<SumOp>(sum) * inv_cols;
                float squares = 0.0f;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < cols)) continue;  // padding is not part of the row
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) squares += (v[k] - mean) * (v[k] - mean);
                }
                const float var =
                    reducer.template reduce<SumOp>(squares) * inv_cols;
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
        float sum = 0.0f, squares = 0.0f;
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC) {
                float v[VEC];
                load_vec<T, VEC>(x_row + col, v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = v[k] - shift;
                    sum += d;
                    squares += d * d;
                }
            }
        }
        const float mean_shifted = reducer.template reduce<SumOp>(sum) * inv_cols;
        const float mean_squares = reducer.template reduce<SumOp>(squares) * inv_cols;
        const float var = fmaxf(mean_squares - mean_shifted * mean_shifted, 0.0f);
        const float scale = rsqrtf(var + eps);
        const float mean = shift + mean_shifted;
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                store_y(y + at.row * y_stride, col, load_raw<T, VEC>(x_row + col), mean, scale);
        }
    }
    reducer.finish();
}

}  // namespace tileops
