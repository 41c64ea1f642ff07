// GEMM for one to four rows of A on CUDA cores (decode-time projections, rows of any alignment):
// D = act(alpha * A * op(B) + beta * C + bias), B either N x K row-major ("NT", B_NT) or K x N
// ("NN").
//
// At M = 1-4 a byte of B feeds at most 4 multiply-adds: the product is a stream of B, and what
// decides its speed is how many bytes of B each SM keeps in flight and how few instructions a
// byte costs. So every lane loads whole aligned 16-byte chunks of B's rows with one load each
// (STAGES of them in flight before it multiplies), and no tensor core is involved.
//
// Rows off 16 bytes (an odd K or N, a padded leading dimension, a shifted pointer): a row is read
// as the aligned chunks that cover it, and a chunk's first element sits `shift` elements before
// the row's first (or the block's first column). Rows 8 apart start 8 x ld elements apart, a
// multiple of 16 bytes, so they share a shift: warp w takes only rows w, w + WARPS, w + 2 WARPS,
// ... (WARPS a multiple of 8), and each lane's chunks line up with the same elements of the other
// operand in every row it reads. A chunk is one load wherever it lies inside B (the row's first
// and last chunks reach into the rows around it or into padding); only one that reaches past B's
// first or last element is read element by element. Elements outside the row never reach a sum:
// NT zeroes them (padding may hold NaN), NN keeps them in sums of columns it never stores.
//
// NT (B is N x K; D[m, n] is row m of A dotted with row n of B): a block owns BN rows of B, warp w
// the rows n0 + w + WARPS i; the warp's lanes split a row's chunks and meet in a shuffle sum. A's
// BM rows sit in shared memory as 8 classes of k mod 8 (element k at class (k + 8) % 8, position
// (k + 8) / 8, zeros around the rows), the BM rows' elements of a position side by side: for one
// element of a chunk the lanes read consecutive BM x 2-byte words, one load for every row of A,
// free of bank conflicts whatever the shift.
//
// NN (B is K x N; D[m, :] sums A[m, k] times row k of B): a block owns BN columns, BN + 8 elements
// of each row (the shift in front) being BN / 8 + 1 chunks, one a lane; a warp holds 32 / (BN / 8
// + 1) such lane groups, each taking every (WARPS x groups)-th row. A lane keeps the sums of its
// chunk's 8 columns over its rows; the lanes' sums meet in shared memory. A's rows come from
// shared memory too, a tile of kGemvNnTileRows positions of k at a time as floats, the BM rows of
// a k side by side: one shared load gives a chunk's multipliers (read from global memory, BM
// loads a chunk and their registers held across the loads in flight cost more than B's loads).
//
// Few columns over a long K (NN): the blocks of a cluster (CLUSTER of them, sm_90) split K and the
// first adds the others' sums from their shared memory, so that N / BN blocks still fill the SMs.
//
// Template parameters: T (__half, __nv_bfloat16), TOut, BM (1, 2 or 4 rows of A a block), BN (NT:
// rows of B a block, a multiple of WARPS; NN: 56, 120 or 248 columns), WARPS (8 or 16), STAGES
// (chunks a lane loads before it multiplies), CLUSTER (NN: blocks splitting K; 1 elsewhere),
// HAS_C, BIAS, ACT, B_NT. Dynamic shared memory (NT):
// BM x 8 x gemm_gemv_a_columns(K) elements, then BM x BN floats; (NN) BM x min(K,
// kGemvNnTileRows) floats, then BM x BN floats (GemmConfig::shared_bytes).
#pragma once

#include "arch/cluster.cuh"
#include "common/types.cuh"
#include "gemm/gemm_block_sums.cuh"

