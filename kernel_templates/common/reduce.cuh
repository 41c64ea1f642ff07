// Reductions across the threads that share a row: within a warp (shuffles), across the warps of
// a row (a small shared-memory array) and across the CTAs of a cluster (distributed shared
// memory, sm_90+), of row statistics of one or more floats reduced together: rmsnorm's sum of
// squares, layernorm's (count, mean, squared deviations), softmax's (max, sum of exponentials).
// Fields reduced together share the barriers, which bound the clustered long-row kernels (two
// cluster barriers per exchange).
//
// A stats type has kFields floats in `f`, an identity() and a combine(a, b) that is associative
// (up to rounding) and commutative.
#pragma once

#include <cuda/std/limits>

namespace tileops {

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

// A plain sum (rmsnorm's sum of squares).
struct SumStats {
    static constexpr int kFields = 1;
    float f[kFields];
    __device__ __forceinline__ float sum() const { return f[0]; }

    static __device__ __forceinline__ SumStats identity() { return {{0.0f}}; }
    static __device__ __forceinline__ SumStats combine(const SumStats& a, const SumStats& b) {
        return {{a.sum() + b.sum()}};
    }
};

// Count, mean and sum of squared deviations from the mean of a set of values (Chan et al.'s
// parallel form of Welford's update): exact where E[x^2] - E[x]^2 would cancel.
struct MeanVarStats {
    static constexpr int kFields = 3;
    float f[kFields];  // count, mean, m2
    __device__ __forceinline__ float count() const { return f[0]; }
    __device__ __forceinline__ float mean() const { return f[1]; }
    __device__ __forceinline__ float m2() const { return f[2]; }

    static __device__ __forceinline__ MeanVarStats identity() { return {{0.0f, 0.0f, 0.0f}}; }
    static __device__ __forceinline__ MeanVarStats combine(const MeanVarStats& a, const MeanVarStats& b) {
        const float n = a.count() + b.count();
        if (n == 0.0f) return a;
        const float share = b.count() / n;
        const float delta = b.mean() - a.mean();
        return {{n, a.mean() + delta * share, a.m2() + b.m2() + delta * delta * a.count() * share}};
    }
};

// Running max and sum of exp2(x - max) of a set of values, in the log2 domain (x pre-scaled by
// log2 e). A set with max -inf (empty, or all -inf) has sum 0 and drops out of any combine; two
// such sets give max -inf, sum 0.
struct MaxSumStats {
    static constexpr int kFields = 2;
    float f[kFields];  // max, sum
    __device__ __forceinline__ float max() const { return f[0]; }
    __device__ __forceinline__ float sum() const { return f[1]; }

    static __device__ __forceinline__ MaxSumStats identity() {
        return {{-cuda::std::numeric_limits<float>::infinity(), 0.0f}};
    }
    static __device__ __forceinline__ float rescaled(const MaxSumStats& s, float to_max) {
        return s.max() == -cuda::std::numeric_limits<float>::infinity() ? 0.0f : s.sum() * exp2f(s.max() - to_max);
    }
    static __device__ __forceinline__ MaxSumStats combine(const MaxSumStats& a, const MaxSumStats& b) {
        const float m = fmaxf(a.max(), b.max());
        return {{m, rescaled(a, m) + rescaled(b, m)}};
    }
};

// Shared scratch row_reduce needs: one Stats per warp of every row in the block.
template <typename Stats, int THREADS_PER_ROW, int ROWS_PER_BLOCK>
struct StatsScratch {
    static constexpr int kWarpsPerRow = THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1;
    Stats partial[ROWS_PER_BLOCK * kWarpsPerRow];
    Stats cluster_partial;  // this CTA's share of a row split over a cluster
};

template <typename Stats, int WIDTH>
__device__ __forceinline__ Stats warp_reduce_stats(Stats v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        Stats other;
#pragma unroll
        for (int k = 0; k < Stats::kFields; ++k) other.f[k] = __shfl_xor_sync(0xffffffffu, v.f[k], offset);
        // Lower lane first on both sides, so that both get the same bits from a combine that
        // rounds differently in the other order.
        v = (threadIdx.x & offset) ? Stats::combine(other, v) : Stats::combine(v, other);
    }
    return v;
}

// Combines `v` over the THREADS_PER_ROW threads of each row of the block and, when CLUSTER > 1,
// over the CLUSTER CTAs that share the row, in one exchange whatever the number of fields. Every
// thread of the block must call it (rows past the end included, with Stats::identity() or any
// stats that count nothing); every thread gets its row's result. Leaves `scratch` reusable.
template <typename Stats, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int CLUSTER>
__device__ __forceinline__ Stats row_reduce(Stats v, StatsScratch<Stats, THREADS_PER_ROW, ROWS_PER_BLOCK>& scratch) {
    constexpr int kWidth = THREADS_PER_ROW < 32 ? THREADS_PER_ROW : 32;
    v = warp_reduce_stats<Stats, kWidth>(v);
    if constexpr (THREADS_PER_ROW > 32) {
        constexpr int kWarps = THREADS_PER_ROW / 32;
        const int row_in_block = threadIdx.x / THREADS_PER_ROW;
        const int warp_in_row = (threadIdx.x % THREADS_PER_ROW) / 32;
        if ((threadIdx.x & 31) == 0) scratch.partial[row_in_block * kWarps + warp_in_row] = v;
        __syncthreads();
        v = Stats::identity();
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v = Stats::combine(v, scratch.partial[row_in_block * kWarps + w]);
        __syncthreads();
    }
    if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        static_assert(ROWS_PER_BLOCK == 1, "a row split over a cluster needs one row per block");
        if (threadIdx.x == 0) scratch.cluster_partial = v;
        cluster_sync();
        v = Stats::identity();
#pragma unroll
        for (int rank = 0; rank < CLUSTER; ++rank) {
            Stats remote;
#pragma unroll
            for (int k = 0; k < Stats::kFields; ++k) remote.f[k] = load_from_cta(&scratch.cluster_partial.f[k], rank);
            v = Stats::combine(v, remote);
        }
        // No CTA may overwrite its partial (next reduction) or exit before every CTA has read it.
        cluster_sync();
#else
        __trap();  // clusters need sm_90; the host never launches this
#endif
    }
    return v;
}

}  // namespace tileops
