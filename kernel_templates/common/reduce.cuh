// Reductions across the threads that share a row: within a warp (shuffles), across the warps of
// a row (a small shared-memory array) and across the CTAs of a cluster (distributed shared
// memory, sm_90+).
#pragma once

#include <cuda/std/limits>

namespace tileops {

// A reduction op: Value (a float, or Floats<N> when a row needs several statistics at once, so
// they share one reduction), identity() and apply(a, b). apply must be symmetric bit for bit
// (apply(a, b) == apply(b, a)), so that every thread of a row ends with the same result.
template <int N>
struct Floats {
    float v[N];
};

struct SumOp {
    using Value = float;
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};

struct MaxOp {
    using Value = float;
    static __device__ __forceinline__ float identity() { return -cuda::std::numeric_limits<float>::infinity(); }
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};

// Softmax statistics {max, sum}: `sum` is a sum of exp2(x - max) over the values seen, with x and
// max in log2 units (scaled by log2 e). Merging rescales each sum to the larger max; a side that
// saw nothing (sum 0, max -inf) adds nothing (no -inf - -inf).
struct SoftmaxStatOp {
    using Value = Floats<2>;
    static __device__ __forceinline__ Value identity() {
        return {{-cuda::std::numeric_limits<float>::infinity(), 0.0f}};
    }
    static __device__ __forceinline__ Value apply(const Value& a, const Value& b) {
        const float max = fmaxf(a.v[0], b.v[0]);
        const float from_a = a.v[1] == 0.0f ? 0.0f : a.v[1] * exp2f(a.v[0] - max);
        const float from_b = b.v[1] == 0.0f ? 0.0f : b.v[1] * exp2f(b.v[0] - max);
        return {{max, from_a + from_b}};
    }
};

// Mean and variance statistics {count, mean, sum of squared deviations from the mean}, merged
// pairwise (Chan et al.): as exact as a second pass over the row, in one reduction. The operands
// are put in a fixed order first, so that the merge is symmetric bit for bit.
struct MeanM2Op {
    using Value = Floats<3>;
    static __device__ __forceinline__ Value identity() { return {{0.0f, 0.0f, 0.0f}}; }
    static __device__ __forceinline__ Value apply(const Value& x, const Value& y) {
        const bool ordered = x.v[0] < y.v[0] || (x.v[0] == y.v[0] && (x.v[1] < y.v[1] || (x.v[1] == y.v[1] && x.v[2] <= y.v[2])));
        // Selected word by word (references to either operand would put them in local memory).
        const float a_count = ordered ? x.v[0] : y.v[0], b_count = ordered ? y.v[0] : x.v[0];
        const float a_mean = ordered ? x.v[1] : y.v[1], b_mean = ordered ? y.v[1] : x.v[1];
        const float a_m2 = ordered ? x.v[2] : y.v[2], b_m2 = ordered ? y.v[2] : x.v[2];
        const float count = a_count + b_count;
        const float delta = b_mean - a_mean;
        const float share = count > 0.0f ? b_count / count : 0.0f;
        return {{count, a_mean + delta * share, a_m2 + b_m2 + delta * delta * a_count * share}};
    }
};

// Word i of a reduction value (a float has one).
__device__ __forceinline__ float& word(float& v, int) { return v; }
template <int N>
__device__ __forceinline__ float& word(Floats<N>& v, int i) { return v.v[i]; }

// Reduces over aligned groups of WIDTH lanes (a power of two <= 32); every lane gets the result,
// bit for bit the same in every lane (each step combines the same two halves, in either order).
template <typename Op, int WIDTH>
__device__ __forceinline__ typename Op::Value warp_reduce(typename Op::Value v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        typename Op::Value other = v;
#pragma unroll
        for (int w = 0; w < static_cast<int>(sizeof(v) / sizeof(float)); ++w)
            word(other, w) = __shfl_xor_sync(0xffffffffu, word(other, w), offset);
        v = Op::apply(v, other);
    }
    return v;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cluster_exchange {

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The address of `local`'s counterpart in the shared memory of CTA `rank` of this cluster.
__device__ __forceinline__ unsigned peer_address(const void* local, unsigned peer) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(peer));
    return remote;
}

