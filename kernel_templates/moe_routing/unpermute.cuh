// MoE unpermute: out[t] (+)= sum_j weights[t, j] * y[row_map[t, j]], in fp32, rounded once.
//
// A team of THREADS_PER_ROW threads a token (ROWS_PER_BLOCK tokens a block): the token's k rows
// and weights go to shared memory (a row outside [0, y_rows) as -1: skipped), then each thread
// accumulates ITEMS vectors of VEC elements over the k rows (two rows' loads in flight before
// they are added, in j order) and stores them. Each y row is read by the one entry mapping to it.
#pragma once

#include "common/types.cuh"
#include "moe_routing/moe_routing_args.cuh"

namespace tileops {

template <typename T, int VEC, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int ITEMS, bool ACCUMULATE>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK, 1) moe_unpermute_kernel(MoeUnpermuteArgs args) {
    static_assert((THREADS_PER_ROW * ROWS_PER_BLOCK) % 32 == 0, "whole warps");
    constexpr int kStep = THREADS_PER_ROW * VEC;  // elements between a thread's vectors
    constexpr long long kChunk = static_cast<long long>(kStep) * ITEMS;
    __shared__ long long rows[ROWS_PER_BLOCK][kMoeMaxTopK];
    __shared__ float weights[ROWS_PER_BLOCK][kMoeMaxTopK];

    const int lane = static_cast<int>(threadIdx.x) % THREADS_PER_ROW;
    const int slot = static_cast<int>(threadIdx.x) / THREADS_PER_ROW;
    const long long token = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + slot;
    const bool live = token < args.tokens;
    const int k = args.k;
    if (live)
        for (int j = lane; j < k; j += THREADS_PER_ROW) {
            const long long i = token * k + j;
            const int row = args.row_map[i];
            rows[slot][j] = row >= 0 && row < args.y_rows ? row : -1;
            weights[slot][j] = args.weights[i];
        }
    __syncthreads();
    if (!live) return;

    const T* __restrict__ y = static_cast<const T*>(args.y) + lane * VEC;
    T* __restrict__ out = static_cast<T*>(args.out) + token * args.out_stride + lane * VEC;
    const long long left = args.hidden - static_cast<long long>(lane) * VEC;
    for (long long base = 0; base < args.hidden; base += kChunk) {
        float acc[ITEMS][VEC];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[i][v] = 0.0f;
            if (ACCUMULATE && base + i * kStep < left) load_vec<T, VEC>(out + base + i * kStep, acc[i]);
        }
        // Two rows at a time: both rows' loads in flight before either is added (in j order).
        for (int j = 0; j < k; j += 2) {
            const long long row0 = rows[slot][j];
            const long long row1 = j + 1 < k ? rows[slot][j + 1] : -1;
            const T* const from0 = y + (row0 >= 0 ? row0 : 0) * args.y_stride + base;
            const T* const from1 = y + (row1 >= 0 ? row1 : 0) * args.y_stride + base;
            Vec<T, VEC> raw0[ITEMS], raw1[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) {
                    if (row0 >= 0) raw0[i] = load_raw<T, VEC>(from0 + i * kStep);
                    if (row1 >= 0) raw1[i] = load_raw<T, VEC>(from1 + i * kStep);
                }
            const float w0 = weights[slot][j];
            const float w1 = j + 1 < k ? weights[slot][j + 1] : 0.0f;
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) {
                    float f[VEC];
                    if (row0 >= 0) {
                        unpack(raw0[i], f);
#pragma unroll
                        for (int v = 0; v < VEC; ++v) acc[i][v] = fmaf(w0, f[v], acc[i][v]);
                    }
                    if (row1 >= 0) {
                        unpack(raw1[i], f);
#pragma unroll
                        for (int v = 0; v < VEC; ++v) acc[i][v] = fmaf(w1, f[v], acc[i][v]);
                    }
                }
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * kStep < left) store_vec<T, VEC>(out + base + i * kStep, acc[i]);
    }
}

}  // namespace tileops
