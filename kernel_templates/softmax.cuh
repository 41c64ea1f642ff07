// Softmax (or log-softmax when LOG) over the last dimension:
//
//   y = exp(x - max) / sum(exp(x - max))       log-softmax: y = x - max - log(sum(exp(x - max)))
//
// Each thread keeps an online (max, sum of exponentials) over its elements, in log2 units (exp2
// with log2(e) folded in), and the row's statistics come from one reduction of those pairs.
// -inf inputs give 0 (or -inf for log-softmax); a row that is entirely -inf gives NaN, as torch
// does. Register mode (ITEMS > 0) holds the row and reads it once; streaming mode (ITEMS == 0)
// reads it twice. Template parameters as in rmsnorm.cuh.
#pragma once

#include "common/reduce.cuh"
#include "common/row_layout.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER, bool LOG>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    softmax_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows, long long cols) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    constexpr float kLog2e = 1.4426950408889634f;
    constexpr float kLn2 = 0.6931471805599453f;
    __shared__ RowScratch<THREADS_PER_ROW, ROWS_PER_BLOCK, MaxSum> scratch;
    for (long long group = Layout::first_group(); group < Layout::groups(rows); group += Layout::group_step()) {
        const Layout at(group);
        const bool active = at.row < rows;
        const T* x_row = x + at.row * x_stride;
        TOut* y_row = y + at.row * y_stride;

        auto add_vector = [](MaxSum stats, const Vec<T, VEC>& raw) {
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) stats = MaxSumOp::add(stats, v[k] * kLog2e);
            return stats;
        };
        // Writes the VEC outputs at `col` from the row's statistics.
        auto store_y = [&](long long col, const Vec<T, VEC>& raw, const MaxSum& row) {
            const float offset = row.max + __log2f(row.sum);
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float log2_p = v[k] * kLog2e - offset;  // log2 of the probability
                v[k] = LOG ? log2_p * kLn2 : exp2f(log2_p);
            }
            store_vec<TOut, VEC>(y_row + col, v);
        };

        MaxSum stats = MaxSumOp::identity();
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
            const MaxSum row = row_reduce<MaxSumOp, THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>(stats, scratch);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long col = at.column(i);
                if (active && col < cols) store_y(col, held[i], row);
            }
        } else {
            if (active)
                for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                    stats = add_vector(stats, load_raw<T, VEC>(x_row + col));
            const MaxSum row = row_reduce<MaxSumOp, THREADS_PER_ROW, ROWS_PER_BLOCK, 1>(stats, scratch);
            if (active)
                for (long long col = static_cast<long long>(at.lane) * VEC; col < cols; col += THREADS_PER_ROW * VEC)
                    store_y(col, load_raw<T, VEC>(x_row + col), row);
        }
    }
}

}  // namespace tileops
