// Where a CTA of the split row kernels (softmax_split.cuh, rmsnorm_split.cuh, layernorm_split.cuh)
// works: row blockIdx.x / SPLIT, and its share of the row's body in whole vectors. The row's
// edges (common/row_frame.cuh) belong to part 0. Every split kernel opens the same way:
//
//   auto reducer = split_reducer<THREADS>();
//   const SplitChunk<T, THREADS, VEC, SPLIT, RAGGED> at(x, x_stride, cols);
//   if (at.row >= rows) return;  // uniform over the CTA
#pragma once

#include "common/row_frame.cuh"
#include "rows/reduce.cuh"

namespace tileops {

// The CTA-wide reducer of a split kernel (one row a CTA, no cluster), on the kernel's own shared
// memory.
template <int THREADS>
__device__ __forceinline__ RowReducer<THREADS, 1, 1> split_reducer() {
    __shared__ typename RowReducer<THREADS, 1, 1>::Shared shared;
    return RowReducer<THREADS, 1, 1>(shared);
}

// Where CTA blockIdx.x works: its row, its chunk of the row's body and the row's edges.
template <typename T, int THREADS, int VEC, int SPLIT, bool RAGGED>
struct SplitChunk {
    RowFrame<T, VEC, RAGGED> frame;  // of the input x, whose rows the chunks cut
    long long row;
    int part;
    long long first, last;  // body columns [first, last), whole vectors
    int head;

    __device__ __forceinline__ SplitChunk(const T* x, long long x_stride, long long cols) : frame(x, x_stride, cols) {
        row = blockIdx.x / SPLIT;
        part = static_cast<int>(blockIdx.x % SPLIT);
        head = frame.head(row);
        const long long vectors = frame.body(row) / VEC;
        const long long per_part = (vectors + SPLIT - 1) / SPLIT;
        first = min(vectors, per_part * part) * VEC;
        last = min(vectors, per_part * (part + 1)) * VEC;
    }

    // Loads the row's edges from `bases` (row strides `strides`) into `edges` (a RowEdges); only
    // part 0 holds any.
    template <typename Edges>
    __device__ __forceinline__ void load_edges(Edges& edges, const T* const* bases, const long long* strides) const {
        edges.load(frame, row, true, threadIdx.x, part == 0, bases, strides);
    }
};

}  // namespace tileops
