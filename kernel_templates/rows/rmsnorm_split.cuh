// RMSNorm (and with the residual add) of few long rows, each split over SPLIT CTAs anywhere in the
// grid: what rmsnorm.cuh computes, for problems whose rows are too few to fill the GPU even in
// clusters (one row of a million elements would run on one cluster of 16 CTAs).
//
// Two kernels, launched back to back on the stream with the same parameters:
//   rmsnorm_split_stats_kernel: CTA g of row r forms its chunk's h = x (+ residual), stores it to
//     sum_out (with RESIDUAL) and writes the chunk's sum of h^2 to partials[r * SPLIT + g].x;
//   rmsnorm_split_apply_kernel: the same CTA sums the row's SPLIT partials and writes its chunk's
//     outputs from h read again (from L2): sum_out with RESIDUAL, since sum_out may alias x or the
//     residual and has replaced them by then; x otherwise.
// Chunks as in softmax_split.cuh (rows/split_chunk.cuh). Template parameters: THREADS a CTA, VEC
// elements an access.
#pragma once

#include "common/row_frame.cuh"
#include "common/types.cuh"
#include "common/whole_store.cuh"
#include "rows/reduce.cuh"
#include "rows/rmsnorm.cuh"
#include "rows/row_outputs.cuh"
#include "rows/split_chunk.cuh"

namespace tileops {

template <typename T, typename TOut, int THREADS, int VEC, int SPLIT, bool RESIDUAL, bool RAGGED>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_split_stats_kernel(const T* x, long long x_stride, const T* residual, long long residual_stride,
                               const T* /*weight*/, TOut* /*y*/, long long /*y_stride*/, T* sum_out,
                               long long sum_stride, long long rows, long long cols, float /*eps*/,
                               float2* partials) {
    constexpr int kInputs = RESIDUAL ? 2 : 1;
    auto reducer = split_reducer<THREADS>();
    const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
    if (at.row >= rows) return;  // uniform over the CTA
    const T* x_body = x + at.row * x_stride + at.head;
    const T* r_body = RESIDUAL ? residual + at.row * residual_stride + at.head : nullptr;
    T* s_body = RESIDUAL ? sum_out + at.row * sum_stride + at.head : nullptr;
    float sum_sq = 0.0f;
    for (long long col = at.first + static_cast<long long>(threadIdx.x) * VEC; col < at.last; col += THREADS * VEC) {
        float h[VEC];
        load_vec<T, VEC>(x_body + col, h);
        if constexpr (RESIDUAL) {
            float r[VEC];
            load_vec<T, VEC>(r_body + col, r);
#pragma unroll
            for (int k = 0; k < VEC; ++k) h[k] = to_float(from_float<T>(h[k] + r[k]));  // as an unfused add stores it
            const Vec<T, VEC> packed = pack<T, VEC>(h);
            if constexpr (RAGGED)
                store_whole<T, VEC>(s_body + col, packed);
            else
                store_raw<T, VEC>(s_body + col, packed);
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum_sq += h[k] * h[k];
    }
    RowEdges<T, VEC, THREADS, kInputs, RAGGED> edges;
    const T* const bases[2] = {x, residual};
    const long long strides[2] = {x_stride, residual_stride};
    at.load_edges(edges, bases, strides);
    for (int s = 0; s < edges.kPerLane; ++s) {
        if (!edges.present(s)) continue;
        const T h = rmsnorm_edge<T, RESIDUAL>(edges, s);
        sum_sq += to_float(h) * to_float(h);
        if constexpr (RESIDUAL) sum_out[at.row * sum_stride + edges.column(s, cols)] = h;
    }
    const float total = reducer.template reduce<SumOp>(sum_sq);
    if (threadIdx.x == 0) partials[blockIdx.x] = make_float2(total, 0.0f);
}

template <typename T, typename TOut, int THREADS, int VEC, int SPLIT, bool RESIDUAL, bool RAGGED>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_split_apply_kernel(const T* x, long long x_stride, const T* /*residual*/, long long /*residual_stride*/,
                               const T* weight, TOut* y, long long y_stride, T* sum_out, long long sum_stride,
                               long long rows, long long cols, float eps, float2* partials) {
    static_assert(SPLIT <= THREADS, "a thread reads each partial");
    auto reducer = split_reducer<THREADS>();
    const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
    if (at.row >= rows) return;
    const float partial = threadIdx.x < SPLIT ? partials[at.row * SPLIT + threadIdx.x].x : 0.0f;
    const float scale = rsqrtf(reducer.template reduce<SumOp>(partial) / static_cast<float>(cols) + eps);
    // h: what the stats kernel stored (with RESIDUAL), else x.
    const T* h_base = RESIDUAL ? sum_out : x;
    const long long h_stride = RESIDUAL ? sum_stride : x_stride;
    const T* h_body = h_base + at.row * h_stride + at.head;
    TOut* y_row = y + at.row * y_stride;
    for (long long col = at.first + static_cast<long long>(threadIdx.x) * VEC; col < at.last; col += THREADS * VEC) {
        Vec<T, VEC> w;
        if constexpr (RAGGED)
            w = load_side<T, VEC>(weight + at.head + col, vector_aligned<T, VEC>(weight, at.head));
        else
            w = load_raw<T, VEC>(weight + col);
        store_rmsnorm<T, TOut, VEC, RAGGED>(y_row + at.head, w, col, load_raw<T, VEC>(h_body + col), scale);
    }
    RowEdges<T, VEC, THREADS, 1, RAGGED> edges;
    const T* const bases[1] = {h_base};
    const long long strides[1] = {h_stride};
    at.load_edges(edges, bases, strides);
    edges.for_each(cols, [&](int s, long long col) {
        store_rmsnorm<T, TOut, 1>(y_row, weight, col, edges.at(0, s), scale);
    });
}

}  // namespace tileops
