// MLA decode on sm_90a: warpgroup MMAs (wgmma) with both operands of the scores in shared memory
// and P from registers for P V (see mla_decode_common.cuh for the math, the rows and the splits).
//
// One CTA = (split, 64 rows, batch), two warpgroups: warpgroup `half` computes the 64 x BLOCK_N
// scores over its half of the 576 dims (wgmma m64nBLOCK_Nk16, 18 k-steps), adds the other's partial
// scores through shared memory (warp w of each warpgroup holds the same rows: they meet at named
// barrier 1 + w), runs the online softmax and accumulates its 256 output columns with wgmma
// m64n256k16 (128 fp32 registers a thread). The loads are cp.async copies by every thread (a
// paged cache gathers rows page by page) into the layout TMA's 128-byte swizzle gives: per row
// box of 64 dims, rows of 128 bytes with 16-byte chunk c of row r at chunk c ^ (r % 8).
//
// Template parameters: T (__half or __nv_bfloat16), BLOCK_N keys per tile (32 or 64), STAGES
// key tiles in the ring, PAGE_SIZE tokens per page (0: contiguous KV).
//
// Dynamic shared memory (mla_launch in src/ops/mla_decode/mla_decode_config.cpp computes the same): 1024
// bytes of alignment slack, Q (64 rows) and STAGES * BLOCK_N key rows of 1152 bytes, the exchange
// (8 warps x BLOCK_N / 8 x 512 bytes) and STAGES * BLOCK_N key flags.
#pragma once

#include "arch/hopper.cuh"
#include "arch/wgmma_rs.cuh"
#include "mla_decode/mla_decode_common.cuh"

namespace tileops {

template <int N>
struct MlaConstant {
    static constexpr int value = N;
};

// Byte offset of 16-byte chunk c of row r in a tile of ROWS rows stored as 9 boxes of 64 dims.
template <int ROWS>
__device__ __forceinline__ unsigned mla_swizzled(int r, int c) {
    return static_cast<unsigned>((c / 8) * ROWS * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4));
}

template <int ROWS>
__device__ __forceinline__ unsigned mla_k_step(int kk) {  // descriptor units (16 bytes) of k-step kk
    return static_cast<unsigned>((kk / 4) * ROWS * 128 + (kk % 4) * 32) >> 4;
}

// Issues the 18 wgmmas of warpgroup HALF's partial scores (dims 288 HALF .. + 287): with HALF a
// constant, every descriptor step is an immediate.
template <typename T, int BLOCK_N, int HALF>
__device__ __forceinline__ void mla_sm90_scores(float (&s)[BLOCK_N / 2], unsigned long long q_desc,
                                                unsigned long long k_desc) {
    constexpr int kSteps = kMlaKeyDim / 16 / 2;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        constexpr int first = HALF * kSteps;
        wgmma_m64k16<T, BLOCK_N, 0>(s, q_desc + mla_k_step<64>(first + i), k_desc + mla_k_step<BLOCK_N>(first + i),
                                    i > 0 ? 1 : 0);
    }
}

template <typename T, int BLOCK_N, int STAGES, int PAGE_SIZE>
__global__ void __launch_bounds__(256, 1) mla_decode_sm90_kernel(const MlaDecodeArgs p) {
    static_assert(BLOCK_N == 32 || BLOCK_N == 64, "BLOCK_N is 32 or 64 (wgmma widths with a wrapper)");
    static_assert(STAGES >= 3, "three stages at least: P V of a tile runs while the tile after next is copied");
    constexpr int BLOCK_M = 64, THREADS = 256;
    constexpr int kBlocksN = BLOCK_N / 8;
    constexpr unsigned kRowBytes = kMlaKeyDim * 2;  // 1152
    constexpr unsigned kQBytes = BLOCK_M * kRowBytes, kTileBytes = BLOCK_N * kRowBytes;

    extern __shared__ unsigned char mla_shared_raw[];
    // wgmma's 128-byte swizzle repeats every 1024 bytes: tiles start at 1024-byte boundaries.
    unsigned char* base = mla_shared_raw + ((1024 - (shared_address(mla_shared_raw) & 1023)) & 1023);
    unsigned char* q_tile = base;
    unsigned char* ring = base + kQBytes;
    float4* exchange = reinterpret_cast<float4*>(ring + STAGES * kTileBytes);
    unsigned char* key_ok = reinterpret_cast<unsigned char*>(exchange + 8 * kBlocksN * 32);

    const KvChunk work = mla_work<BLOCK_M, BLOCK_N>(p);
    if (!work.active) return;
    const int row0 = work.column * BLOCK_M, batch = work.batch;
    // The warp index read from lane 0, so that the compiler knows it is warp-uniform: a branch on
    // threadIdx.x / 32 counts as divergent, and ptxas serializes the wgmmas inside it.
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0), lane = threadIdx.x % 32;
    const int pair = warp % 4, half = warp / 4;
    const MlaKeys keys = mla_keys<BLOCK_M, BLOCK_N>(p, row0, batch, work.split, work.num_splits);

    mla_load_q<T, BLOCK_M, THREADS>(p, row0, batch, [&](int r, int c) { return q_tile + mla_swizzled<BLOCK_M>(r, c); });
    auto load_tile = [&](int index, int stage) {
        unsigned char* tile = ring + stage * kTileBytes;
        mla_load_keys<T, BLOCK_N, THREADS, PAGE_SIZE>(p, keys, batch, (keys.first_tile + index) * BLOCK_N,
                                                      key_ok + stage * BLOCK_N,
                                                      [&](int r, int g, int j) {
                                                          return tile + j * BLOCK_N * 128 + r * 128 + ((g ^ (r % 8)) << 4);
                                                      });
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < keys.num_tiles) load_tile(s, s);
        cp_async_commit();
    }

    int row_end[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) row_end[h] = mla_row_end(p, keys, row0 + pair * 16 + lane / 4 + h * 8);

    float o[32][4];