namespace tileops {

// Positions a class of k mod 8 of a row of A takes in shared memory (NT): k from -8 to K + 7 and
// more, zeros outside [0, K). (GemmConfig::shared_bytes computes the same.)
__device__ __forceinline__ int gemm_gemv_a_columns(long long k) { return static_cast<int>((k + 23) / 8); }

// NN stages A a tile of this many positions of k at a time, as floats (GemmConfig::shared_bytes:
// min(K, this) x BM floats).
constexpr int kGemvNnTileRows = 1024;

// The float at `local`'s offset in the shared memory of the cluster's block `rank` (sm_90).
__device__ __forceinline__ float gemv_cluster_load(const float* local, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
    float value;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
    return value;
}

// The 16-byte aligned chunk at `chunk`: in one load where it lies inside the operand (`whole`),
// else only its elements [lo, hi), one by one, the others zero (the bits of +0 in fp16 and bf16).
template <typename T>
__device__ __forceinline__ uint4 gemv_chunk(const T* chunk, bool whole, int lo, int hi) {
    if (whole) return __ldg(reinterpret_cast<const uint4*>(chunk));
    const unsigned short* halves = reinterpret_cast<const unsigned short*>(chunk);
    unsigned words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const unsigned low = 2 * w >= lo && 2 * w < hi ? halves[2 * w] : 0u;
        const unsigned high = 2 * w + 1 >= lo && 2 * w + 1 < hi ? halves[2 * w + 1] : 0u;
        words[w] = low | high << 16;
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
}

// The chunk with its elements outside [lo, hi) set to zero.
__device__ __forceinline__ uint4 gemv_keep(const uint4& raw, int lo, int hi) {
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
    unsigned kept[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const unsigned keep_low = 2 * w >= lo && 2 * w < hi ? 0x0000ffffu : 0u;
        const unsigned keep_high = 2 * w + 1 >= lo && 2 * w + 1 < hi ? 0xffff0000u : 0u;
        kept[w] = words[w] & (keep_low | keep_high);
    }
    return make_uint4(kept[0], kept[1], kept[2], kept[3]);
}

template <typename T>
__device__ __forceinline__ T gemv_from_bits(unsigned short bits);
template <>
__device__ __forceinline__ __half gemv_from_bits<__half>(unsigned short bits) { return __ushort_as_half(bits); }
template <>
__device__ __forceinline__ __nv_bfloat16 gemv_from_bits<__nv_bfloat16>(unsigned short bits) { return __ushort_as_bfloat16(bits); }

// A chunk's 8 elements as floats.
template <typename T>
__device__ __forceinline__ void gemv_unpack(const uint4& raw, float (&out)[8]) {
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        out[2 * w] = to_float(gemv_from_bits<T>(static_cast<unsigned short>(words[w] & 0xffffu)));
        out[2 * w + 1] = to_float(gemv_from_bits<T>(static_cast<unsigned short>(words[w] >> 16)));
    }
}

template <typename T, typename TOut, int BM, int BN, int WARPS, int STAGES, int CLUSTER, bool HAS_C, bool BIAS, int ACT,
          bool B_NT>