// Writes `value` into CTA `peer`'s copy of `slot` and counts its 4 bytes on that CTA's copy of
// `barrier`: the peer learns the value has landed from its own barrier, with no cluster barrier.
__device__ __forceinline__ void push(float* slot, unsigned long long* barrier, unsigned peer, float value) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                     peer_address(slot, peer)),
                 "r"(__float_as_uint(value)), "r"(peer_address(barrier, peer))
                 : "memory");
}

__device__ __forceinline__ void barrier_init(unsigned long long* barrier) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
}

// The one local arrival a phase needs, and the bytes the peers' pushes must bring before it ends.
__device__ __forceinline__ void barrier_expect(unsigned long long* barrier, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void barrier_wait(unsigned long long* barrier, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(shared_address(barrier)),
        "r"(parity)
        : "memory");
}

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

}  // namespace cluster_exchange
#endif

// Shared memory of a RowReducer. Everything is double-buffered by the parity of the reduction's
// index, so a reduction never waits for the previous one's readers (see RowReducer).
template <int THREADS_PER_ROW, int ROWS_PER_BLOCK, int CLUSTER>
struct RowReduceShared {
    static constexpr int kWarpsPerRow = THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1;
    static constexpr int kMaxWords = 3;    // the widest reduction value (MeanM2Op)
    unsigned long long arrived[2];         // cluster: the peers' pushes of the CTA partials landed
    float cluster_partial[2][kMaxWords][CLUSTER];  // cluster: one slot per word and CTA of the cluster
    float partial[2][kMaxWords][ROWS_PER_BLOCK * kWarpsPerRow];  // one per word and warp of every row
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
            cluster_exchange::cluster_arrive();
#else
            __trap();  // clusters need sm_90; the host never launches this
#endif
        }
    }

    template <typename Op>
    __device__ __forceinline__ typename Op::Value reduce(typename Op::Value v) {
        using Value = typename Op::Value;
        constexpr int kWords = sizeof(Value) / sizeof(float);
        static_assert(kWords <= Shared::kMaxWords, "reduction value wider than RowReduceShared holds");
        const unsigned buffer = count_ & 1u;
        constexpr int kWidth = THREADS_PER_ROW < 32 ? THREADS_PER_ROW : 32;
        v = warp_reduce<Op, kWidth>(v);
        if constexpr (THREADS_PER_ROW > 32) {
            constexpr int kWarps = THREADS_PER_ROW / 32;
            const int row_base = (threadIdx.x / THREADS_PER_ROW) * kWarps;
            if ((threadIdx.x & 31) == 0)
#pragma unroll
                for (int w = 0; w < kWords; ++w)
                    shared_.partial[buffer][w][row_base + (threadIdx.x % THREADS_PER_ROW) / 32] = word(v, w);
            __syncthreads();
#pragma unroll
            for (int w = 0; w < kWords; ++w) word(v, w) = shared_.partial[buffer][w][row_base + (threadIdx.x & 31) % kWarps];
            v = warp_reduce<Op, kWarps>(v);
        }
        if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (count_ == 0) cluster_exchange::cluster_wait();  // every peer's barriers are initialised
            if (threadIdx.x < CLUSTER)
#pragma unroll
                for (int w = 0; w < kWords; ++w)
                    cluster_exchange::push(&shared_.cluster_partial[buffer][w][cluster_exchange::rank()],
                                           &shared_.arrived[buffer], threadIdx.x, word(v, w));
            if (threadIdx.x == 0)
                cluster_exchange::barrier_expect(&shared_.arrived[buffer], CLUSTER * kWords * sizeof(float));
            cluster_exchange::barrier_wait(&shared_.arrived[buffer], (count_ >> 1) & 1u);
#pragma unroll
            for (int w = 0; w < kWords; ++w)
                word(v, w) = shared_.cluster_partial[buffer][w][(threadIdx.x & 31) % CLUSTER];
            v = warp_reduce<Op, CLUSTER>(v);
#endif
        }
        ++count_;
        return v;
    }

    // With CLUSTER > 1: no CTA of the cluster exits while a push it sent may still be on its way.
    __device__ __forceinline__ void finish() {
        if constexpr (CLUSTER > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (count_ == 0) cluster_exchange::cluster_wait();
            cluster_exchange::cluster_arrive();
            cluster_exchange::cluster_wait();
#endif
        }
    }

private:
    Shared& shared_;
    unsigned count_ = 0;  // reductions so far (the same in every thread)
};

}  // namespace tileops
