// LayerNorm over the last dimension with weight and bias (biased variance, like torch):
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic)
//
// Each thread computes the exact mean and squared deviations of each vector it reads, merges them
// pairwise (Chan et al.), and one reduction of (count, mean, M2) gives the row's statistics: no
// E[x^2] - E[x]^2 cancellation. Register mode (ITEMS > 0) reads the row once; streaming mode
// (ITEMS == 0) twice. Template parameters as in rmsnorm.cuh.
#pragma once

#include "common/reduce.cuh"
#include "common/row_layout.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    layernorm_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y, long long y_stride,
                     long long rows, long long cols, float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    __shared__ RowScratch<THREADS_PER_ROW, ROWS_PER_BLOCK, MeanVar> scratch;
    for (long long group = Layout::first_group(); group < Layout::groups(rows); group += Layout::group_step()) {
        const Layout at(group);
        const bool active = at.row < rows;
        const T* x_row = x + at.row * x_stride;
        TOut* y_row = y + at.row * y_stride;

        auto add_vector = [](MeanVar stats, const Vec<T, VEC>& raw) {
            float v[VEC];
            unpack(raw, v);
            return MeanVarOp::apply(stats, MeanVarOp::of(v));
        };
        auto store_y = [&](long long col, const Vec<T, VEC>& raw, float mean, float scale) {
            float v[VEC], w[VEC], b[VEC];
            unpack(raw, v);
            load_vec<T, VEC>(weight + col, w);
            load_vec<T, VEC>(bias + col, b);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mean) * scale * w[k] + b[k];
            store_vec<TOut, VEC>(y_row + col, v);
        };

        MeanVar stats = MeanVarOp::identity();
        if constexpr (ITEMS > 0) {
            Vec<T, VEC> held[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long col = at.column(i);
                if (active && col < cols) held[i] = load_raw<T, VEC>(x_row + col);
            }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (active && at.column(i) < cols) stats = add_vector(stats, held[i]);
            const MeanVar row = row_reduce<MeanVarOp, THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>(stats, scratch);
            const float scale = rsqrtf(row.m2 / static_cast<float>(cols) + eps);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long col = at.column(i);
                if (active && col < cols) store_y(col, held[i], row.mean, scale);
            }
        } else {
            if (active)
                for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                    stats = add_vector(stats, load_raw<T, VEC>(x_row + col));
            const MeanVar row = row_reduce<MeanVarOp, THREADS_PER_ROW, ROWS_PER_BLOCK, 1>(stats, scratch);
            const float scale = rsqrtf(row.m2 / static_cast<float>(cols) + eps);
            if (active)
                for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                    store_y(col, load_raw<T, VEC>(x_row + col), row.mean, scale);
        }
    }
}

}  // namespace tileops
