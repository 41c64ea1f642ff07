// GEMM for few rows of A (decode-time projections, M up to 64) with B in the weight layout (N x K
// row-major, "NT"), sm_80 and newer: D = act(alpha * A * B^T + beta * C + bias).
//
// Such a product is bound by reading B once: at M = 1-64 a byte of B feeds 2-128 flops, far below
// what the tensor cores could use. So the design is that of a stream, not of a GEMM tile: a CTA
// owns BN columns of D (BN rows of B) for the BM rows of A, and its WARPS warps split K between
// them, each streaming its own 64-wide K steps (step t goes to warp t % WARPS, so the warps of a
// CTA read neighbouring 128-byte pieces of the same B rows) through its own cp.async ring of
// STAGES stages: loads run STAGES - 1 steps ahead and no CTA barrier is needed in the loop (a
// lane only waits for copies of its own warp, after a __syncwarp). Many small CTAs (N / BN of
// them, 128-900 for the Llama projections) keep every SM's loads in flight from the first cycle.
// The warps' partial sums meet in shared memory (fp32 atomic adds), and the epilogue (alpha,
// beta * C, bias, activation) writes D by rows, two columns per thread.
//
// The MMA is mma.sync m16n8k16 with the BM rows of A (zero-padded past M) as the row operand and
// B's rows as the column operand, both read with ldmatrix from 128-byte swizzled rows. A is tiny
// (BM x K) and every CTA reads it: it is served by L2.
//
// Template parameters: T (__half, __nv_bfloat16), TOut, BM (16, 32 or 64 rows of A per CTA), BN
// (16, 32 or 64), WARPS, STAGES, HAS_C, BIAS, ACT. Rows of A and B must be 16-byte aligned (K a
// multiple of 8 elements, aligned pointers and leading dimensions): the host only offers this kernel
// then. Dynamic shared memory: WARPS * STAGES * (BM + BN) * 64 elements, then BM * BN floats.
#pragma once

#include "arch/mma_sm80.cuh"
#include "common/types.cuh"
#include "gemm/gemm_epilogue.cuh"
#include "gemm/gemm_pack.cuh"

