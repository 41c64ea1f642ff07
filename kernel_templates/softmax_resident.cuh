// Softmax (or log-softmax when LOG) for long rows held on chip (common/resident_row.cuh): what
// softmax.cuh computes in register mode, for rows too long for a cluster's registers alone.
//
//   y = exp(x - max) / sum(exp(x - max))       log-softmax: y = x - max - log(sum(exp(x - max)))
//
// exp is computed as exp2 with log2(e) folded in; -inf inputs give 0 (or -inf for log-softmax).
// Template parameters as in rmsnorm_resident.cuh; the kernel parameters are softmax_kernel's.
#pragma once

#include <cuda/std/limits>

#include "common/reduce.cuh"
#include "common/resident_row.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool LOG>
__global__ void __launch_bounds__(THREADS, 1)
    softmax_resident_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows,
                            long long cols) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER>;
    using Reducer = RowReducer<THREADS, 1, CLUSTER>;
    constexpr float kLog2e = 1.4426950408889634f;
    constexpr float kLn2 = 0.6931471805599453f;
    __shared__ typename Reducer::Shared reduce_shared;
    extern __shared__ __align__(16) unsigned char resident_slots[];
    Reducer reducer(reduce_shared);
    Row row(resident_slots, x, x_stride, rows, cols);

    while (row.has_row()) {
        row.wait();
        float max = -cuda::std::numeric_limits<float>::infinity();
        row.for_each([&](const Vec<T, VEC>& raw, bool in_row) {
            if (!in_row) return;  // padding is not part of the row
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) max = fmaxf(max, v[k]);
        });
        const float max_scaled = reducer.template reduce<MaxOp>(max) * kLog2e;
        float sum = 0.0f;
        row.for_each([&](const Vec<T, VEC>& raw, bool in_row) {
            if (!in_row) return;
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) sum += exp2f(v[k] * kLog2e - max_scaled);
        });
        const float log2_sum = __log2f(reducer.template reduce<SumOp>(sum));
        TOut* y_row = y + row.row() * y_stride;
        row.emit_and_advance([&](long long col, const Vec<T, VEC>& raw) {
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float shifted = v[k] * kLog2e - max_scaled - log2_sum;  // log2 of the probability
                v[k] = LOG ? shifted * kLn2 : exp2f(shifted);
            }
            store_vec<TOut, VEC>(y_row + col, v);
        });
    }
    reducer.finish();
}

}  // namespace tileops
