// RMSNorm over the last dimension, optionally fused with the residual add.
//
//   h = x (+ residual)                         (rounded to T, as an unfused add would store it)
//   y = h * rsqrt(mean(h^2) + eps) * weight    (fp32 arithmetic)
//   sum_out = h                                (only with RESIDUAL; may alias x or residual)
//
// Template parameters (see rows/row_layout.cuh): T input/weight/sum type, TOut output type,
// THREADS_PER_ROW, ROWS_PER_BLOCK, VEC elements per access, ITEMS vectors held per thread
// (0: streaming, any row length, reads the row twice), CLUSTER CTAs per row (sm_90), PREFETCH
// (register mode: a persistent grid whose blocks copy their next rows while they work on the
// current ones, see RowPrefetch in rows/row_layout.cuh).
#pragma once

#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/row_layout.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool RESIDUAL, bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    rmsnorm_kernel(const T* x, long long x_stride, const T* residual, long long residual_stride, const T* weight,
                   TOut* y, long long y_stride, T* sum_out, long long sum_stride, long long rows, long long cols,
                   float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    using Reducer = RowReducer<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    Reducer reducer(reduce_shared);

    // h = x (+ residual), rounded to T.
    auto combine = [](const Vec<T, VEC>& x_vec, const Vec<T, VEC>& r_vec) {
        float a[VEC], b[VEC];
        unpack(x_vec, a);
        unpack(r_vec, b);
#pragma unroll
        for (int k = 0; k < VEC; ++k) a[k] += b[k];
        return pack<T, VEC>(a);
    };
    auto add_squares = [](const Vec<T, VEC>& h, float& sum) {
        float v[VEC];
        unpack(h, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += v[k] * v[k];
    };
    auto store_y = [&](TOut* y_row, long long col, const Vec<T, VEC>& h, float scale) {
        store_rmsnorm<T, TOut, VEC>(y_row, weight, col, h, scale);
    };

    if constexpr (ITEMS > 0) {
        constexpr int kInputs = RESIDUAL ? 2 : 1;
        const T* const bases[2] = {x, residual};
        const long long strides[2] = {x_stride, residual_stride};
        for_each_row_group<Layout, T, VEC, ITEMS, kInputs, PREFETCH>(
            rows, cols, bases, strides, [&](const Layout& at, const Vec<T, VEC> (&held)[kInputs][ITEMS]) {
                const bool active = at.row < rows;
                Vec<T, VEC> h[ITEMS];
                float sum_sq = 0.0f;
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    h[i] = RESIDUAL ? combine(held[0][i], held[kInputs - 1][i]) : held[0][i];
                    add_squares(h[i], sum_sq);
                    if constexpr (RESIDUAL) {
                        const long long col = at.column(i);
                        if (active && col < cols) store_raw<T, VEC>(sum_out + at.row * sum_stride + col, h[i]);
                    }
                }
                const float scale =
                    rsqrtf(reducer.template reduce<SumOp>(sum_sq) /
                               static_cast<float>(cols) + eps);
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const long long col = at.column(i);
                    if (active && col < cols) store_y(y + at.row * y_stride, col, h[i], scale);
                }
            });
    } else {
        // Streaming: pass 1 sums squares (and writes h), pass 2 re-reads h and writes y.
        const Layout at;
        const bool active = at.row < rows;
        const T* x_row = x + at.row * x_stride;
        const T* r_row = RESIDUAL ? residual + at.row * residual_stride : nullptr;
        T* s_row = RESIDUAL ? sum_out + at.row * sum_stride : nullptr;
        auto load_h = [&](long long col) {
            const Vec<T, VEC> x_vec = load_raw<T, VEC>(x_row + col);
            return RESIDUAL ? combine(x_vec, load_raw<T, VEC>(r_row + col)) : x_vec;
        };
        float sum_sq = 0.0f;
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC) {
                Vec<T, VEC> h = load_h(col);
                add_squares(h, sum_sq);
                if constexpr (RESIDUAL) store_raw<T, VEC>(s_row + col, h);
            }
        }
        const float scale = rsqrtf(reducer.template reduce<SumOp>(sum_sq) /
                                       static_cast<float>(cols) + eps);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC) {
                // The same thread wrote h to sum_out in pass 1, so reading it back is ordered.
                store_y(y + at.row * y_stride, col, load_raw<T, VEC>(RESIDUAL ? s_row + col : x_row + col), scale);
            }
        }
    }
    reducer.finish();
}

}  // namespace tileops
