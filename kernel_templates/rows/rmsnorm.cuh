// RMSNorm over the last dimension, optionally fused with the residual add.
//
//   h = x (+ residual)                         (rounded to T, as an unfused add would store it)
//   y = h * rsqrt(mean(h^2) + eps) * weight    (fp32 arithmetic)
//   sum_out = h                                (only with RESIDUAL; may alias x or residual)
//
// Template parameters (see rows/row_layout.cuh): T input/weight/sum type, TOut output type,
// THREADS_PER_ROW, ROWS_PER_BLOCK, VEC elements per access, ITEMS vectors held per thread
// (0: streaming, any row length, reads the row twice), CLUSTER CTAs per row (sm_90), PREFETCH
// (register mode: a persistent grid whose blocks copy their next rows while they work on the
// current ones, see RowPrefetch in rows/row_layout.cuh). rmsnorm_ragged_kernel takes rows of any
// length and alignment (common/row_frame.cuh).
#pragma once

#include "common/types.cuh"
#include "rows/reduce.cuh"
#include "rows/row_layout.cuh"
#include "rows/row_outputs.cuh"

namespace tileops {

// h = x (+ residual) at edge slot s of a ragged row, rounded to T.
template <typename T, bool RESIDUAL, class Edges>
__device__ __forceinline__ T rmsnorm_edge(const Edges& edges, int s) {
    float h = to_float(edges.value[0][s]);
    if constexpr (RESIDUAL) h += to_float(edges.value[1][s]);
    return from_float<T>(h);
}

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool RESIDUAL, bool PREFETCH, bool RAGGED>
__device__ __forceinline__ void rmsnorm_rows(const T* x, long long x_stride, const T* residual,
                                             long long residual_stride, const T* weight, TOut* y, long long y_stride,
                                             T* sum_out, long long sum_stride, long long rows, long long cols,
                                             float eps) {
    using Layout = RowLayout<THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER>;
    using Reducer = RowReducer<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    constexpr int kInputs = RESIDUAL ? 2 : 1;
    __shared__ typename Reducer::Shared reduce_shared;
    Reducer reducer(reduce_shared);
    const RowFrame<T, VEC, RAGGED> frame(x, x_stride, cols);
    const T* const bases[2] = {x, residual};
    const long long strides[2] = {x_stride, residual_stride};

    // h = x (+ residual), rounded to T.
    auto combine = [](const Vec<T, VEC>& x_vec, const Vec<T, VEC>& r_vec) {
        float a[VEC], b[VEC];
        unpack(x_vec, a);
        unpack(r_vec, b);
#pragma unroll
        for (int k = 0; k < VEC; ++k) a[k] += b[k];
        return pack<T, VEC>(a);
    };
    auto add_squares = [](const Vec<T, VEC>& h, float& sum) {
        float v[VEC];
        unpack(h, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += v[k] * v[k];
    };
    // The weights of a row's body vector at col, for a row whose body starts at head.
    auto load_weights = [&](int head, long long col) {
        if constexpr (RAGGED)
            return load_side<T, VEC>(weight + head + col, vector_aligned<T, VEC>(weight, head));
        else
            return load_raw<T, VEC>(weight + col);
    };
    auto store_sum = [](T* at, const Vec<T, VEC>& h) {
        if constexpr (RAGGED)
            store_whole<T, VEC>(at, h);
        else
            store_raw<T, VEC>(at, h);
    };
    // A ragged row's edges: their squares added to sum_sq (and their h stored); their outputs.
    auto add_edges = [&](const auto& edges, long long row, float& sum_sq) {
        for (int s = 0; s < edges.kPerLane; ++s) {
            if (!edges.present(s)) continue;
            const T h = rmsnorm_edge<T, RESIDUAL>(edges, s);
            sum_sq += to_float(h) * to_float(h);
            if constexpr (RESIDUAL) sum_out[row * sum_stride + edges.column(s, cols)] = h;
        }
    };
    auto store_edges = [&](const auto& edges, TOut* y_row, float scale) {
        for (int s = 0; s < edges.kPerLane; ++s)
            if (edges.present(s))
                store_rmsnorm<T, TOut, 1>(y_row, weight, edges.column(s, cols), Vec<T, 1>{{rmsnorm_edge<T, RESIDUAL>(edges, s)}},
                                          scale);
    };

    if constexpr (ITEMS > 0) {
        for_each_row_group<Layout, T, VEC, ITEMS, kInputs, PREFETCH>(
            rows, frame, bases, strides,
            // The input count is spelled out: kInputs in a generic lambda's parameter crashes the
            // CUDA 13 front end (NVRTC and nvcc alike).
            [&](const Layout& at, const Vec<T, VEC> (&held)[RESIDUAL ? 2 : 1][ITEMS], const auto& edges) {
                const bool active = at.row < rows;
                const int head = frame.head(at.row);
                const long long body = frame.body(at.row);
                Vec<T, VEC> h[ITEMS], w[ITEMS] = {};
                float sum_sq = 0.0f;
                add_edges(edges, at.row, sum_sq);
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    h[i] = RESIDUAL ? combine(held[0][i], held[kInputs - 1][i]) : held[0][i];
                    add_squares(h[i], sum_sq);
                    const long long col = at.column(i);
                    // The weights are loaded before the reduction, so that their round trip
                    // overlaps it: on one row or a few (a launch-bound problem) they were a second
                    // memory latency after the row's.
                    if (active && col < body) w[i] = load_weights(head, col);
                    if constexpr (RESIDUAL)
                        if (active && col < body) store_sum(sum_out + at.row * sum_stride + head + col, h[i]);
                }
                const float scale =
                    rsqrtf(reducer.template reduce<SumOp>(sum_sq) /
                               static_cast<float>(cols) + eps);
                store_edges(edges, y + at.row * y_stride, scale);
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) {
                    const long long col = at.column(i);
                    if (active && col < body)
                        store_rmsnorm<T, TOut, VEC, RAGGED>(y + at.row * y_stride + head, w[i], col, h[i], scale);
                }
            });
    } else {
        // Streaming: pass 1 sums squares (and writes h), pass 2 re-reads h and writes y.
        const Layout at;
        const bool active = at.row < rows;
        const int head = frame.head(at.row);
        const long long body = frame.body(at.row);
        const T* x_row = x + at.row * x_stride + head;
        const T* r_row = RESIDUAL ? residual + at.row * residual_stride + head : nullptr;
        T* s_row = RESIDUAL ? sum_out + at.row * sum_stride + head : nullptr;
        RowEdges<T, VEC, THREADS_PER_ROW, kInputs, RAGGED> edges;
        edges.load(frame, at.row, active, at.lane, true, bases, strides);
        auto load_h = [&](long long col) {
            const Vec<T, VEC> x_vec = load_raw<T, VEC>(x_row + col);
            return RESIDUAL ? combine(x_vec, load_raw<T, VEC>(r_row + col)) : x_vec;
        };
        float sum_sq = 0.0f;
        add_edges(edges, at.row, sum_sq);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < body; col += THREADS_PER_ROW * VEC) {
                Vec<T, VEC> h = load_h(col);
                add_squares(h, sum_sq);
                if constexpr (RESIDUAL) store_sum(s_row + col, h);
            }
        }
        const float scale = rsqrtf(reducer.template reduce<SumOp>(sum_sq) /
                                       static_cast<float>(cols) + eps);
        store_edges(edges, y + at.row * y_stride, scale);
        if (active) {
            for (long long col = static_cast<long long>(at.lane) * VEC; col < body; col += THREADS_PER_ROW * VEC) {
                // The same thread wrote h to sum_out in pass 1, so reading it back is ordered.
                store_rmsnorm<T, TOut, VEC, RAGGED>(y + at.row * y_stride + head, load_weights(head, col), col,
                                                    load_raw<T, VEC>(RESIDUAL ? s_row + col : x_row + col), scale);
            }
        }
    }
    reducer.finish();
}

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool RESIDUAL, bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    rmsnorm_kernel(const T* x, long long x_stride, const T* residual, long long residual_stride, const T* weight,
                   TOut* y, long long y_stride, T* sum_out, long long sum_stride, long long rows, long long cols,
                   float eps) {
    rmsnorm_rows<T, TOut, THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER, RESIDUAL, PREFETCH, false>(
        x, x_stride, residual, residual_stride, weight, y, y_stride, sum_out, sum_stride, rows, cols, eps);
}

template <typename T, typename TOut, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER,
          bool RESIDUAL, bool PREFETCH>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK)
    rmsnorm_ragged_kernel(const T* x, long long x_stride, const T* residual, long long residual_stride,
                          const T* weight, TOut* y, long long y_stride, T* sum_out, long long sum_stride,
                          long long rows, long long cols, float eps) {
    rmsnorm_rows<T, TOut, THREADS_PER_ROW, ROWS_PER_BLOCK, VEC, ITEMS, CLUSTER, RESIDUAL, PREFETCH, true>(
        x, x_stride, residual, residual_stride, weight, y, y_stride, sum_out, sum_stride, rows, cols, eps);
}

}  // namespace tileops
