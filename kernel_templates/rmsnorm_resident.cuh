// RMSNorm for long rows held on chip (common/resident_row.cuh): what rmsnorm.cuh computes, for
// rows too long for a cluster's registers alone, with or without the residual add.
//
//   h = x (+ residual, rounded to T and written to sum_out)
//   y = h * rsqrt(mean(h^2) + eps) * weight    (fp32 arithmetic)
//
// With RESIDUAL the CTA holds x as it lands and replaces each vector with h: the residual's
// vectors are loaded one ahead (common/resident_row.cuh, update_as_it_lands), from L2 where the
// previous row's outputs prefetched them, so only x travels through the slots and a row of h takes
// no more room than a row of x.
//
// Template parameters: T input/weight type, TOut output type, THREADS per CTA (one row per CTA),
// VEC elements per access, ITEMS vectors a thread holds in registers, SLOTS vectors a thread
// holds in shared memory, CLUSTER CTAs per row (sm_90), RESIDUAL. The parameters are
// rmsnorm_kernel's, so both launch alike.
#pragma once

#include "common/reduce.cuh"
#include "common/resident_row.cuh"
#include "common/row_outputs.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool RESIDUAL>
__global__ void __launch_bounds__(THREADS, 1)
    rmsnorm_resident_kernel(const T* x, long long x_stride, const T* residual, long long residual_stride,
                            const T* weight, TOut* y, long long y_stride, T* sum_out, long long sum_stride,
                            long long rows, long long cols, float eps) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER>;
    using Reducer = RowReducer<THREADS, 1, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    extern __shared__ __align__(16) unsigned char resident_slots[];
    Reducer reducer(reduce_shared);
    Row row(resident_slots, x, x_stride, rows, cols);
    auto add_squares = [](const Vec<T, VEC>& h, float& sum) {
        float v[VEC];
        unpack(h, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += v[k] * v[k];
    };

    while (row.has_row()) {
        float sum_sq = 0.0f;  // vectors past the row are zeros
        if constexpr (RESIDUAL) {
            const T* r_row = residual + row.row() * residual_stride;
            T* s_row = sum_out + row.row() * sum_stride;
            row.update_as_it_lands([&](long long col) { return load_raw<T, VEC>(r_row + col); },
                                   [&](Vec<T, VEC>& h, long long col, const Vec<T, VEC>& r) {
                                       float a[VEC], b[VEC];
                                       unpack(h, a);
                                       unpack(r, b);
#pragma unroll
                                       for (int k = 0; k < VEC; ++k) a[k] += b[k];
                                       h = pack<T, VEC>(a);
                                       store_raw<T, VEC>(s_row + col, h);
                                       add_squares(h, sum_sq);
                                   });
        } else {
            row.for_each_as_it_lands([&](const Vec<T, VEC>& raw, bool) { add_squares(raw, sum_sq); });
        }
        const float scale = rsqrtf(reducer.template reduce<SumOp>(sum_sq) / static_cast<float>(cols) + eps);
        TOut* y_row = y + row.row() * y_stride;
        // The next row's residual is prefetched into L2 as this row's outputs go out (one line per
        // eight vectors or fewer: by the threads whose vector starts a 128-byte line).
        const long long next = row.next_row();
        const T* r_next = RESIDUAL && next < rows ? residual + next * residual_stride : nullptr;
        constexpr int kVectorsPerLine = 128 / static_cast<int>(sizeof(Vec<T, VEC>)) > 0
                                            ? 128 / static_cast<int>(sizeof(Vec<T, VEC>))
                                            : 1;
        const bool prefetcher = threadIdx.x % kVectorsPerLine == 0;
        row.emit_and_advance([&](long long col) { return load_raw<T, VEC>(weight + col); },
                             [&](long long col, const Vec<T, VEC>& raw, const Vec<T, VEC>& w) {
                                 if (RESIDUAL && r_next != nullptr && prefetcher)
                                     asm volatile("prefetch.global.L2 [%0];\n" ::"l"(r_next + col));
                                 store_rmsnorm<T, TOut, VEC>(y_row, w, col, raw, scale);
                             });
    }
    reducer.finish();
}

}  // namespace tileops
