// LayerNorm for long rows held on chip (rows/resident_row.cuh): what layernorm.cuh computes in
// register mode, for rows too long for a cluster's registers alone.
//
//   y = (x - mean) * rsqrt(var + eps) * weight + bias      (fp32 arithmetic, biased variance)
//
// The statistics are gathered in one pass as the row lands: each thread's count, mean and squared
// deviations (about its own first element), merged over the row pairwise (Chan et al.), which is
// as exact as a second pass over the row and needs none. Template parameters as in
// rmsnorm_resident.cuh; the kernel parameters are layernorm_kernel's.
#pragma once

#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/resident_row.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool RAGGED>
__device__ __forceinline__ void layernorm_resident_rows(const T* x, long long x_stride, const T* weight,
                                                        const T* bias, TOut* y, long long y_stride, long long rows,
                                                        long long cols, float eps) {
    using Row = ResidentRow<T, THREADS, VEC, ITEMS, SLOTS, CLUSTER, RAGGED>;
    using Reducer = RowReducer<THREADS, 1, CLUSTER>;
    __shared__ typename Reducer::Shared reduce_shared;
    extern __shared__ __align__(16) unsigned char resident_slots[];
    Reducer reducer(reduce_shared);
    Row row(resident_slots, x, x_stride, rows, cols);
    const float inv_cols = 1.0f / static_cast<float>(cols);

    while (row.has_row()) {
        // One pass as the row lands: the thread's count, and its sum and squares of deviations
        // from a shift (its first element), so its own variance does not cancel.
        float count = 0.0f, shift = 0.0f, sum = 0.0f, squares = 0.0f;
        auto add = [&](const auto& raw) {
            constexpr int kCount = sizeof(raw.v) / sizeof(raw.v[0]);
            float v[kCount];
            unpack(raw, v);
            if (count == 0.0f) shift = v[0];
#pragma unroll
            for (int k = 0; k < kCount; ++k) {
                const float d = v[k] - shift;
                sum += d;
                squares += d * d;
            }
            count += kCount;
        };
        row.for_each_as_it_lands([&](const Vec<T, VEC>& raw, bool in_row) {
            if (in_row) add(raw);  // padding is not part of the row
        });
        const auto& edges = row.edges();  // loaded with the row, used once it has landed
        edges.for_each(cols, [&](int s, long long) { add(edges.at(0, s)); });
        // Chan et al.: the row's mean from the threads' sums, then its squared deviations as
        // each thread's own plus count x (thread mean - row mean)^2.
        const float thread_mean = count > 0.0f ? shift + sum / count : 0.0f;
        const float thread_m2 = count > 0.0f ? fmaxf(squares - sum * sum / count, 0.0f) : 0.0f;
        const float mean = reducer.template reduce<SumOp>(count * thread_mean) * inv_cols;
        const float spread = thread_mean - mean;
        const float m2 = reducer.template reduce<SumOp>(thread_m2 + count * spread * spread);
        const float scale = rsqrtf(m2 * inv_cols + eps);
        TOut* y_row = y + row.row() * y_stride;
        edges.for_each(cols, [&](int s, long long col) {
            store_layernorm<T, TOut, 1>(y_row, weight, bias, col, edges.at(0, s), mean, scale);
        });
        // The body's columns count from its head; a ragged row's weights and biases may be off a vector.
        const int head = row.head();
        const T* w_body = weight + head;
        const T* b_body = bias + head;
        const bool aligned = !RAGGED || (vector_aligned<T, VEC>(weight, head) && vector_aligned<T, VEC>(bias, head));
        TOut* y_body = y_row + head;
        // Ragged 16-bit rows at 1024 threads never load ahead: their weights, read element by
        // element where the row's head puts them off a vector, spilled 76-88 bytes that way.
        constexpr bool kSideAhead =
            (sizeof(T) == 4 || ITEMS == 0 || THREADS <= 512) && !(RAGGED && sizeof(T) < 4 && THREADS > 512);
        if constexpr (kSideAhead) {
            // Each vector's weights and biases are loaded one vector ahead (fp32 1024 x 65536 5%
            // faster, bf16 with no register vectors 4%). Not for 16-bit types held partly in
            // registers by 1024 threads: their unpacked vectors leave no registers for it (bf16
            // 256 x 262144 ran 15-25% slower; docs/perf/rows.md).
            row.emit_and_advance(
                [&](long long col) {
                    return LayerNormSide<T, VEC>{load_side<T, VEC>(w_body + col, aligned),
                                                 load_side<T, VEC>(b_body + col, aligned)};
                },
                [&](long long col, const Vec<T, VEC>& raw, const LayerNormSide<T, VEC>& side) {
                    store_layernorm<T, TOut, VEC, RAGGED>(y_body, side, col, raw, mean, scale);
                });
        } else {
            row.emit_and_advance([](long long) { return 0; },
                                 [&](long long col, const Vec<T, VEC>& raw, int) {
                                     if constexpr (!RAGGED) {
                                         store_layernorm<T, TOut, VEC>(y_body, w_body, b_body, col, raw, mean, scale);
                                     } else {
                                         const LayerNormSide<T, VEC> side{load_side<T, VEC>(w_body + col, aligned),
                                                                          load_side<T, VEC>(b_body + col, aligned)};
                                         store_layernorm<T, TOut, VEC, true>(y_body, side, col, raw, mean, scale);
                                     }
                                 });
        }
    }
    reducer.finish();
}

template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
    layernorm_resident_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y,
                              long long y_stride, long long rows, long long cols, float eps) {
    layernorm_resident_rows<T, TOut, THREADS, VEC, ITEMS, SLOTS, CLUSTER, false>(x, x_stride, weight, bias, y,
                                                                               y_stride, rows, cols, eps);
}

// Rows of any length and alignment at full vector width (common/row_frame.cuh).
template <typename T, typename TOut, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
    layernorm_resident_ragged_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y,
                                     long long y_stride, long long rows, long long cols, float eps) {
    layernorm_resident_rows<T, TOut, THREADS, VEC, ITEMS, SLOTS, CLUSTER, true>(x, x_stride, weight, bias, y,
                                                                              y_stride, rows, cols, eps);
}

}  // namespace tileops
