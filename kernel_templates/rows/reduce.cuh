// Reductions across the threads that share a row: within a warp (shuffles), across the warps of
// a row (a small shared-memory array) and across the CTAs of a cluster (distributed shared
// memory, sm_90+).
#pragma once

#include "arch/cluster.cuh"
#include "common/infinity.cuh"

namespace tileops {

struct SumOp {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};

struct MaxOp {
    static __device__ __forceinline__ float identity() { return kNegativeInfinity; }
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};

// Reduces over aligned groups of WIDTH lanes (a power of two <= 32); every lane gets the result,
// bit for bit the same in every lane (each step combines the same two halves, in either order).
template <typename Op, int WIDTH>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cluster_exchange {

// The address of `local`'s counterpart in the shared memory of CTA `rank` of this cluster.
__device__ __forceinline__ unsigned peer_address(const void* local, unsigned peer) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(peer));
    return remote;
}

// Initialises `barrier` for the one local arrival a phase needs (mbarrier_init with the count in
// the instruction and a memory clobber: the row kernels' code depends on both).
__device__ __forceinline__ void barrier_init(unsigned long long* barrier) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
}

// Writes `value` into CTA `peer`'s copy of `slot` and counts its 4 bytes on that CTA's copy of
// `barrier`: the peer learns the value has landed from its own barrier, with no cluster barrier.
__device__ __forceinline__ void push(float* slot, unsigned long long* barrier, unsigned peer, float value) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                     peer_address(slot, peer)),
                 "r"(__float_as_uint(value)), "r"(peer_address(barrier, peer))
                 : "memory");
}

}  // namespace cluster_exchange
#endif

// Shared memory of a RowReducer. Everything is double-buffered by the parity of the reduction's
// index, so a reduction never waits for the previous one's readers (see RowReducer).
template <int THREADS_PER_ROW, int ROWS_PER_BLOCK, int CLUSTER>
struct RowReduceShared {
    static constexpr int kWarpsPerRow = THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1;
    unsigned long long arrived[2];         // cluster: the peers' pushes of the CTA partials landed
    float cluster_partial[2][CLUSTER];     // cluster: one slot per CTA of the cluster
    float partial[2][ROWS_PER_BLOCK * kWarpsPerRow];  // one per warp of every row of the block
};

// Reduces one value per thread over the THREADS_PER_ROW threads of each row of the block and,
// when CLUSTER > 1, over the CLUSTER CTAs that share the row; every thread gets its row's result.
// Every thread of the block (rows past the end included) constructs it and makes the same
// sequence of reduce calls; with CLUSTER > 1 every thread calls finish() before the kernel ends.
//
// The block stage is one __syncthreads: warps write their partials, then every lane reads them
// (lane l the partial of warp l mod warps) and a butterfly finishes. Reduction k uses buffer k & 1,
// so reduction k + 2 may overwrite buffer k & 1 only after every thread passed reduction k + 1's
// __syncthreads, i.e. after it read reduction k's partials.
//
// The cluster stage has no cluster barrier: each CTA pushes its partial into slot `rank` of every
// CTA's buffer with st.async, which counts the bytes on that CTA's mbarrier, and each CTA waits on
// its own mbarrier (phase k >> 1 of barrier k & 1). A peer pushes reduction k + 2 only after it
// received this CTA's push of reduction k + 1, which this CTA sends after it read reduction k, so a
// slot is never overwritten early and a phase never receives the next phase's bytes. A push may
// land before the local arrival that announces the phase's bytes; the mbarrier allows that.
template <int THREADS_PER_ROW, int ROWS_PER_BLOCK, int CLUSTER>
class RowReducer {
public:
    using Shared = RowReduceShared<THREADS_PER_ROW, ROWS_PER_BLOCK, CLUSTER>;
    static_assert(CLUSTER >= 1 && CLUSTER <= 32 && (CLUSTER & (CLUSTER - 1)) == 0,
                  "CLUSTER must be a power of two up to 32");
    static_assert(CLUSTER == 1 || (ROWS_PER_BLOCK == 1 && THREADS_PER_ROW >= CLUSTER),
                  "a row split over a cluster needs one row per block and a thread per peer");

    // With CLUSTER > 1 initialises the barriers and announces it to the cluster; the first reduce
    // waits for the announcement of every peer, so the loads issued in between hide it.
    __device__ __forceinline__ explicit RowReducer(Shared& shared) : shared_(shared) {
        if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (threadIdx.x == 0) {
                cluster_exchange::barrier_init(&shared_.arrived[0]);
                cluster_exchange::barrier_init(&shared_.arrived[1]);
                asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            }
            cluster_arrive();
#else
            __trap();  // clusters need sm_90; the host never launches this
#endif
        }
    }

    template <typename Op>
    __device__ __forceinline__ float reduce(float v) {
        const unsigned buffer = count_ & 1u;
        constexpr int kWidth = THREADS_PER_ROW < 32 ? THREADS_PER_ROW : 32;
        v = warp_reduce<Op, kWidth>(v);
        if constexpr (THREADS_PER_ROW > 32) {
            constexpr int kWarps = THREADS_PER_ROW / 32;
            float* row_partials = shared_.partial[buffer] + (threadIdx.x / THREADS_PER_ROW) * kWarps;
            if ((threadIdx.x & 31) == 0) row_partials[(threadIdx.x % THREADS_PER_ROW) / 32] = v;
            __syncthreads();
            v = warp_reduce<Op, kWarps>(row_partials[(threadIdx.x & 31) % kWarps]);
        }
        if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (count_ == 0) cluster_wait();  // every peer's barriers are initialised
            if (threadIdx.x < CLUSTER)
                cluster_exchange::push(&shared_.cluster_partial[buffer][cluster_rank()],
                                       &shared_.arrived[buffer], threadIdx.x, v);
            if (threadIdx.x == 0) mbarrier_arrive_expect_tx(&shared_.arrived[buffer], CLUSTER * sizeof(float));
            mbarrier_wait(&shared_.arrived[buffer], (count_ >> 1) & 1u);
            v = warp_reduce<Op, CLUSTER>(shared_.cluster_partial[buffer][(threadIdx.x & 31) % CLUSTER]);
#endif
        }
        ++count_;
        return v;
    }

    // With CLUSTER > 1: no CTA of the cluster exits while a push it sent may still be on its way.
    __device__ __forceinline__ void finish() {
        if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (count_ == 0) cluster_wait();
            cluster_arrive();
            cluster_wait();
#endif
        }
    }

private:
    Shared& shared_;
    unsigned count_ = 0;  // reductions so far (the same in every thread)
};

}  // namespace tileops
