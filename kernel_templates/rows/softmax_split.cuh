// Softmax (or log-softmax when LOG) of few long rows, each split over SPLIT CTAs anywhere in the
// grid: what softmax.cuh computes, for problems whose rows are too few to fill the GPU even in
// clusters (one row of a million elements ran on one cluster at 10-20 GB/s).
//
// Two kernels, launched back to back on the stream with the same parameters:
//   softmax_split_stats_kernel: CTA g of row r reads its chunk of the row and writes the chunk's
//     (max, sum of exp(x - max)) to workspace[r * SPLIT + g];
//   softmax_split_apply_kernel: the same CTA merges the row's SPLIT partials and writes its chunk's
//     outputs, reading the chunk again (from L2: the rows this path takes fit in it).
// So the whole GPU streams the row, at the price of a second read and a second launch. Chunks are
// whole vectors of the row's body (common/row_frame.cuh, RAGGED for any length and alignment); the
// row's edges belong to chunk 0. Template parameters: THREADS a CTA, VEC elements an access.
#pragma once

#include "common/infinity.cuh"
#include "common/row_frame.cuh"
#include "common/types.cuh"
#include "common/whole_store.cuh"
#include "rows/reduce.cuh"
#include "rows/row_outputs.cuh"
#include "rows/split_chunk.cuh"

namespace tileops {

// The online (max, sum) of values, sum relative to max: softmax.cuh's streaming update, which
// stays spelled out there because folding it in changed those kernels' machine code.
struct OnlineSoftmax {
    float max = kNegativeInfinity, sum = 0.0f;
    __device__ __forceinline__ void add(float v) {
        constexpr float kLog2e = log2_e();
        if (v == kNegativeInfinity) return;  // contributes nothing; would make inf - inf
        if (v > max) {
            sum = sum * exp2f((max - v) * kLog2e) + 1.0f;
            max = v;
        } else {
            sum += exp2f((v - max) * kLog2e);
        }
    }
    // Merges with the block (or the partials) through `reducer`: every thread gets the row's.
    template <class Reducer>
    __device__ __forceinline__ void reduce(Reducer& reducer) {
        constexpr float kLog2e = log2_e();
        const float row_max = reducer.template reduce<MaxOp>(max);
        const float rescaled = max == kNegativeInfinity ? 0.0f : sum * exp2f((max - row_max) * kLog2e);
        sum = reducer.template reduce<SumOp>(rescaled);
        max = row_max;
    }
};

template <typename T, typename TOut, int THREADS, int VEC, int SPLIT, bool LOG, bool RAGGED>
__global__ void __launch_bounds__(THREADS)
    softmax_split_stats_kernel(const T* x, long long x_stride, TOut* /*y*/, long long /*y_stride*/, long long rows,
                               long long cols, float2* partials) {
    auto reducer = split_reducer<THREADS>();
    const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
    if (at.row >= rows) return;  // uniform over the CTA
    const T* x_body = x + at.row * x_stride + at.head;
    OnlineSoftmax stats;
    for (long long col = at.first + static_cast<long long>(threadIdx.x) * VEC; col < at.last; col += THREADS * VEC) {
        float v[VEC];
        load_vec<T, VEC>(x_body + col, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) stats.add(v[k]);
    }
    RowEdges<T, VEC, THREADS, 1, RAGGED> edges;
    const T* const bases[1] = {x};
    const long long strides[1] = {x_stride};
    at.load_edges(edges, bases, strides);
    edges.for_each(cols, [&](int s, long long) { stats.add(to_float(edges.value[0][s])); });
    stats.reduce(reducer);
    if (threadIdx.x == 0) partials[blockIdx.x] = make_float2(stats.max, stats.sum);
}

template <typename T, typename TOut, int THREADS, int VEC, int SPLIT, bool LOG, bool RAGGED>
__global__ void __launch_bounds__(THREADS)
    softmax_split_apply_kernel(const T* x, long long x_stride, TOut* y, long long y_stride, long long rows,
                               long long cols, float2* partials) {
    static_assert(SPLIT <= THREADS, "a thread merges each partial");
    constexpr float kLog2e = log2_e();
    auto reducer = split_reducer<THREADS>();
    const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
    if (at.row >= rows) return;
    OnlineSoftmax stats;
    if (threadIdx.x < SPLIT) {
        const float2 partial = partials[at.row * SPLIT + threadIdx.x];
        stats.max = partial.x;
        stats.sum = partial.y;
    }
    stats.reduce(reducer);
    const float max_scaled = stats.max * kLog2e;
    const float log2_sum = __log2f(stats.sum);
    TOut* y_row = y + at.row * y_stride;
    const T* x_body = x + at.row * x_stride + at.head;
    TOut* y_body = y_row + at.head;
    for (long long col = at.first + static_cast<long long>(threadIdx.x) * VEC; col < at.last; col += THREADS * VEC)
        store_softmax<LOG, T, TOut, VEC, true>(y_body, col, load_raw<T, VEC>(x_body + col), max_scaled, log2_sum);
    RowEdges<T, VEC, THREADS, 1, RAGGED> edges;
    const T* const bases[1] = {x};
    const long long strides[1] = {x_stride};
    at.load_edges(edges, bases, strides);
    edges.for_each(cols, [&](int s, long long col) {
        store_softmax<LOG, T, TOut, 1>(y_row, col, edges.at(0, s), max_scaled, log2_sum);
    });
}

}  // namespace tileops
