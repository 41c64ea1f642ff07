// GEMM for sm_80 and newer (also runs on sm_90): D = act(alpha * A * op(B) + beta * C + bias).
//
// Each block computes a BM x BN tile of D for one batch entry (blockIdx.z), walking K in steps of
// BK through a ring of STAGES shared-memory buffers filled with cp.async, so loads of the next
// STAGES - 1 steps overlap the tensor-core work of the current one. WARPS_M x WARPS_N warps each
// own a (BM / WARPS_M) x (BN / WARPS_N) piece of the tile, loaded into registers with ldmatrix
// from XOR-swizzled shared tiles (conflict-free without padding) and multiplied with
// mma.m16n8k16 into fp32 accumulators. The epilogue applies alpha, beta * C, bias and the
// activation and stores straight from the accumulators.
//
// Template parameters: T input type (__half, __nv_bfloat16), TOut output/C type, B_NT (B is
// N x K row-major; else K x N), tile BM x BN x BK, WARPS_M x WARPS_N warps, STAGES, GROUP_M (tile
// rows per raster group, for L2 reuse), VEC elements per global copy (8: 16-byte cp.async; 4, 2:
// narrower cp.async for leading dimensions or pointers that are not 16-byte aligned; 1: plain
// loads), HAS_C, BIAS, ACT (0 none, 1 GELU, 2 SiLU), GROUPS (the tiles' schedule,
// gemm/gemm_groups.cuh: batch entries, or groups of rows counted on the device).
//
// Any M, N, K >= 1: copies that hang over an edge are zero-filled, stores are guarded.
#pragma once

#include "arch/mma_sm80.cuh"
#include "common/types.cuh"
#include "gemm/gemm_epilogue.cuh"
#include "gemm/gemm_groups.cuh"
#include "gemm/gemm_pack.cuh"

namespace tileops {

// Copies VEC elements (global -> shared), of which the first `valid` exist; the rest become 0.
template <typename T, int VEC>
__device__ __forceinline__ void gemm_copy(T* shared, const T* global, int valid) {
    if constexpr (VEC == 1) {
        *shared = valid > 0 ? *global : from_float<T>(0.0f);
    } else {
        cp_async<VEC * static_cast<int>(sizeof(T))>(shared, global, valid * static_cast<int>(sizeof(T)));
    }
}

// Loads a ROWS x COLS tile whose rows are `ld` apart, starting at (row0, col0) of a matrix of
// `rows` x `cols`, into a swizzled shared tile.
template <typename T, int ROWS, int COLS, int VEC, int THREADS>
__device__ __forceinline__ void gemm_load_tile(T* tile, const T* matrix, long long ld, long long row0, long long col0,
                                               long long rows, long long cols) {
    constexpr int kPerRow = COLS / VEC;
    constexpr int kCopies = ROWS * kPerRow;
    constexpr int kIters = (kCopies + THREADS - 1) / THREADS;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
        const int i = it * THREADS + static_cast<int>(threadIdx.x);
        if (kCopies % THREADS != 0 && i >= kCopies) break;
        const int r = i / kPerRow;
        const int c = (i % kPerRow) * VEC;
        const long long gr = row0 + r, gc = col0 + c;
        const long long left = cols - gc;
        const int valid = gr < rows && left > 0 ? static_cast<int>(left < VEC ? left : VEC) : 0;
        // A zero-length copy still needs a valid address: the matrix base.
        const T* src = valid > 0 ? matrix + gr * ld + gc : matrix;
        gemm_copy<T, VEC>(tile + swizzled_offset<COLS>(r, c), src, valid);
    }
}

