// LayerNorm for long rows held on chip (common/resident_row.cuh): what layernorm.cuh computes in
// register mode, for rows too long for a cluster's registers alone.
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic, biased variance)
//
// The variance is a second pass over the held row (squared deviations from the mean). Template
// parameters as in rmsnorm_resident.cuh; the kernel parameters are layernorm_kernel's.
#pragma once

#include "common/reduce.cuh"
#include "common/resident_row.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
    layernorm_resident_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y,
                              long long y_stride, long long rows, long long cols, float eps) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER>;
    using Reducer = RowReducer<THREADS, 1, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    extern __shared__ __align__(16) unsigned char resident_slots[];
    Reducer reducer(reduce_shared);
    Row row(resident_slots, x, x_stride, rows, cols);
    const float inv_cols = 1.0f / static_cast<float>(cols);

    while (row.has_row()) {
        row.wait();
        float sum = 0.0f;  // vectors past the row are zeros
        row.for_each([&](const Vec<T, VEC>& raw, bool) {
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) sum += v[k];
        });
        const float mean = reducer.template reduce<SumOp>(sum) * inv_cols;
        float squares = 0.0f;
        row.for_each([&](const Vec<T, VEC>& raw, bool in_row) {
            if (!in_row) return;  // padding is not part of the row
            float v[VEC];
            unpack(raw, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) squares += (v[k] - mean) * (v[k] - mean);
        });
        const float scale = rsqrtf(reducer.template reduce<SumOp>(squares) * inv_cols + eps);
        TOut* y_row = y + row.row() * y_stride;
        row.emit_and_advance([&](long long col, const Vec<T, VEC>& raw) {
            float v[VEC], w[VEC], b[VEC];
            unpack(raw, v);
            load_vec<T, VEC>(weight + col, w);
            load_vec<T, VEC>(bias + col, b);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mean) * scale * w[k] + b[k];
            store_vec<TOut, VEC>(y_row + col, v);
        });
    }
    reducer.finish();
}

}  // namespace tileops
