// LayerNorm of few long rows, each split over SPLIT CTAs anywhere in the grid: what layernorm.cuh
// computes, for problems whose rows are too few to fill the GPU even in clusters.
//
// Two kernels, launched back to back on the stream with the same parameters:
//   layernorm_split_stats_kernel: CTA g of row r sums its chunk's d = x - shift and d^2 into
//     partials[r * SPLIT + g], shift being the row's first element (layernorm.cuh's streaming
//     mode: sums of deviations from a value of the row do not cancel as E[x^2] - E[x]^2 would);
//   layernorm_split_apply_kernel: the same CTA sums the row's SPLIT partials into its mean and
//     variance and writes its chunk's outputs, reading the chunk again (from L2).
// Chunks as in softmax_split.cuh (rows/split_chunk.cuh). Template parameters: THREADS a CTA, VEC
// elements an access.
#pragma once

#include "common/row_frame.cuh"
#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/row_outputs.cuh"
#include "rows/split_chunk.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int SPLIT, bool RAGGED>
__global__ void __launch_bounds__(THREADS)
    layernorm_split_stats_kernel(const T* x, long long x_stride, const T* /*weight*/, const T* /*bias*/,
                                 TOut* /*y*/, long long /*y_stride*/, long long rows, long long cols, float /*eps*/,
                                 float2* partials) {
    auto reducer = split_reducer<THREADS>();
    const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
    if (at.row >= rows) return;  // uniform over the CTA
    const T* x_row = x + at.row * x_stride;
    const float shift = to_float(x_row[0]);
    const T* x_body = x_row + at.head;
    float sum = 0.0f, squares = 0.0f;
    for (long long col = at.first + static_cast<long long>(threadIdx.x) * VEC; col < at.last; col += THREADS * VEC) {
        float v[VEC];
        load_vec<T, VEC>(x_body + col, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float d = v[k] - shift;
            sum += d;
            squares += d * d;
        }
    }
    RowEdges<T, VEC, THREADS, 1, RAGGED> edges;
    const T* const bases[1] = {x};
    const long long strides[1] = {x_stride};
    at.load_edges(edges, bases, strides);
    edges.for_each(cols, [&](int s, long long) {
        const float d = to_float(edges.value[0][s]) - shift;
        sum += d;
        squares += d * d;
    });
    const float chunk_sum = reducer.template reduce<SumOp>(sum);
    const float chunk_squares = reducer.template reduce<SumOp>(squares);
    if (threadIdx.x == 0) partials[blockIdx.x] = make_float2(chunk_sum, chunk_squares);
}

template <typename T, typename TOut, int THREADS, int VEC, int SPLIT, bool RAGGED>
__global__ void __launch_bounds__(THREADS)
    layernorm_split_apply_kernel(const T* x, long long x_stride, const T* weight, const T* bias, TOut* y,
                                 long long y_stride, long long rows, long long cols, float eps, float2* partials) {
    static_assert(SPLIT <= THREADS, "a thread reads each partial");
    auto reducer = split_reducer<THREADS>();
    const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
    if (at.row >= rows) return;
    const float2 partial = threadIdx.x < SPLIT ? partials[at.row * SPLIT + threadIdx.x] : make_float2(0.0f, 0.0f);
    const float inv_cols = 1.0f / static_cast<float>(cols);
    const float mean_shifted = reducer.template reduce<SumOp>(partial.x) * inv_cols;
    const float mean_squares = reducer.template reduce<SumOp>(partial.y) * inv_cols;
    const float var = fmaxf(mean_squares - mean_shifted * mean_shifted, 0.0f);
    const float scale = rsqrtf(var + eps);
    const T* x_row = x + at.row * x_stride;
    const float mean = to_float(x_row[0]) + mean_shifted;
    const T* x_body = x_row + at.head;
    TOut* y_row = y + at.row * y_stride;
    for (long long col = at.first + static_cast<long long>(threadIdx.x) * VEC; col < at.last; col += THREADS * VEC) {
        LayerNormSide<T, VEC> side;
        if constexpr (RAGGED) {
            const bool aligned = vector_aligned<T, VEC>(weight, at.head) && vector_aligned<T, VEC>(bias, at.head);
            side = {load_side<T, VEC>(weight + at.head + col, aligned), load_side<T, VEC>(bias + at.head + col, aligned)};
        } else {
            side = {load_raw<T, VEC>(weight + col), load_raw<T, VEC>(bias + col)};
        }
        store_layernorm<T, TOut, VEC, RAGGED>(y_row + at.head, side, col, load_raw<T, VEC>(x_body + col), mean, scale);
    }
    RowEdges<T, VEC, THREADS, 1, RAGGED> edges;
    const T* const bases[1] = {x};
    const long long strides[1] = {x_stride};
    at.load_edges(edges, bases, strides);
    edges.for_each(cols, [&](int s, long long col) {
        store_layernorm<T, TOut, 1>(y_row, weight, bias, col, edges.at(0, s), mean, scale);
    });
}

}  // namespace tileops
