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

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool RAGGED>
__device__ __forceinline__ void rmsnorm_resident_rows(const T* x, long long x_stride, const T* weight, TOut* y,
                                                      long long y_stride, long long rows, long long cols, float eps) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER, RAGGED>;
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
        const auto& edges = row.edges();  // loaded with the row, used once it has landed
        edges.for_each(cols, [&](int s, long long) { sum_sq += to_float(edges.value[0][s]) * to_float(edges.value[0][s]); });
        const float scale = rsqrtf(reducer.template reduce<SumOp>(sum_sq) / static_cast<float>(cols) + eps);
        TOut* y_row = y + row.row() * y_stride;
        edges.for_each(cols, [&](int s, long long col) {
            store_rmsnorm<T, TOut, 1>(y_row, weight, col, edges.at(0, s), scale);
        });
        const int head = row.head();
        const T* w_body = weight + head;
        const bool w_aligned = vector_aligned<T, VEC>(weight, head);
        TOut* y_body = y_row + head;
        if constexpr (!RAGGED) {
            // Each vector's weights are loaded one vector ahead (bf16 256 x 262144 98.2 -> 94.8 us).
            row.emit_and_advance([&](long long col) { return load_raw<T, VEC>(w_body + col); },
                                 [&](long long col, const Vec<T, VEC>& raw, const Vec<T, VEC>& w) {
                                     store_rmsnorm<T, TOut, VEC>(y_body, w, col, raw, scale);
                                 });
        } else {
            // Where they are used: loaded ahead, weights off the row's frame spill at 1024 threads.
            row.emit_and_advance([](long long) { return 0; },
                                 [&](long long col, const Vec<T, VEC>& raw, int) {
                                     store_rmsnorm<T, TOut, VEC, true>(y_body, load_side<T, VEC>(w_body + col, w_aligned),
                                                                       col, raw, scale);
                                 });
        }
    }
    reducer.finish();
}

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
    rmsnorm_resident_kernel(const T* x, long long x_stride, const T* /*residual*/, long long /*residual_stride*/,
                            const T* weight, TOut* y, long long y_stride, T* /*sum_out*/, long long /*sum_stride*/,
                            long long rows, long long cols, float eps) {
    rmsnorm_resident_rows<T, TOut, THREADS, VEC, ITEMS, SLOTS, CLUSTER, false>(x, x_stride, weight, y, y_stride, rows,
                                                                             cols, eps);
}

// Rows of any length and alignment at full vector width (common/row_frame.cuh).
template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
    rmsnorm_resident_ragged_kernel(const T* x, long long x_stride, const T* /*residual*/,
                                   long long /*residual_stride*/, const T* weight, TOut* y, long long y_stride,
                                   T* /*sum_out*/, long long /*sum_stride*/, long long rows, long long cols, float eps) {
    rmsnorm_resident_rows<T, TOut, THREADS, VEC, ITEMS, SLOTS, CLUSTER, true>(x, x_stride, weight, y, y_stride, rows,
                                                                            cols, eps);
}

}  // namespace tileops
