// MLA decode on sm_80 and newer: mma.sync m16n8k16 with ldmatrix fragments (see
// mla_decode_common.cuh for the math, the rows and the splits).
//
// One CTA = (split, row block of BLOCK_M rows, batch), 2 * BLOCK_M / 16 warps: warp w serves rows
// 16 (w % (WARPS / 2)) .. + 15 and half w / (WARPS / 2) of the score dims and output columns
// (16 x 256 fp32 accumulators: 128 registers a thread). K and V are the same shared-memory tile
// (V = the first 512 dims of K), streamed with cp.async through a ring of STAGES tiles, one
// barrier per tile; the pair adds its partial scores through shared memory at a named barrier.
//
// Template parameters: T (__half or __nv_bfloat16), BLOCK_M rows per CTA (16, 32 or 64),
// BLOCK_N keys per tile (16, 32 or 64), STAGES key tiles in the ring, PAGE_SIZE tokens per page
// (0: contiguous KV).
//
// Dynamic shared memory (mla_launch in src/ops/mla_decode/mla_decode_config.cpp computes the same): Q tile
// BLOCK_M rows + ring STAGES * BLOCK_N rows of kMlaRowElems elements, the pair exchange (a float4
// per lane and 8 keys: WARPS * BLOCK_N / 8 * 512 bytes), and STAGES * BLOCK_N key flags.
#pragma once

#include "mla_decode/mla_decode_common.cuh"

