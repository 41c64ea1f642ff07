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

// Softmax statistics in log2 units: the max of x * log2(e) and the sum of 2^(x * log2(e) - max),
// merged in one reduction.
struct MaxSum {
    float max;
    float sum;
};

struct MaxSumOp {
    using Value = MaxSum;
    static __device__ __forceinline__ MaxSum identity() { return {MaxOp::identity(), 0.0f}; }
    // Adds one element (already scaled by log2 e); -inf adds nothing.
    static __device__ __forceinline__ MaxSum add(MaxSum a, float x) {
        if (x == MaxOp::identity()) return a;
        if (x > a.max) return {x, fmaf(a.sum, exp2f(a.max - x), 1.0f)};
        return {a.max, a.sum + exp2f(x - a.max)};
    }
    static __device__ __forceinline__ MaxSum apply(MaxSum a, MaxSum b) {
        const float max = fmaxf(a.max, b.max);
        if (max == MaxOp::identity()) return identity();  // both empty: avoid -inf - -inf
        return {max, a.sum * exp2f(a.max - max) + b.sum * exp2f(b.max - max)};
    }
};

// Count, mean and sum of squared deviations, merged pairwise (Chan et al.): exact where
// E[x^2] - E[x]^2 would cancel.
struct MeanVar {
    float count;
    float mean;
    float m2;
};

struct MeanVarOp {
    using Value = MeanVar;
    static __device__ __forceinline__ MeanVar identity() { return {0.0f, 0.0f, 0.0f}; }
    // The statistics of n values (n > 0), exactly: mean first, then squared deviations.
    template <int N>
    static __device__ __forceinline__ MeanVar of(const float (&v)[N]) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) sum += v[k];
        const float mean = sum * (1.0f / N);
        float m2 = 0.0f;
#pragma unroll
        for (int k = 0; k < N; ++k) m2 += (v[k] - mean) * (v[k] - mean);
        return {static_cast<float>(N), mean, m2};
    }
    static __device__ __forceinline__ MeanVar apply(MeanVar a, MeanVar b) {
        const float count = a.count + b.count;
        if (count == 0.0f) return identity();
        const float delta = b.mean - a.mean;
        const float weight = b.count / count;
        return {count, fmaf(delta, weight, a.mean), a.m2 + b.m2 + delta * delta * a.count * weight};
    }
};

template <typename Op>
struct ValueOf {
    using type = float;
};
template <>
struct ValueOf<MaxSumOp> {
    using type = MaxSum;
};
template <>
struct ValueOf<MeanVarOp> {
    using type = MeanVar;
};

// __shfl_xor_sync for floats and small structs of floats.
template <typename V>
__device__ __forceinline__ V shuffle_xor(V v, int offset) {
    static_assert(sizeof(V) % sizeof(float) == 0, "reduced values are made of floats");
    float f[sizeof(V) / sizeof(float)];
    memcpy(f, &v, sizeof(V));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(float)); ++i) f[i] = __shfl_xor_sync(0xffffffffu, f[i], offset);
    memcpy(&v, f, sizeof(V));
    return v;
}

// Reduces over aligned groups of WIDTH lanes (a power of two <= 32); every lane gets the result.
template <typename Op, int WIDTH, typename V>
__device__ __forceinline__ V warp_reduce(V v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v = Op::apply(v, shuffle_xor(v, offset));
    return v;
}

// Shared scratch a row reduction needs: one value per warp of every row in the block.
template <int THREADS_PER_ROW, int ROWS_PER_BLOCK, typename V = float>
struct RowScratch {
    static constexpr int kWarpsPerRow = THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1;
    V partial[ROWS_PER_BLOCK * kWarpsPerRow];
    V cluster_partial;  // this CTA's share of a row split over a cluster
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
template <typename V>
__device__ __forceinline__ V load_from_cta(const V* local, unsigned rank) {
    unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    float f[sizeof(V) / sizeof(float)];
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(float)); ++i)
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(f[i]) : "r"(remote + 4 * i) : "memory");
    V value;
    memcpy(&value, f, sizeof(V));
    return value;
}
#endif

// Reduces `v` over the THREADS_PER_ROW threads of each row of the block and, when CLUSTER > 1,
// over the CLUSTER CTAs that share the row. Every thread of the block must call it (rows past
// the end included); every thread gets its row's result. Leaves `scratch` reusable.
template <typename Op, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int CLUSTER, typename V = typename ValueOf<Op>::type>
__device__ __forceinline__ V row_reduce(V v, RowScratch<THREADS_PER_ROW, ROWS_PER_BLOCK, V>& scratch) {
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
