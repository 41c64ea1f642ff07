// Where a CTA of the split row kernels (softmax_split.cuh, rmsnorm_split.cuh, layernorm_split.cuh)
// works: row blockIdx.x / SPLIT, and its share of the row's body in whole vectors. The row's
// edges (common/row_frame.cuh) belong to part 0.
#pragma once

#include "common/row_frame.cuh"

namespace tileops {

// Where CTA blockIdx.x works: its row, its chunk of the row's body and the row's edges.
template <typename T, int THREADS, int VEC, int SPLIT, bool RAGGED>
struct SplitChunk {
    long long row;
    int part;
    long long first, last;  // body columns [first, last), whole vectors
    int head;

    __device__ __forceinline__ SplitChunk(const RowFrame<T, VEC, RAGGED>& frame) {
        row = blockIdx.x / SPLIT;
        part = static_cast<int>(blockIdx.x % SPLIT);
        head = frame.head(row);
        const long long vectors = frame.body(row) / VEC;
        const long long per_part = (vectors + SPLIT - 1) / SPLIT;
        first = min(vectors, per_part * part) * VEC;
        last = min(vectors, per_part * (part + 1)) * VEC;
    }
};

}  // namespace tileops
