// Softmax (or log-softmax when LOG) over the last dimension:
//
//   y = exp(x - max) / sum(exp(x - max))       log-softmax: y = x - max - log(sum(exp(x - max)))
//
// exp is computed as exp2 with log2(e) folded into the scale. -inf inputs give 0 (or -inf for
// log-softmax); a row that is entirely -inf gives NaN, as torch does. Register mode holds the row
// and reads it once; streaming mode (ITEMS == 0) keeps an online (max, sum) per thread in one read
// and writes in a second. Template parameters as in rmsnorm.cuh; softmax_ragged_kernel takes
// rows of any length and alignment (common/row_frame.cuh).
#pragma once

#include "common/infinity.cuh"
#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/row_layout.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER, bool LOG,
          bool PREFETCH, bool RAGGED>
__device__ __forceinline__ void softmax_rows(const T* x, long long x_stride, TOut* y, long long y_stride,
                                             long long rows, long long cols) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    using Frame = RowFrame<T, VEC, RAGGED>;
    constexpr float kLog2e = log2_e();
    using Reducer = RowReducer<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    Reducer reducer(reduce_shared);
    const Frame frame(x, x_stride, cols);

    auto store_y = [&](TOut* y_row, long long col, const Vec<T, VEC>& raw, float max_scaled, float log2_sum) {
        store_softmax<LOG, T, TOut, VEC, RAGGED>(y_row, col, raw, max_scaled, log2_sum);
    };

    if constexpr (ITEMS > 0) {
        const T* const x_bases[1] = {x};
        const long long x_strides[1] = {x_stride};
        for_each_row_group<Layout, T, VEC, ITEMS, 1, PREFETCH>(
            rows, frame, x_bases, x_strides, [&](const Layout& at, const Vec<T, VEC> (&held)[1][ITEMS], const auto& edges) {
                const bool active = at.row < rows;
                const long long body = frame.body(at.row);
                float max = kNegativeInfinity;
                edges.for_each(cols, [&](int s, long long) { max = fmaxf(max, to_float(edges.value[0][s])); });
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < body)) continue;  // padding is not part of the row
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) max = fmaxf(max, v[k]);
                }
                const float max_scaled =
                    reducer.template reduce<MaxOp>(max) * kLog2e;
                float sum = 0.0f;
                edges.for_each(cols, [&](int s, long long) { sum += exp2f(to_float(edges.value[0][s]) * kLog2e - max_scaled); });
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    if (!(active && at.column(i) < body)) continue;
                    float v[VEC];
                    unpack(held[0][i], v);
#pragma unroll
                    for (int k = 0; k < VEC; ++k) sum += exp2f(v[k] * kLog2e - max_scaled);
                }
                const float log2_sum =
                    __log2f(reducer.template reduce<SumOp>(sum));
                TOut* y_row = y + at.row * y_stride;
                edges.for_each(cols, [&](int s, long long col) {
                    store_softmax<LOG, T, TOut, 1>(y_row, col, edges.at(0, s), max_scaled, log2_sum);
                });
                TOut* y_body = y_row + frame.head(at.row);
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const long long col = at.column(i);
                    if (active && col < body) store_y(y_body, col, held[0][i], max_scaled, log2_sum);
                }
            });
    } else {
        // Online statistics: `sum` is relative to this thread's running max.
        const Layout at;
        const bool active = at.row < rows;
        const T* x_row = x + at.row * x_stride;
        const T* x_body = x_row + frame.head(at.row);
        const long long body = frame.body(at.row);
        RowEdges<T, VEC, THREADS_PER_ROW, 1, RAGGED> edges;
        const T* const x_bases[1] = {x};
        const long long x_strides[1] = {x_stride};
        edges.load(frame, at.row, active, at.lane, true, x_bases, x_strides);
        float max = kNegativeInfinity, sum = 0.0f;
        auto add = [&](float v) {
            if (v == kNegativeInfinity) return;  // contributes nothing; would make inf - inf
            if (v > max) {
                sum = sum * exp2f((max - v) * kLog2e) + 1.0f;
                max = v;
            } else {
                sum += exp2f((v - max) * kLog2e);
            }
        };
        edges.for_each(cols, [&](int s, long long) { add(to_float(edges.value[0][s])); });
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < body; col += THREADS_PER_ROW * VEC) {
                float v[VEC];
                load_vec<T, VEC>(x_body + col, v);
#pragma unroll
                for (int k = 0; k < VEC; ++k) add(v[k]);
            }
        }
        const float row_max = reducer.template reduce<MaxOp>(max);
        const float rescaled = max == kNegativeInfinity ? 0.0f : sum * exp2f((max - row_max) * kLog2e);
        const float log2_sum = __log2f(reducer.template reduce<SumOp>(rescaled));
        TOut* y_row = y + at.row * y_stride;
        edges.for_each(cols, [&](int s, long long col) {
            store_softmax<LOG, T, TOut, 1>(y_row, col, edges.at(0, s), row_max * kLog2e, log2_sum);
        });
        TOut* y_body = y_row + frame.head(at.row);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < body; col += THREADS_PER_ROW * VEC)
                store_y(y_body, col, load_raw<T, VEC>(x_body + col), row_max * kLog2e, log2_sum);
        }
    }
    reducer.finish();
}

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER, bool LOG,
          bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    softmax_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows, long long cols) {
    softmax_rows<T, TOut, THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER, LOG, PREFETCH, false>(
        x, x_stride, y, y_stride, rows, cols);
}

// Rows of any length and alignment at full vector width (common/row_frame.cuh).
template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER, bool LOG,
          bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    softmax_ragged_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows,
                          long long cols) {
    softmax_rows<T, TOut, THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER, LOG, PREFETCH, true>(
        x, x_stride, y, y_stride, rows, cols);
}

}  // namespace tileops