namespace tileops {

// Shared-memory rows are padded by 16 bytes: 73 16-byte chunks, so the 8 rows one ldmatrix reads at
// the same column fall into 8 different bank groups (576 is not a power of two: no XOR swizzle).
constexpr int kMlaRowElems = kMlaKeyDim + 8;
constexpr int kMlaRowBytes = kMlaRowElems * 2;

__device__ __forceinline__ void mla_ldmatrix_x4(unsigned (&r)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ __forceinline__ void mla_ldmatrix_x4_trans(unsigned (&r)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

template <typename T, int BLOCK_M, int BLOCK_N, int STAGES, int PAGE_SIZE>
__global__ void __launch_bounds__(BLOCK_M / 16 * 64, 1) mla_decode_sm80_kernel(const MlaDecodeArgs p) {
    static_assert(BLOCK_M == 16 || BLOCK_M == 32 || BLOCK_M == 64, "BLOCK_M is 16, 32 or 64");
    static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64, "BLOCK_N is 16, 32 or 64");
    static_assert(STAGES >= 2, "at least two stages");
    constexpr int PAIRS = BLOCK_M / 16, WARPS = 2 * PAIRS, THREADS = WARPS * 32;
    constexpr int kHalfChunks = kMlaChunks / 2;      // the score dims of one warp of a pair: 36 chunks
    constexpr int kBlocksN = BLOCK_N / 8;            // score accumulators of 16 x 8
    constexpr int kBlocksV = kMlaValueDim / 2 / 8;   // output accumulators of 16 x 8: 32
    constexpr unsigned kTileBytes = BLOCK_N * kMlaRowBytes;

    extern __shared__ __align__(128) unsigned char mla_shared[];
    T* q_tile = reinterpret_cast<T*>(mla_shared);
    T* ring = q_tile + BLOCK_M * kMlaRowElems;
    float4* exchange = reinterpret_cast<float4*>(ring + STAGES * BLOCK_N * kMlaRowElems);
    unsigned char* key_ok = reinterpret_cast<unsigned char*>(exchange + WARPS * kBlocksN * 32);

    const KvChunk work = mla_work<BLOCK_M, BLOCK_N>(p);
    if (!work.active) return;
    const int row0 = work.column * BLOCK_M, batch = work.batch;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int pair = warp % PAIRS, half = warp / PAIRS;
    const MlaKeys keys = mla_keys<BLOCK_M, BLOCK_N>(p, row0, batch, work.split, work.num_splits);

    // Q rows, copied with the first key tile.
    mla_load_q<T, BLOCK_M, THREADS>(p, row0, batch, [&](int r, int c) { return q_tile + r * kMlaRowElems + c * 8; });
    auto load_tile = [&](int index, int stage) {
        T* tile = ring + stage * BLOCK_N * kMlaRowElems;
        mla_load_keys<T, BLOCK_N, THREADS, PAGE_SIZE>(p, keys, batch, (keys.first_tile + index) * BLOCK_N,
                                                      key_ok + stage * BLOCK_N,
                                                      [&](int r, int g, int j) { return tile + r * kMlaRowElems + (j * 8 + g) * 8; });
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < keys.num_tiles) load_tile(s, s);
        cp_async_commit();
    }

    // Per-lane ldmatrix bases: lanes 0-15 address rows 0-15 of a 16-row block at a chunk, lanes
    // 16-31 the same rows at the next chunk.
    const unsigned lane_offset = static_cast<unsigned>((lane % 16) * kMlaRowBytes + (lane / 16) * 16);
    const unsigned q_base = shared_address(q_tile) + pair * 16 * kMlaRowBytes + lane_offset + half * kHalfChunks * 16;
    const unsigned ring_base = shared_address(ring) + lane_offset;

    int row_end[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) row_end[h] = mla_row_end(p, keys, row0 + pair * 16 + lane / 4 + h * 8);

    float o[kBlocksV][4];
#pragma unroll
    for (int j = 0; j < kBlocksV; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

    int stage = 0;
    for (int index = 0; index < keys.num_tiles; ++index) {
        const int n0 = (keys.first_tile + index) * BLOCK_N;
        // This tile has landed for every thread, and every warp is done with the previous tile: its
        // stage (the one the next copy fills) is free, and so is the exchange area.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int ahead = index + STAGES - 1;
            if (ahead < keys.num_tiles) load_tile(ahead, (stage + STAGES - 1) % STAGES);
            cp_async_commit();
        }

        // Partial scores over this warp's 288 dims.
        float s[kBlocksN][4];
#pragma unroll
        for (int j = 0; j < kBlocksN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
        const unsigned k_base = ring_base + stage * kTileBytes + half * kHalfChunks * 16;
#pragma unroll 6
        for (int kk = 0; kk < kHalfChunks; kk += 2) {
            unsigned a[4];
            mla_ldmatrix_x4(a, q_base + kk * 16);
#pragma unroll
            for (int j = 0; j < kBlocksN; j += 2) {
                unsigned r[4];
                mla_ldmatrix_x4(r, k_base + j * 8 * kMlaRowBytes + kk * 16);
                const unsigned b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]};
                mma_16816<T>(s[j], a, b0);
                mma_16816<T>(s[j + 1], a, b1);
            }
        }
        mla_add_partner_scores(s, exchange, warp, warp ^ PAIRS, 1 + pair);

        // Masks (paged tiles may hold unusable keys anywhere), then the online softmax step.
        const bool mask = PAGE_SIZE > 0 || n0 + BLOCK_N > keys.full_end;
        mla_softmax_step<BLOCK_N, kBlocksV>(s, o, row_max, row_sum, mask, row_end, n0, key_ok + stage * BLOCK_N,
                                            p.scale_log2);

        // O += P V over this warp's 256 output columns; P's A fragments are the score accumulators.
        const unsigned v_base = ring_base + stage * kTileBytes + half * (kMlaValueDim / 2) * 2;
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            unsigned pf[4];
            mla_p_fragment<T>(s, kk, pf);
#pragma unroll
            for (int j = 0; j < kBlocksV; j += 2) {
                unsigned r[4];
                mla_ldmatrix_x4_trans(r, v_base + kk * 16 * kMlaRowBytes + j * 16);
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma_16816<T>(o[j], pf, b0);
                mma_16816<T>(o[j + 1], pf, b1);
            }
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    mla_store_rows<T, BLOCK_M>(p, o, row_max, row_sum, row0, work, pair, half);
}

}  // namespace tileops