template <typename T, typename TOut, bool B_NT, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES,
          int GROUP_M, int VEC, bool HAS_C, bool BIAS, int ACT, int GROUPS = kGemmBatched>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32) gemm_sm80_kernel(const GemmArgs p) {
    constexpr int kThreads = WARPS_M * WARPS_N * 32;
    constexpr int kWarpM = BM / WARPS_M, kWarpN = BN / WARPS_N;
    constexpr int kMmaM = kWarpM / 16, kMmaN = kWarpN / 8;
    static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "a warp covers multiples of 16 x 16");
    static_assert(BK % 32 == 0 && BN % 32 == 0, "BK and BN are multiples of 32 (swizzle granularity)");
    static_assert(STAGES >= 2, "at least double buffering");
    constexpr int kTileA = BM * BK, kTileB = BN * BK;

    extern __shared__ __align__(128) unsigned char gemm_shared[];
    T* shared = reinterpret_cast<T*>(gemm_shared);

    // A batched launch has a block per tile (blockIdx.z the batch entry); a grouped one as many
    // blocks as its groups could have tiles (the host does not know their rows), the extra ones
    // leaving at once. The groups' table follows the ring.
    GemmSchedule<BM, 1, GROUP_M, GROUPS> schedule;
    schedule.start(p, BN, reinterpret_cast<int*>(shared + STAGES * (kTileA + kTileB)));
    if constexpr (GROUPS != kGemmBatched) {
        __syncthreads();
        schedule.finish(p);
        if (blockIdx.x >= schedule.units) return;
    }
    const GemmTile at = schedule.tile(p, GROUPS == kGemmBatched ? blockIdx.z * schedule.units_per_batch + blockIdx.x : blockIdx.x, 0);
    const long long m0 = at.row0, n0 = static_cast<long long>(at.tile_n) * BN;
    const T* A = static_cast<const T*>(p.a) + at.ad_batch * p.batch_stride_a;
    const T* B = static_cast<const T*>(p.b) + at.b_batch * p.batch_stride_b;

    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int k_tiles = static_cast<int>((p.k + BK - 1) / BK);

    auto load_stage = [&](int stage, int kt) {
        T* tile_a = shared + stage * (kTileA + kTileB);
        T* tile_b = tile_a + kTileA;
        const long long k0 = static_cast<long long>(kt) * BK;
        gemm_load_tile<T, BM, BK, VEC, kThreads>(tile_a, A, p.lda, m0, k0, p.m, p.k);
        if constexpr (B_NT)
            gemm_load_tile<T, BN, BK, VEC, kThreads>(tile_b, B, p.ldb, n0, k0, p.n, p.k);
        else
            gemm_load_tile<T, BK, BN, VEC, kThreads>(tile_b, B, p.ldb, k0, n0, p.k, p.n);
    };

    float acc[kMmaM][kMmaN][4];
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        // Step kt has landed, and every warp is done with the buffer the next load overwrites.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < k_tiles) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
        cp_async_commit();

        const T* tile_a = shared + (kt % STAGES) * (kTileA + kTileB);
        const T* tile_b = tile_a + kTileA;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[kMmaM][4];
            unsigned b[kMmaN][2];
#pragma unroll
            for (int i = 0; i < kMmaM; ++i) {
                const int row = warp_m * kWarpM + i * 16 + lane % 16;
                ldmatrix_x4(a[i], tile_a + swizzled_offset<BK>(row, kk + (lane / 16) * 8));
            }
#pragma unroll
            for (int j = 0; j < kMmaN; j += 2) {
                unsigned r[4];
                if constexpr (B_NT) {
                    // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
                    const int n = warp_n * kWarpN + j * 8 + lane % 8 + (lane / 16) * 8;
                    ldmatrix_x4(r, tile_b + swizzled_offset<BK>(n, kk + ((lane / 8) % 2) * 8));
                } else {
                    // The same four matrices from a K x N tile, transposed on load.
                    const int k = kk + lane % 8 + ((lane / 8) % 2) * 8;
                    ldmatrix_x4_trans(r, tile_b + swizzled_offset<BN>(k, warp_n * kWarpN + j * 8 + (lane / 16) * 8));
                }
                b[j][0] = r[0];
                b[j][1] = r[1];
                b[j + 1][0] = r[2];
                b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < kMmaM; ++i)
#pragma unroll
                for (int j = 0; j < kMmaN; ++j) mma_16816<T>(acc[i][j], a[i], b[j]);
        }
    }
    cp_async_wait<0>();

    // Accumulator (i, j): rows lane / 4 and lane / 4 + 8, columns 2 * (lane % 4) and the next.
    TOut* D = static_cast<TOut*>(p.d) + at.ad_batch * p.batch_stride_d;
    const TOut* C = HAS_C ? static_cast<const TOut*>(p.c) + at.ad_batch * p.batch_stride_c : nullptr;
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long row = m0 + warp_m * kWarpM + i * 16 + lane / 4 + half * 8;
            if (row >= at.row_end) continue;
            TOut* d_row = D + row * p.ldd;
            const TOut* c_row = HAS_C ? C + row * p.ldc : nullptr;
#pragma unroll
            for (int j = 0; j < kMmaN; ++j) {
                const long long col = n0 + warp_n * kWarpN + j * 8 + (lane % 4) * 2;
                if (col < p.n)
                    gemm_store_pair<T, TOut, HAS_C, BIAS, ACT>(p, d_row, c_row, col, acc[i][j][2 * half],
                                                               acc[i][j][2 * half + 1]);
            }
        }
    }
}

// The copies of misaligned operands before a launch of gemm_sm80_kernel, with its arguments.
template <typename T>
__global__ void __launch_bounds__(256) gemm_sm80_pack_kernel(const GemmArgs p) {
    static_assert(sizeof(T) == 2, "A and B are 16-bit");
    gemm_pack_operand(p);
}

}  // namespace tileops