namespace tileops {

template <typename T, typename TOut, int BM, int BN, int WARPS, int STAGES, bool HAS_C, bool BIAS, int ACT>
__global__ void __launch_bounds__(WARPS * 32) gemm_skinny_kernel(const GemmArgs p) {
    constexpr int BK = 64;                    // one 128-byte swizzled row per operand row and step
    constexpr int CHUNKS = BK / 8;            // 16-byte chunks of a row
    constexpr int STAGE_ELEMS = (BM + BN) * BK;
    constexpr int COPIES = (BM + BN) * CHUNKS / 32;  // 16-byte copies per lane and stage
    constexpr int M_TILES = BM / 16, N_TILES = BN / 8;
    constexpr int THREADS = WARPS * 32;
    static_assert(BM % 16 == 0 && BN % 16 == 0 && (BM + BN) * CHUNKS % 32 == 0, "BM and BN are multiples of 16");
    static_assert(STAGES >= 2, "at least double buffering");

    extern __shared__ __align__(128) unsigned char gemm_shared[];
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    T* ring = reinterpret_cast<T*>(gemm_shared) + warp * STAGES * STAGE_ELEMS;
    float* sums = reinterpret_cast<float*>(reinterpret_cast<T*>(gemm_shared) + WARPS * STAGES * STAGE_ELEMS);

    const long long n0 = static_cast<long long>(blockIdx.x) * BN, m0 = static_cast<long long>(blockIdx.y) * BM;
    const long long batch = blockIdx.z;
    const T* A = static_cast<const T*>(p.a) + batch * p.batch_stride_a;
    const T* B = static_cast<const T*>(p.b) + batch * p.batch_stride_b;
    const int k_tiles = static_cast<int>((p.k + BK - 1) / BK);
    const int iterations = warp < k_tiles ? (k_tiles - warp + WARPS - 1) / WARPS : 0;

    // Starts the copies of this warp's iteration `it` (K step warp + it * WARPS) into its stage:
    // rows 0..BM-1 of the stage are A's, BM..BM+BN-1 are B's; what lies outside the matrices is
    // zero-filled (K is a multiple of 8, so a chunk is either wholly inside or wholly outside).
    auto issue = [&](int it) {
        T* stage = ring + (it % STAGES) * STAGE_ELEMS;
        const long long k0 = static_cast<long long>(warp + it * WARPS) * BK;
        const bool live = it < iterations;
        // Not unrolled: unrolled, the compiler keeps every copy's source address live across the
        // main loop (24 pointers at 64 + 32 rows), and the accumulators spill.
#pragma unroll 1
        for (int i = 0; i < COPIES; ++i) {
            const int idx = i * 32 + lane, row = idx / CHUNKS, chunk = idx % CHUNKS;
            const long long k = k0 + chunk * 8;
            const T* src = A;
            bool valid = live && k < p.k;
            if (row < BM) {
                valid = valid && m0 + row < p.m;
                src = valid ? A + (m0 + row) * p.lda + k : A;
            } else {
                valid = valid && n0 + row - BM < p.n;
                src = valid ? B + (n0 + row - BM) * p.ldb + k : B;
            }
            cp_async<16>(stage + swizzled_offset<BK>(row, chunk * 8), src, valid ? 16 : 0);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int it = 0; it < STAGES - 1; ++it) issue(it);

    for (int i = static_cast<int>(threadIdx.x); i < BM * BN; i += THREADS) sums[i] = 0.0f;

    float acc[M_TILES][N_TILES][4];
#pragma unroll
    for (int i = 0; i < M_TILES; ++i)
#pragma unroll
        for (int j = 0; j < N_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    for (int it = 0; it < iterations; ++it) {
        __syncwarp();  // every lane is done with the stage the next copies overwrite
        issue(it + STAGES - 1);
        cp_async_wait<STAGES - 1>();
        __syncwarp();  // the other lanes' copies of this step are visible
        const T* tile_a = ring + (it % STAGES) * STAGE_ELEMS;
        const T* tile_b = tile_a + BM * BK;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[M_TILES][4];
#pragma unroll
            for (int i = 0; i < M_TILES; ++i)
                ldmatrix_x4(a[i], tile_a + swizzled_offset<BK>(i * 16 + lane % 16, kk + (lane / 16) * 8));
#pragma unroll
            for (int j = 0; j < N_TILES; j += 2) {
                // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
                unsigned r[4];
                ldmatrix_x4(r, tile_b + swizzled_offset<BK>(j * 8 + lane % 8 + (lane / 16) * 8, kk + ((lane / 8) % 2) * 8));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int i = 0; i < M_TILES; ++i) {
                    mma_16816<T>(acc[i][j], a[i], b0);
                    mma_16816<T>(acc[i][j + 1], a[i], b1);
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // `sums` is zeroed

    // The warps' K parts meet in shared memory. Accumulator (i, j): rows lane / 4 and lane / 4 + 8
    // of m-tile i, columns 2 * (lane % 4) and the next of n-tile j.
#pragma unroll
    for (int i = 0; i < M_TILES; ++i)
#pragma unroll
        for (int j = 0; j < N_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = i * 16 + lane / 4 + (e / 2) * 8, col = j * 8 + (lane % 4) * 2 + e % 2;
                atomicAdd(&sums[row * BN + col], acc[i][j][e]);
            }
    __syncthreads();

    TOut* D = static_cast<TOut*>(p.d) + batch * p.batch_stride_d;
    const TOut* C = HAS_C ? static_cast<const TOut*>(p.c) + batch * p.batch_stride_c : nullptr;
    for (int idx = static_cast<int>(threadIdx.x); idx < BM * BN / 2; idx += THREADS) {
        const int r = idx / (BN / 2), c = (idx % (BN / 2)) * 2;
        const long long row = m0 + r, col = n0 + c;
        if (row >= p.m || col >= p.n) continue;
        gemm_store_pair<T, TOut, HAS_C, BIAS, ACT>(p, D + row * p.ldd, HAS_C ? C + row * p.ldc : nullptr, col,
                                                   sums[r * BN + c], sums[r * BN + c + 1]);
    }
}

// The copies of misaligned operands before a launch of gemm_skinny_kernel, with its arguments.
template <typename T>
__global__ void __launch_bounds__(256) gemm_skinny_pack_kernel(const GemmArgs p) {
    static_assert(sizeof(T) == 2, "A and B are 16-bit");
    gemm_pack_operand(p);
}

}  // namespace tileops
