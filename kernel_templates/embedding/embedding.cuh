// Token embedding: each block copies VEC * THREADS columns of some tokens' table rows (plus their
// position rows) into the output, in fp32. Rows are gathered at random, so a block streams whole
// 16-byte vectors of one row at a time; grid.x walks the columns, grid.y the tokens (in steps of
// gridDim.y, which the host caps at 65535).
//
// Ids and positions are the caller's device data, which the host cannot check: one outside its
// table is never dereferenced and contributes zeros.
#pragma once

#include "common/types.cuh"

namespace tileops {

template <typename T, typename TOut, int VEC, int THREADS, bool POSITIONS>
__global__ void __launch_bounds__(THREADS)
    embedding_kernel(const int* __restrict__ ids, const T* __restrict__ table, long long vocab,
                     const int* __restrict__ positions, const T* __restrict__ position_table, long long max_positions,
                     long long table_stride, TOut* __restrict__ out, long long out_stride, long long tokens,
                     long long hidden) {
    const long long col = (static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x) * VEC;
    if (col >= hidden) return;  // hidden is a multiple of VEC (the host picks VEC so)
    for (long long t = blockIdx.y; t < tokens; t += gridDim.y) {
        float acc[VEC];
        const long long id = ids[t];
        if (id >= 0 && id < vocab) {
            load_vec<T, VEC>(table + id * table_stride + col, acc);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
        }
        if constexpr (POSITIONS) {
            const long long pos = positions[t];
            if (pos >= 0 && pos < max_positions) {
                float p[VEC];
                load_vec<T, VEC>(position_table + pos * table_stride + col, p);
#pragma unroll
                for (int i = 0; i < VEC; ++i) acc[i] += p[i];
            }
        }
        store_vec<TOut, VEC>(out + t * out_stride + col, acc);
    }
}

}  // namespace tileops
