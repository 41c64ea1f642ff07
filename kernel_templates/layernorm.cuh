// LayerNorm over the last dimension with weight and bias (biased variance, like torch):
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic)
//
// In register mode each thread takes the mean of its held values and their squared deviations
// from it (a second pass over its registers), which is exact where E[x^2] - E[x]^2 would cancel;
// the threads' statistics are merged in one reduction (MeanM2Op). Streaming mode (ITEMS == 0)
// sums deviations from a shift (the row's first element), one read for the statistics and one
// for the output. Template parameters as in rmsnorm.cuh.
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
    using Reducer = RowReducer<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    Reducer reducer(reduce_shared);
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
                // The thread's count, mean and squared deviations from its mean (two passes over
                // its registers), merged over the row in one reduction (MeanM2Op).
                float count = 0.0f, sum = 0.0f;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < cols)) continue;  // padding is not part of the row
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) sum += v[k];
                    count += VEC;
                }
                const float thread_mean = count > 0.0f ? sum / count : 0.0f;
                float squares = 0.0f;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < cols)) continue;
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) squares += (v[k] - thread_mean) * (v[k] - thread_mean);
                }
                const Floats<3> stats = reducer.template reduce<MeanM2Op>({{count, thread_mean, squares}});
                const float mean = stats.v[1];
                const float scale = rsqrtf(stats.v[2] * inv_cols + eps);
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
        // The thread's count, mean and squared deviations (of x - shift), merged in one reduction.
        const float thread_mean = count > 0.0f ? sum / count : 0.0f;
        const float thread_m2 = count > 0.0f ? fmaxf(squares - sum * thread_mean, 0.0f) : 0.0f;
        const Floats<3> stats = reducer.template reduce<MeanM2Op>({{count, thread_mean, thread_m2}});
        const float scale = rsqrtf(stats.v[2] * inv_cols + eps);
        const float mean = shift + stats.v[1];
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                store_y(y + at.row * y_stride, col, load_raw<T, VEC>(x_row + col), mean, scale);
        }
    }
    reducer.finish();
}

}  // namespace tileops
