// LayerNorm over the last dimension with weight and bias (biased variance, like torch):
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic)
//
// In register mode the variance is a second pass over the held row (sum of squared deviations
// from the mean), which is exact where E[x^2] - E[x]^2 would cancel. Streaming mode (ITEMS == 0)
// sums deviations from a shift (the row's first element), one read for the statistics and one
// for the output. Template parameters as in rmsnorm.cuh; layernorm_ragged_kernel takes rows of any
// length and alignment (common/row_frame.cuh).
#pragma once

#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/row_layout.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool PREFETCH, bool RAGGED>
__device__ __forceinline__ void layernorm_rows(const T* x, long long x_stride, const T* weight, const T* bias,
                                               TOut* y, long long y_stride, long long rows, long long cols,
                                               float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    using Reducer = RowReducer<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    Reducer reducer(reduce_shared);
    const float inv_cols = 1.0f / static_cast<float>(cols);
    const RowFrame<T, VEC, RAGGED> frame(x, x_stride, cols);
    const T* const x_bases[1] = {x};
    const long long x_strides[1] = {x_stride};

    // The weights and biases of a row's body vector at col, for a row whose body starts at head (a
    // ragged row's may be off a vector).
    auto load_side_at = [&](int head, long long col) {
        if constexpr (RAGGED) {
            const bool aligned = vector_aligned<T, VEC>(weight, head) && vector_aligned<T, VEC>(bias, head);
            return LayerNormSide<T, VEC>{load_side<T, VEC>(weight + head + col, aligned),
                                         load_side<T, VEC>(bias + head + col, aligned)};
        } else {
            return LayerNormSide<T, VEC>{load_raw<T, VEC>(weight + col), load_raw<T, VEC>(bias + col)};
        }
    };
    auto store_edges = [&](const auto& edges, TOut* y_row, float mean, float scale) {
        edges.for_each(cols, [&](int s, long long col) {
            store_layernorm<T, TOut, 1>(y_row, weight, bias, col, edges.at(0, s), mean, scale);
        });
    };

    if constexpr (ITEMS > 0) {
        for_each_row_group<Layout, T, VEC, ITEMS, 1, PREFETCH>(
            rows, frame, x_bases, x_strides,
            [&](const Layout& at, const Vec<T, VEC> (&held)[1][ITEMS], const auto& edges) {
                const bool active = at.row < rows;
                const int head = frame.head(at.row);
                const long long body = frame.body(at.row);
                float sum = 0.0f;  // held vectors past the row are zeros
                edges.for_each(cols, [&](int s, long long) { sum += to_float(edges.value[0][s]); });
                // Where a thread holds one vector of the row, its weights and biases are loaded
                // before the reductions, so that their round trip overlaps them: on one row or a few
                // (a launch-bound problem) they were a second memory latency after the row's. Held
                // through the reductions for more vectors, they spill at 1024 threads (ptxas,
                // sm_90a: layernorm 256 x 262144 fp32, 8 vectors of 2); those load them after.
                constexpr bool kSideFirst = ITEMS == 1;
                LayerNormSide<T, VEC> side[ITEMS] = {};
                if constexpr (kSideFirst)
                    if (active && at.column(0) < body) side[0] = load_side_at(head, at.column(0));
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) sum += v[k];
                }
                const float mean = reducer.template reduce<SumOp>(sum) * inv_cols;
                float squares = 0.0f;
                edges.for_each(cols, [&](int s, long long) {
                    const float d = to_float(edges.value[0][s]) - mean;
                    squares += d * d;
                });
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < body)) continue;  // padding is not part of the row
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) squares += (v[k] - mean) * (v[k] - mean);
                }
                const float var =
                    reducer.template reduce<SumOp>(squares) * inv_cols;
                const float scale = rsqrtf(var + eps);
                store_edges(edges, y + at.row * y_stride, mean, scale);
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const long long col = at.column(i);
                    if (active && col < body)
                        store_layernorm<T, TOut, VEC, RAGGED>(y + at.row * y_stride + head,
                                                              kSideFirst ? side[i] : load_side_at(head, col), col,
                                                              held[0][i], mean, scale);
                }
            });
    } else {
        const Layout at;
        const bool active = at.row < rows;
        const int head = frame.head(at.row);
        const long long body = frame.body(at.row);
        const T* x_row = x + at.row * x_stride;
        const float shift = active ? to_float(x_row[0]) : 0.0f;
        x_row += head;
        RowEdges<T, VEC, THREADS_PER_ROW, 1, RAGGED> edges;
        edges.load(frame, at.row, active, at.lane, true, x_bases, x_strides);
        float sum = 0.0f, squares = 0.0f;
        edges.for_each(cols, [&](int s, long long) {
            const float d = to_float(edges.value[0][s]) - shift;
            sum += d;
            squares += d * d;
        });
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < body; col += THREADS_PER_ROW * VEC) {
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
        store_edges(edges, y + at.row * y_stride, mean, scale);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < body; col += THREADS_PER_ROW * VEC)
                store_layernorm<T, TOut, VEC, RAGGED>(y + at.row * y_stride + head, load_side_at(head, col), col,
                                                      load_raw<T, VEC>(x_row + col), mean, scale);
        }
    }
    reducer.finish();
}

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    layernorm_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y, long long y_stride,
                     long long rows, long long cols, float eps) {
    layernorm_rows<T, TOut, THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER, PREFETCH, false>(
        x, x_stride, weight, bias, y, y_stride, rows, cols, eps);
}

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    layernorm_ragged_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y,
                            long long y_stride, long long rows, long long cols, float eps) {
    layernorm_rows<T, TOut, THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER, PREFETCH, true>(
        x, x_stride, weight, bias, y, y_stride, rows, cols, eps);
}

}  // namespace tileops
