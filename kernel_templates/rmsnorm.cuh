// RMSNorm over the last dimension, optionally fused with the residual add.
//
//   h = x (+ residual)                         (rounded to T, as an unfused add would store it)
//   y = h * rsqrt(mean(h^2) + eps) * weight    (fp32 arithmetic)
//   sum_out = h                                (only with RESIDUAL; may alias x or residual)
//
// Template parameters (see common/row_layout.cuh): T input/weight/sum type, TOut output type,
// THREADS_PER_ROW, ROWS_PER_BLOCK, VEC elements per access, ITEMS vectors held per thread
// (0: streaming, any row length, reads the row twice), CLUSTER CTAs per row (sm_90).
#pragma once

#include "common/reduce.cuh"
#include "common/row_layout.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool RESIDUAL>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    rmsnorm_kernel(const T* x, long long x_stride, const T* residual, long long residual_stride, const T* weight,
                   TOut* y, long long y_stride, T* sum_out, long long sum_stride, long long rows, long long cols,
                   float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    __shared__ RowScratch<THREADS_PER_ROW, ROWS_PER_BLOCK> scratch;
    const Layout at;
    const bool active = at.row < rows;
    const T* x_row = x + at.row * x_stride;
    const T* r_row = RESIDUAL ? residual + at.row * residual_stride : nullptr;
    T* s_row = RESIDUAL ? sum_out + at.row * sum_stride : nullptr;
    TOut* y_row = y + at.row * y_stride;

    // h for the VEC elements at `col`: x (+ residual), rounded to T.
    auto load_h = [&](long long col) {
        Vec<T, VEC> h = load_raw<T, VEC>(x_row + col);
        if constexpr (RESIDUAL) {
            float a[VEC], b[VEC];
            unpack(h, a);
            unpack(load_raw<T, VEC>(r_row + col), b);
#pragma unroll
            for (int k = 0; k < VEC; ++k) a[k] += b[k];
            h = pack<T, VEC>(a);
        }
        return h;
    };
    auto add_squares = [](const Vec<T, VEC>& h, float& sum) {
        float v[VEC];
        unpack(h, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += v[k] * v[k];
    };
    auto store_y = [&](long long col, const Vec<T, VEC>& h, float scale) {
        float v[VEC], w[VEC];
        unpack(h, v);
        load_vec<T, VEC>(weight + col, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = v[k] * scale * w[k];
        store_vec<TOut, VEC>(y_row + col, v);
    };

    float sum_sq = 0.0f;
    if constexpr (ITEMS > 0) {
        Vec<T, VEC> h[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long col = at.column(i);
            if (active && col < cols) {
                h[i] = load_h(col);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) h[i].v[k] = from_float<T>(0.0f);
            }
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            add_squares(h[i], sum_sq);
            if constexpr (RESIDUAL) {
                const long long col = at.column(i);
                if (active && col < cols) store_raw<T, VEC>(s_row + col, h[i]);
            }
        }
        const float scale = rsqrtf(row_reduce<SumOp, THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>(sum_sq, scratch) /
                                       static_cast<float>(cols) + eps);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long col = at.column(i);
            if (active && col < cols) store_y(col, h[i], scale);
        }
    } else {
        // Streaming: pass 1 sums squares (and writes h), pass 2 re-reads h and writes y.
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC) {
                Vec<T, VEC> h = load_h(col);
                add_squares(h, sum_sq);
                if constexpr (RESIDUAL) store_raw<T, VEC>(s_row + col, h);
            }
        }
        const float scale = rsqrtf(row_reduce<SumOp, THREADS_PER_ROW, ROWS_PER_BLOCK, 1>(sum_sq, scratch) /
                                       static_cast<float>(cols) + eps);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC) {
                // The same thread wrote h to sum_out in pass 1, so reading it back is ordered.
                store_y(col, load_raw<T, VEC>(RESIDUAL ? s_row + col : x_row + col), scale);
            }
        }
    }
}

}  // namespace tileops