__global__ void __launch_bounds__(WARPS * 32) gemm_gemv_kernel(const GemmArgs p) {
    constexpr int THREADS = WARPS * 32;
    static_assert(sizeof(T) == 2, "A and B are 16-bit");
    static_assert(WARPS % 8 == 0, "a warp's rows must share their shift (rows 8 apart do)");
    static_assert(B_NT ? BN % WARPS == 0 : (BN + 8) % 8 == 0 && 32 % ((BN + 8) / 8) == 0,
                  "NT: whole rows a warp; NN: a row's chunks split the warp evenly");
    static_assert(CLUSTER == 1 || (!B_NT && (CLUSTER == 2 || CLUSTER == 4 || CLUSTER == 8)),
                  "NN only splits K, over a cluster of 2, 4 or 8 blocks");

    extern __shared__ __align__(16) unsigned char gemm_shared[];
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const long long n0 = static_cast<long long>(blockIdx.x / CLUSTER) * BN, m0 = static_cast<long long>(blockIdx.y) * BM;
    const long long batch = blockIdx.z;
    const T* A = static_cast<const T*>(p.a) + batch * p.batch_stride_a + m0 * p.lda;
    const T* B = static_cast<const T*>(p.b) + batch * p.batch_stride_b;
    const int rows_a = static_cast<int>(min(static_cast<long long>(BM), p.m - m0));
    // (Shared memory bounds the staged rows of A: their indices fit in an int.)
    const int a_columns = B_NT ? gemm_gemv_a_columns(p.k) : 0;
    T* a_shared = reinterpret_cast<T*>(gemm_shared);     // NT
    float* a_tile = reinterpret_cast<float*>(gemm_shared);  // NN
    const size_t a_bytes = B_NT ? static_cast<size_t>(BM) * 8 * a_columns * sizeof(T)
                                : static_cast<size_t>(BM) * min(static_cast<long long>(kGemvNnTileRows), p.k) * sizeof(float);
    float* sums = reinterpret_cast<float*>(gemm_shared + a_bytes);
    // (Lambdas here: as functions taking B's bounds by value, they cost 32 more registers at 4 rows
    // of A in layout NN, one block an SM instead of two.)
    auto aligned_down = [](const T* at) {
        return reinterpret_cast<const T*>(reinterpret_cast<unsigned long long>(at) & ~15ull);
    };
    auto shift_of = [](const T* at) { return static_cast<int>(reinterpret_cast<unsigned long long>(at) % 16) / 2; };
    // This batch entry of B: a chunk inside it is read in one load, whatever rows it touches.
    const unsigned long long b_begin = reinterpret_cast<unsigned long long>(B);
    const unsigned long long b_end = b_begin + sizeof(T) * static_cast<unsigned long long>((B_NT ? p.n : p.k) - 1) * p.ldb +
                                     sizeof(T) * static_cast<unsigned long long>(B_NT ? p.k : p.n);
    auto inside_b = [&](const T* chunk) {
        const unsigned long long at = reinterpret_cast<unsigned long long>(chunk);
        return at >= b_begin && at + 16 <= b_end;
    };

    if constexpr (B_NT) {
        // A's rows into their classes, zeros before k = 0, past K and for rows past M. Unrolled so
        // that a thread's loads are in flight at once: B waits for A.
#pragma unroll 8
        for (int i = static_cast<int>(threadIdx.x); i < BM * 8 * a_columns; i += THREADS) {
            const int m = i / (8 * a_columns), padded = i % (8 * a_columns), k = padded - 8;
            const T value = m < rows_a && k >= 0 && k < p.k ? A[m * p.lda + k] : from_float<T>(0.0f);
            a_shared[((padded % 8) * a_columns + padded / 8) * BM + m] = value;
        }
    }
    for (int i = static_cast<int>(threadIdx.x); i < BM * BN; i += THREADS) sums[i] = 0.0f;
    __syncthreads();

    if constexpr (B_NT) {
        // Every row of this warp starts `shift` elements into its first chunk, so element e of the
        // row's chunk c is k = 8c + e - shift: class (e - shift + 8) % 8, position c + (e >= shift).
        const int shift = shift_of(B + (n0 + warp) * p.ldb);
        const long long chunks = (shift + p.k + 7) / 8;
        int a_offset[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) a_offset[e] = ((e - shift + 8) % 8) * a_columns + (e >= shift);
#pragma unroll 1
        for (int r = 0; r < BN / WARPS; ++r) {
            const long long n = n0 + warp + static_cast<long long>(r) * WARPS;
            if (n >= p.n) break;
            const T* row = aligned_down(B + n * p.ldb);
            float part[BM];
#pragma unroll
            for (int m = 0; m < BM; ++m) part[m] = 0.0f;
#pragma unroll 1
            for (long long first = lane; first < chunks; first += 32 * STAGES) {
                uint4 raw[STAGES];
#pragma unroll
                for (int s = 0; s < STAGES; ++s) {
                    const long long c = first + 32 * s;
                    // The row's elements: from `shift` in chunk 0, up to K + shift - 8c in the last. The
                    // others (the rows around, padding that may hold NaN) become zeros.
                    const int lo = c == 0 ? shift : 0;
                    const int hi = static_cast<int>(max(0ll, min(8ll, p.k + shift - 8 * c)));
                    raw[s] = gemv_chunk(row + 8 * c, hi > lo && inside_b(row + 8 * c), lo, hi);
                    if (lo > 0 || hi < 8) raw[s] = gemv_keep(raw[s], lo, hi);
                }
#pragma unroll
                for (int s = 0; s < STAGES; ++s) {
                    const long long c = first + 32 * s;
                    if (c >= chunks) break;
                    float b[8];
                    gemv_unpack<T>(raw[s], b);
#pragma unroll
                    for (int e = 0; e < 8; ++e) {
                        float a[BM];
                        unpack(load_raw<T, BM>(a_shared + (a_offset[e] + c) * BM), a);
#pragma unroll
                        for (int m = 0; m < BM; ++m) part[m] = fmaf(a[m], b[e], part[m]);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < BM; ++m) {
#pragma unroll
                for (int offset = 16; offset > 0; offset /= 2) part[m] += __shfl_xor_sync(0xffffffffu, part[m], offset);
                if (lane == 0) sums[m * BN + (n - n0)] = part[m];
            }
        }
    } else {
        constexpr int LANES = (BN + 8) / 8;  // a row's chunks, one a lane
        constexpr int GROUPS = 32 / LANES;   // rows a warp reads at once
        constexpr int ROW_STEP = WARPS * GROUPS;
        const int chunk = lane % LANES, group = lane / LANES;
        // Every row of this warp starts the block's columns `shift` elements into its first
        // chunk: this lane's chunk holds columns first_col .. first_col + 7 in each of them.
        const int shift = shift_of(B + warp * p.ldb + n0);
        const long long first_col = n0 - shift + 8 * chunk;
        const long long end_col = min(n0 + BN, p.n);
        const int lo = static_cast<int>(max(0ll, n0 - first_col));
        const int hi = static_cast<int>(max(0ll, min(8ll, end_col - first_col)));
        float acc[BM][8];
#pragma unroll
        for (int m = 0; m < BM; ++m)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[m][e] = 0.0f;
        // This block's share of K: all of it, or a cluster's block's slice (a multiple of 64 rows,
        // so that a warp's rows stay those of its shift).
        long long k_begin = 0, k_end = p.k;
        if constexpr (CLUSTER > 1) {
            const long long slice = (p.k + 64 * CLUSTER - 1) / (64 * CLUSTER) * 64;
            k_begin = min(p.k, slice * cluster_rank());
            k_end = min(p.k, k_begin + slice);
        }
#pragma unroll 1
        for (long long tile = k_begin; tile < k_end; tile += kGemvNnTileRows) {
            // A's rows for this tile's positions of k, as floats, the BM rows of a k side by side.
            const int tile_rows = static_cast<int>(min(static_cast<long long>(kGemvNnTileRows), k_end - tile));
            if (tile > k_begin) __syncthreads();  // every warp is done with the previous tile
            for (int i = static_cast<int>(threadIdx.x); i < BM * tile_rows; i += THREADS) {
                const int m = i / tile_rows, r = i % tile_rows;
                a_tile[r * BM + m] = m < rows_a ? to_float(A[m * p.lda + tile + r]) : 0.0f;
            }
            __syncthreads();
            if (hi <= lo) continue;
            // Rows start at a multiple of ROW_STEP, so warp w's rows are still w mod 8.
            const long long tile_end = tile + tile_rows;
#pragma unroll 1
            for (long long first = tile + warp + static_cast<long long>(group) * WARPS; first < tile_end;
                 first += ROW_STEP * STAGES) {
                uint4 raw[STAGES];
#pragma unroll
                for (int s = 0; s < STAGES; ++s) {
                    const long long k = first + static_cast<long long>(s) * ROW_STEP;
                    const bool inside = k < tile_end;
                    // Elements outside the block's columns only reach sums that are never stored.
                    const T* at = aligned_down(B + k * p.ldb + n0) + 8 * chunk;
                    raw[s] = gemv_chunk(at, inside && inside_b(at), lo, inside ? hi : 0);
                }
#pragma unroll
                for (int s = 0; s < STAGES; ++s) {
                    const long long k = first + static_cast<long long>(s) * ROW_STEP;
                    float a[BM], b[8];
                    load_vec<float, BM>(a_tile + (k < tile_end ? k - tile : 0) * BM, a);  // one shared load
                    gemv_unpack<T>(raw[s], b);
#pragma unroll
                    for (int m = 0; m < BM; ++m)
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[m][e] = fmaf(a[m], b[e], acc[m][e]);
                }
            }
        }
        if (hi > lo) {
#pragma unroll
            for (int m = 0; m < BM; ++m)
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    if (e >= lo && e < hi) atomicAdd(&sums[m * BN + (first_col + e - n0)], acc[m][e]);
        }
    }
    __syncthreads();

    if constexpr (CLUSTER > 1) {
        // The cluster's first block adds the others' sums to its own and stores them; the others
        // keep their shared memory alive until it has read them.
        cluster_sync();
        const unsigned rank = cluster_rank();
        if (rank == 0)
            for (int i = static_cast<int>(threadIdx.x); i < BM * BN; i += THREADS) {
                float total = sums[i];
#pragma unroll
                for (unsigned other = 1; other < CLUSTER; ++other) total += gemv_cluster_load(sums + i, other);
                sums[i] = total;
            }
        cluster_sync();
        if (rank != 0) return;
    }
    gemm_store_block_sums<T, TOut, BM, BN, THREADS, HAS_C, BIAS, ACT>(p, sums, batch, m0, n0);
}

}  // namespace tileops
