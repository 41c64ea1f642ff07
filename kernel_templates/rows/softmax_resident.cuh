// Softmax (or log-softmax when LOG) for long rows held on chip (rows/resident_row.cuh): what
// softmax.cuh computes in register mode, for rows too long for a cluster's registers alone.
//
//   y = exp(x - max) / sum(exp(x - max))       log-softmax: y = x - max - log(sum(exp(x - max)))
//
// exp is computed as exp2 with log2(e) folded in; -inf inputs give 0 (or -inf for log-softmax), a
// row entirely -inf gives NaN. The max and the sum are gathered in one pass (an online softmax per
// thread) as the row lands, then reduced over the row: one pass over the held row besides the
// output's.
// Template parameters as in rmsnorm_resident.cuh; the kernel parameters are softmax_kernel's.
#pragma once

#include "common/infinity.cuh"
#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/resident_row.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool LOG, bool RAGGED>
__device__ __forceinline__ void softmax_resident_rows(const T* x, long long x_stride, TOut* y, long long y_stride,
                                                      long long rows, long long cols) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER, RAGGED>;
    constexpr float kLog2e = log2_e();
    using Reducer = RowReducer<THREADS, 1, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    extern __shared__ __align__(16) unsigned char resident_slots[];
    Reducer reducer(reduce_shared);
    Row row(resident_slots, x, x_stride, rows, cols);

    while (row.has_row()) {
        // One pass as the row lands: the thread's running max and its sum of exponentials
        // relative to that max (rescaled when the max grows).
        float max = kNegativeInfinity, sum = 0.0f;
        row.for_each_as_it_lands([&](const Vec<T, VEC>& raw, bool in_row) {
            if (!in_row) return;  // padding is not part of the row
            float v[VEC];
            unpack(raw, v);
            float vec_max = v[0];
#pragma unroll
            for (int k = 1; k < VEC; ++k) vec_max = fmaxf(vec_max, v[k]);
            if (vec_max == kNegativeInfinity) return;  // contributes nothing; would make inf - inf
            if (vec_max > max) {
                sum *= exp2f((max - vec_max) * kLog2e);
                max = vec_max;
            }
            const float max_scaled = max * kLog2e;
#pragma unroll
            for (int k = 0; k < VEC; ++k) sum += exp2f(v[k] * kLog2e - max_scaled);
        });
        const auto& edges = row.edges();  // loaded with the row, used once it has landed
        edges.for_each(cols, [&](int s, long long) {
            const float v = to_float(edges.value[0][s]);
            if (v == kNegativeInfinity) return;
            if (v > max) {
                sum = sum * exp2f((max - v) * kLog2e) + 1.0f;
                max = v;
            } else {
                sum += exp2f((v - max) * kLog2e);
            }
        });
        const float row_max = reducer.template reduce<MaxOp>(max);
        const float max_scaled = row_max * kLog2e;
        const float rescaled = max == kNegativeInfinity ? 0.0f : sum * exp2f(max * kLog2e - max_scaled);
        const float log2_sum = __log2f(reducer.template reduce<SumOp>(rescaled));
        TOut* y_row = y + row.row() * y_stride;
        edges.for_each(cols, [&](int s, long long col) {
            store_softmax<LOG, T, TOut, 1>(y_row, col, edges.at(0, s), max_scaled, log2_sum);
        });
        TOut* y_body = y_row + row.head();
        row.emit_and_advance([](long long) { return 0; },  // nothing besides the row
                             [&](long long col, const Vec<T, VEC>& raw, int) {
                                 store_softmax<LOG, T, TOut, VEC, RAGGED>(y_body, col, raw, max_scaled, log2_sum);
                             });
    }
    reducer.finish();
}

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool LOG>
__global__ void __launch_bounds__(THREADS, 1)
    softmax_resident_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows,
                            long long cols) {
    softmax_resident_rows<T, TOut, THREADS, VEC, ITEMS, SLOTS, CLUSTER, LOG, false>(x, x_stride, y, y_stride, rows,
                                                                                  cols);
}

// Rows of any length and alignment at full vector width (common/row_frame.cuh).
template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool LOG>
__global__ void __launch_bounds__(THREADS, 1)
    softmax_resident_ragged_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows,
                                   long long cols) {
    softmax_resident_rows<T, TOut, THREADS, VEC, ITEMS, SLOTS, CLUSTER, LOG, true>(x, x_stride, y, y_stride, rows,
                                                                                 cols);
}

}  // namespace tileops
