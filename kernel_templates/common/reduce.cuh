// Reductions across the threads that share a row: within a warp (shuffles), across the warps of
// a row (a small shared-memory array) and across the CTAs of a cluster (distributed shared
// memory, sm_90+).
#pragma once

#include <cuda/std/limits>

namespace tileops {

struct SumOp {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};

struct MaxOp {
    static __device__ __forceinline__ float identity() { return -cuda::std::numeric_limits<float>::infinity(); }
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};

// Reduces over aligned groups of WIDTH lanes (a power of two <= 32); every lane gets the result.
template <typename Op, int WIDTH>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Shared scratch a row reduction needs: one float per warp of every row in the block.
template <int THREADS_PER_ROW, int ROWS_PER_BLOCK>
struct RowScratch {
    static constexpr int kWarpsPerRow = THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1;
    float partial[ROWS_PER_BLOCK * kWarpsPerRow];
    float cluster_partial;  // this CTA's share of a row split over a cluster
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// All threads of all CTAs of the cluster; orders shared-memory writes before the barrier with
// reads after it, across the cluster.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Reads `local`'s counterpart in the shared memory of CTA `rank` of this cluster.
__device__ __forceinline__ float load_from_cta(const float* local, unsigned rank) {
    unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    float value;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
    return value;
}
#endif

// Reduces `v` over the THREADS_PER_ROW threads of each row of the block and, when CLUSTER > 1,
// over the CLUSTER CTAs that share the row. Every thread of the block must call it (rows past
// the end included); every thread gets its row's result. Leaves `scratch` reusable.
template <typename Op, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int CLUSTER>
__device__ __forceinline__ float row_reduce(float v, RowScratch<THREADS_PER_ROW, ROWS_PER_BLOCK>& scratch) {
    constexpr int kWidth = THREADS_PER_ROW < 32 ? THREADS_PER_ROW : 32;
    v = warp_reduce<Op, kWidth>(v);
    if constexpr (THREADS_PER_ROW > 32) {
        constexpr int kWarps = THREADS_PER_ROW / 32;
        const int row_in_block = threadIdx.x / THREADS_PER_ROW;
        const int warp_in_row = (threadIdx.x % THREADS_PER_ROW) / 32;
        if ((threadIdx.x & 31) == 0) scratch.partial[row_in_block * kWarps + warp_in_row] = v;
        __syncthreads();
        v = Op::identity();
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v = Op::apply(v, scratch.partial[row_in_block * kWarps + w]);
        __syncthreads();
    }
    if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        static_assert(ROWS_PER_BLOCK == 1, "a row split over a cluster needs one row per block");
        if (threadIdx.x == 0) scratch.cluster_partial = v;
        cluster_sync();
        v = Op::identity();
#pragma unroll
        for (int rank = 0; rank < CLUSTER; ++rank) v = Op::apply(v, load_from_cta(&scratch.cluster_partial, rank));
        // No CTA may overwrite its partial (next reduction) or exit before every CTA has read it.
        cluster_sync();
#else
        __trap();  // clusters need sm_90; the host never launches this
#endif
    }
    return v;
}

}  // namespace tileops