#pragma unroll
    for (int j = 0; j < 32; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float(&o_flat)[128] = reinterpret_cast<float(&)[128]>(o);
    const unsigned long long q_desc = wgmma_descriptor_sw128(q_tile);

    // The tile loop, software-pipelined so that the tensor cores run P V of tile t and the scores of
    // tile t + 1 back to back while the CUDA cores do the exchange and softmax in between:
    //   wait (S_t, PV_{t-1}) -> exchange, softmax_t -> issue PV_t -> barrier (tile t + 1 landed,
    //   tile t - 1's stage free) -> copy tile t + STAGES - 1 into it -> issue S_{t+1}.
    unsigned pv[BLOCK_N / 16][4];
    float s[kBlocksN][4];
    float(&s_flat)[BLOCK_N / 2] = reinterpret_cast<float(&)[BLOCK_N / 2]>(s);
    // Waits until every thread's copies but the last `pending` groups have landed, and makes them
    // visible to the tensor cores' async proxy. Group k copies tile k.
    auto tile_ready = [&](auto pending) {
        cp_async_wait<decltype(pending)::value>();
        fence_proxy_async();
        __syncthreads();
    };
    auto issue_scores = [&](int stage) {
        const unsigned long long k_desc = wgmma_descriptor_sw128(ring + stage * kTileBytes);
        wgmma_fence();
        if (half == 0) mla_sm90_scores<T, BLOCK_N, 0>(s_flat, q_desc, k_desc);
        else mla_sm90_scores<T, BLOCK_N, 1>(s_flat, q_desc, k_desc);
        wgmma_commit();
    };
    if (keys.num_tiles > 0) {
        tile_ready(MlaConstant<STAGES - 2>{});  // tile 0 of the STAGES - 1 copied ahead
        issue_scores(0);
    }
    int stage = 0;
    for (int index = 0; index < keys.num_tiles; ++index) {
        const int n0 = (keys.first_tile + index) * BLOCK_N;
        wgmma_wait<0>();  // S of this tile, and P V of the previous one
        wgmma_fence_registers(s_flat);
        wgmma_fence_registers(o_flat);

        // The full scores: each warp adds the other warpgroup's partial sums for the same rows.
        mla_add_partner_scores(s, exchange, warp, warp ^ 4, 1 + pair);

        const bool mask = PAGE_SIZE > 0 || n0 + BLOCK_N > keys.full_end;
        mla_softmax_step<BLOCK_N, 32>(s, o, row_max, row_sum, mask, row_end, n0, key_ok + stage * BLOCK_N, p.scale_log2);

        // O += P V: P from registers (the accumulator layout is the A fragment layout), V = the first
        // 512 dims of the tile, N-major in boxes of 64 columns; this warpgroup's 4 boxes.
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) mla_p_fragment<T>(s, kk, pv[kk]);
        const unsigned long long v_desc =
            wgmma_descriptor_sw128_mn(ring + stage * kTileBytes + half * 4 * BLOCK_N * 128, BLOCK_N * 128);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) wgmma_rs_m64k16<T, 256, 1>(o_flat, pv[kk], v_desc + kk * 128, 1);
        wgmma_commit();

        stage = stage + 1 == STAGES ? 0 : stage + 1;
        if (index + 1 < keys.num_tiles) {
            // Every thread is past the previous tile's P V (waited above) and this tile's exchange:
            // the previous tile's stage and the exchange area are free.
            tile_ready(MlaConstant<STAGES - 3>{});  // tile index + 1: later tiles may still be in flight
            const int ahead = index + STAGES - 1;
            if (ahead < keys.num_tiles) load_tile(ahead, (stage + STAGES - 2) % STAGES);
            cp_async_commit();
            issue_scores(stage);
        }
    }
    wgmma_wait<0>();
    wgmma_fence_registers(o_flat);
    cp_async_wait<0>();
    mla_store_rows<T, BLOCK_M>(p, o, row_max, row_sum, row0, work, pair, half);
}

}  // namespace tileops
