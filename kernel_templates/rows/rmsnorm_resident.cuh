// RMSNorm for long rows held on chip (rows/resident_row.cuh): what rmsnorm.cuh computes, for
// rows too long for a cluster's registers alone. No residual add in this path.
//
//   y = x * rsqrt(mean(x^2) + eps) * weight    (fp32 arithmetic)
//
// Template parameters: T input/weight type, TOut output type, THREADS per CTA (one row per CTA),
// VEC elements per access, ITEMS vectors a thread holds in registers, SLOTS vectors a thread
// holds in shared memory, CLUSTER CTAs per row (sm_90). The parameters are rmsnorm_kernel's, so
// both launch alike; the residual ones are unused.
#pragma once

#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/resident_row.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
    rmsnorm_resident_kernel(const T* x, long long x_stride, const T* /*residual*/, long long /*residual_stride*/,
                            const T* weight, TOut* y, long long y_stride, T* /*sum_out*/, long long /*sum_stride*/,
                            long long rows, long long cols, float eps) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER>;
    using Reducer = RowReducer<THREADS, 1, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    extern __shared__ __align__(16) unsigned char resident_slots[];
    Reducer reducer(reduce_shared);
    Row row(resident_slots, x, x_stride, rows, cols);

    while (row.has_row()) {
        float sum_sq = 0.0f;  // vectors past the row are zeros
        row.for_each_as_it_lands([&](const Vec<T, VEC>& raw, bool) {
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) sum_sq += v[k] * v[k];
        });
        const float scale = rsqrtf(reducer.template reduce<SumOp>(sum_sq) / static_cast<float>(cols) + eps);
        TOut* y_row = y + row.row() * y_stride;
        row.emit_and_advance([&](long long col) { return load_raw<T, VEC>(weight + col); },
                             [&](long long col, const Vec<T, VEC>& raw, const Vec<T, VEC>& w) {
                                 store_rmsnorm<T, TOut, VEC>(y_row, w, col, raw, scale);
                             });
    }
    reducer.finish();
}

}  // namespace tileops
