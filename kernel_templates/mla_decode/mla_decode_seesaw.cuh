// MLA decode on sm_90a with the "seesaw" schedule (the one FlashMLA's 2025 kernel uses): two
// warpgroups, each computing the full 576-dim scores of its own 64-key tile (warpgroup 0 the even
// tiles of the split, warpgroup 1 the odd ones) and each owning half of the output (64 rows x 256
// columns, 128 fp32 registers a thread: warpgroup 0 columns 0..255, warpgroup 1 256..511). The
// softmax of a pair of tiles is sequential (0 then 1, sharing the running max through shared
// memory), and each P meets both halves of V: its own warpgroup's from registers, the other's
// through shared memory. So the tensor cores of one warpgroup run while the other one does its
// softmax, and nobody waits for a partial-score exchange (mla_decode_sm90.cuh's limit).
//
// One pair of tiles (t0 = 2i in buffer 0, t1 = 2i + 1 in buffer 1; S0, S1 already computed):
//   wg0: softmax(S0) with max m0 = max(m, rowmax S0), s0 = exp(m - m0); O_L = O_L s0 + P0 V0_L
//   wg1: softmax(S1) with m1 = max(m0, rowmax S1), s1 = exp(m0 - m1);   O_R = O_R s0 s1 + P1 V1_R
//   wg0: P0 *= s1, stored for wg1;                                       wg1: O_R += P0 V0_R
//   wg0: O_L = O_L s1 + P1 V1_L (P1 stored by wg1)
//   then each issues the scores of its next tile.
// Named barriers carry the hand-overs (kScale0Ready, kScale1Ready, kP0Ready, kP0V0RIssued).
//
// Loads: cp.async by the warpgroup that frees the part of a tile buffer last: the low dims
// (boxes 0..3: V_L and the first half of the scores) are reloaded by warpgroup 0 after its P V_L,
// the high dims (boxes 4..8: V_R, the second half and the rope dims) by warpgroup 1 after its
// P V_R. Each half-buffer has an mbarrier that its loader's 128 threads arrive on when their copies
// have landed (cp.async.mbarrier.arrive.noinc), so nobody waits at a block-wide barrier. A paged
// cache is gathered row by row, so every page size works.
//
// Shared memory (mla_launch in src/ops/mla_decode/mla_decode_config.cpp computes the same): 1024 bytes of
// alignment slack, Q's first 512 dims (8 boxes of 64 rows x 128 bytes; the 64 rope dims stay in
// registers: the last 4 score k-steps take A from registers), two key tiles of 9 boxes, two P
// tiles of 64 x 64, the running max and the two scale vectors (64 floats each), the two
// warpgroups' row sums (64 floats each) and 4 mbarriers. 231,712 bytes.
//
// Template parameters: T (__half or __nv_bfloat16), PAGE_SIZE tokens per page (0: contiguous KV).
#pragma once

#include "arch/hopper.cuh"
#include "arch/wgmma_rs.cuh"
#include "mla_decode/mla_decode_common.cuh"

namespace tileops {

constexpr int kSeesawRows = 64, kSeesawKeys = 64;
constexpr unsigned kSeesawBoxBytes = 64 * 128;                        // 64 rows of 64 dims
constexpr unsigned kSeesawQBytes = 8 * kSeesawBoxBytes;               // dims 0..511
constexpr unsigned kSeesawTileBytes = 9 * kSeesawBoxBytes;            // dims 0..575
constexpr unsigned kSeesawPBytes = kSeesawRows * kSeesawKeys * 2;     // one 128-byte swizzled box
// Named barriers (0 is __syncthreads), each met by both warpgroups (256 threads).
constexpr int kScale0Ready = 1, kScale1Ready = 2, kP0Ready = 3, kP0V0RIssued = 4;

// Byte offset of element (r, c) of a 64-row box of 128-byte rows with wgmma's 128-byte swizzle
// (the 16-byte chunk index XOR the row's index mod 8).
__device__ __forceinline__ unsigned seesaw_swizzled(int r, int c_bytes) {
    return static_cast<unsigned>(r * 128 + ((((c_bytes / 16) ^ (r % 8))) << 4) + c_bytes % 16);
}

// Where this thread's four key rows of the tile from n0 (row t / 8 + 16 i) lie. Tiles start at
// multiples of 64 keys, so a contiguous cache or pages of a multiple of 64 tokens hold the whole
// tile in one piece: then one offset serves every row (the element offset of key n0; -1 when its
// page lies outside the pool). Smaller pages keep each row's page table entry (-1 past kv_end).
// Read a pair of tiles ahead of the copies and checked only there, so that the page table's
// latency is not paid in between.
template <int PAGE_SIZE>
struct SeesawRowPages {
    static constexpr bool kWholeTile = PAGE_SIZE % kSeesawKeys == 0;
    int page[kWholeTile ? 1 : 4];  // pages smaller than a tile
    long long tile_base;           // whole tiles
};

template <int PAGE_SIZE>
__device__ __forceinline__ SeesawRowPages<PAGE_SIZE> seesaw_row_pages(const MlaDecodeArgs& p, const MlaKeys& k, int batch,
                                                                      int n0, int t) {
    SeesawRowPages<PAGE_SIZE> rp{};
    if constexpr (PAGE_SIZE == 0) {
        rp.tile_base = batch * p.kv_outer_stride + static_cast<long long>(n0) * p.kv_token_stride;
    } else if constexpr (SeesawRowPages<PAGE_SIZE>::kWholeTile) {
        const int page = n0 < k.kv_end ? __ldg(p.page_table + batch * p.page_table_stride + n0 / PAGE_SIZE) : -1;
        rp.tile_base = page >= 0 && page < p.num_pages
                           ? page * p.kv_outer_stride + static_cast<long long>(n0 % PAGE_SIZE) * p.kv_token_stride
                           : -1;
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int token = n0 + t / 8 + 16 * i;
            rp.page[i] = token < k.kv_end ? __ldg(p.page_table + batch * p.page_table_stride + token / PAGE_SIZE) : -1;
        }
    }
    return rp;
}

// Starts this warpgroup's cp.async copies of boxes [FIRST_BOX, LAST_BOX) of the keys n0 .. n0 + 63
// into `tile` and makes the mbarrier `landed` count this thread when they have landed (it expects
// 128 arrivals). Keys past kv_end or behind a page table entry outside the pool are zero-filled
// (the scores mask them). Eight threads share a key row (chunk g of each box), 16 rows at a time.
template <typename T, int PAGE_SIZE, int FIRST_BOX, int LAST_BOX>
__device__ __forceinline__ void seesaw_load_keys(const MlaDecodeArgs& p, const MlaKeys& k, int batch, int n0,
                                                 const SeesawRowPages<PAGE_SIZE>& rp, unsigned char* tile,
                                                 unsigned long long* landed, int t) {
    const T* kv = static_cast<const T*>(p.kv);
    const int g = t % 8;
#pragma unroll
    for (int i = 0; i < kSeesawKeys / 16; ++i) {
        const int r = t / 8 + 16 * i, token = n0 + r;
        bool valid;
        long long offset;
        if constexpr (SeesawRowPages<PAGE_SIZE>::kWholeTile) {
            valid = rp.tile_base >= 0 && token < k.kv_end;
            offset = rp.tile_base + static_cast<long long>(r) * p.kv_token_stride;
        } else {
            valid = rp.page[i] >= 0 && rp.page[i] < p.num_pages;
            offset = static_cast<long long>(rp.page[i]) * p.kv_outer_stride + (token % PAGE_SIZE) * p.kv_token_stride;
        }
        const T* src = valid ? kv + offset + g * 8 : kv;
#pragma unroll
        for (int box = FIRST_BOX; box < LAST_BOX; ++box)
            cp_async<16>(tile + box * kSeesawBoxBytes + seesaw_swizzled(r, g * 16), valid ? src + box * 64 : kv,
                         valid ? 16 : 0);
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(landed)) : "memory");
}

// Whether the pages behind the tile from n0 (up to kv_end) all lie inside the pool, for the mask.
// Pages smaller than a tile: their entries, spread over the warp's lanes (page n0 / PAGE_SIZE +
// lane + 32 j), for a warp vote. Whole tiles: the copies' own offset says it. Read a pair of tiles
// ahead and checked only in the mask, like the copies' pages.
template <int PAGE_SIZE>
struct SeesawTileEntries {
    // A tile spans at most 64 / PAGE_SIZE + 1 pages (one more when they do not divide 64).
    static constexpr int kPerLane = SeesawRowPages<PAGE_SIZE>::kWholeTile ? 1 : (kSeesawKeys / PAGE_SIZE + 32) / 32;
    int entry[kPerLane];  // whole tiles: 1 when the page lies inside the pool
};

// The last key of the tile from n0 that lies inside the cache (n0 - 1 when none does).
__device__ __forceinline__ int seesaw_last_key(const MlaKeys& k, int n0) { return min(n0 + kSeesawKeys, k.kv_end) - 1; }

template <int PAGE_SIZE>
__device__ __forceinline__ SeesawTileEntries<PAGE_SIZE> seesaw_tile_entries(const MlaDecodeArgs& p, const MlaKeys& k, int batch,
                                                                            int n0, int lane,
                                                                            const SeesawRowPages<PAGE_SIZE>& rows) {
    SeesawTileEntries<PAGE_SIZE> e{};
    if constexpr (SeesawRowPages<PAGE_SIZE>::kWholeTile) {
        e.entry[0] = rows.tile_base >= 0;
    } else {
        const int last_key = seesaw_last_key(k, n0);
#pragma unroll
        for (int j = 0; j < SeesawTileEntries<PAGE_SIZE>::kPerLane; ++j) {
            const int page = n0 / PAGE_SIZE + lane + 32 * j;
            e.entry[j] = last_key >= n0 && page <= last_key / PAGE_SIZE
                             ? __ldg(p.page_table + batch * p.page_table_stride + page) : 0;
        }
    }
    return e;
}

// Whether every page behind the tile's keys lies inside the pool (a warp vote for pages smaller than a tile).
template <int PAGE_SIZE>
__device__ __forceinline__ bool seesaw_tile_in_pool(const MlaDecodeArgs& p, const MlaKeys& k, int n0, int lane,
                                                    const SeesawTileEntries<PAGE_SIZE>& e) {
    if constexpr (PAGE_SIZE == 0) {
        return true;
    } else if constexpr (SeesawRowPages<PAGE_SIZE>::kWholeTile) {
        return e.entry[0] != 0;  // the same for the whole warp: no vote
    } else {
        const int last_key = seesaw_last_key(k, n0);
        bool in_pool = true;
#pragma unroll
        for (int j = 0; j < SeesawTileEntries<PAGE_SIZE>::kPerLane; ++j) {
            const bool behind_tile = last_key >= n0 && n0 / PAGE_SIZE + lane + 32 * j <= last_key / PAGE_SIZE;
            in_pool = in_pool && (!behind_tile || (e.entry[j] >= 0 && e.entry[j] < p.num_pages));
        }
        return __all_sync(0xffffffffu, in_pool);
    }
}

// Starts cp.async copies of Q's first 512 dims (64 rows, zeros past the problem's rows) into 8
// swizzled boxes.
template <typename T>
__device__ __forceinline__ void seesaw_load_q(const MlaDecodeArgs& p, int row0, int batch, unsigned char* q_tile) {
    const T* q = static_cast<const T*>(p.q);
    const int total_rows = p.q_len * p.num_heads;
    for (int idx = threadIdx.x; idx < kSeesawRows * 64; idx += 256) {
        const int r = idx / 64, chunk = idx % 64, row = row0 + r;
        const bool valid = row < total_rows;
        const T* src = valid ? q + batch * p.q_batch_stride + (row / p.num_heads) * p.q_token_stride +
                                   (row % p.num_heads) * p.q_head_stride + chunk * 8
                             : q;
        cp_async<16>(q_tile + (chunk / 8) * kSeesawBoxBytes + seesaw_swizzled(r, (chunk % 8) * 16), src, valid ? 16 : 0);
    }
}

// Whether key `key` of the split's sequence may be used: inside the cache and, when paged, behind
// a page table entry inside the pool (the loads zero-fill the others, the scores must skip them).
template <int PAGE_SIZE>
__device__ __forceinline__ bool seesaw_key_usable(const MlaDecodeArgs& p, const MlaKeys& k, int batch, int key) {
    if (key >= k.kv_end) return false;
    if constexpr (PAGE_SIZE > 0) {
        const int page = __ldg(p.page_table + batch * p.page_table_stride + key / PAGE_SIZE);
        return page >= 0 && page < p.num_pages;
    }
    return true;
}

// Issues the 36 k-steps of one warpgroup's scores S = Q K^T (64 rows x 64 keys) into s, as one
// wgmma group: dims 0..255 once the low boxes have landed, 256..511 once the high ones have, then
// the rope dims 512..575 with Q from registers.
template <typename T>
__device__ __forceinline__ void seesaw_scores(float (&s)[32], const unsigned char* q_tile, const unsigned (&q_rope)[4][4],
                                              const unsigned char* tile, unsigned long long* low_landed,
                                              unsigned long long* high_landed, unsigned parity) {
    mbarrier_wait(low_landed, parity);
    fence_proxy_async();  // the cp.async writes (generic proxy) before the tensor cores read them
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 32; ++kk) {
        if (kk == 16) {
            mbarrier_wait(high_landed, parity);
            fence_proxy_async();
        }
        const int box = kk / 4;
        const unsigned step = (kk % 4) * 2;  // 16 dims = 32 bytes, in the descriptor's 16-byte units
        wgmma_m64k16<T, 64, 0>(s, wgmma_descriptor_sw128(q_tile + box * kSeesawBoxBytes) + step,
                               wgmma_descriptor_sw128(tile + box * kSeesawBoxBytes) + step, kk > 0 ? 1 : 0);
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_m64k16<T, 64, 0>(s, q_rope[kk], wgmma_descriptor_sw128(tile + 8 * kSeesawBoxBytes) + kk * 2, 1);
    wgmma_commit();
}

// Masks the scores of one tile (keys n0 ..; the m64 accumulator layout: s[j][2h + e] is row
// 16 w + g + 8 h, key 8 j + 2 c + e) when some key is unusable or invisible to some row.
template <int PAGE_SIZE>
__device__ __forceinline__ void seesaw_mask(float (&s)[8][4], const MlaDecodeArgs& p, const MlaKeys& k, int batch, int n0,
                                            const int (&row_end)[2], int c, const SeesawTileEntries<PAGE_SIZE>& entries) {
    if (n0 + kSeesawKeys <= k.full_end && seesaw_tile_in_pool<PAGE_SIZE>(p, k, n0, static_cast<int>(threadIdx.x % 32), entries))
        return;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int key = n0 + 8 * j + 2 * c + e;
            const bool usable = seesaw_key_usable<PAGE_SIZE>(p, k, batch, key);
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (!usable || key >= row_end[h]) s[j][2 * h + e] = -INFINITY;
        }
}

// The new running max of this thread's two rows (after the other warpgroup's, read from
// row_max), written back by one thread of each quad; returns exp(old - new) per row in rescale.
__device__ __forceinline__ void seesaw_update_max(const float (&s)[8][4], float* row_max, float* scale_out, const int (&rows)[2],
                                                  float scale_log2, float (&new_max)[2], float (&rescale)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float old = row_max[rows[h]];
        new_max[h] = fmaxf(old, m);
        rescale[h] = attention_rescale(old, new_max[h], scale_log2);
    }
    __syncwarp();  // every lane has read the old max before one lane of each quad replaces it
    if (threadIdx.x % 4 == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) row_max[rows[h]] = new_max[h], scale_out[rows[h]] = rescale[h];
    }
}

// s becomes exp2(s * scale_log2 - shift(new_max)); returns this thread's part of each row's sum.
__device__ __forceinline__ void seesaw_exponentiate(float (&s)[8][4], const float (&new_max)[2], float scale_log2,
                                                    float (&sum)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float shift = attention_shift(new_max[h], scale_log2);
        sum[h] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
                s[j][e] = fast_exp2(fmaf(s[j][e], scale_log2, -shift));
                sum[h] += s[j][e];
            }
    }
}

// Scales this thread's two rows of O (m64 accumulator layout: o[4 j], o[4 j + 1] row g, the
// other two row g + 8).
__device__ __forceinline__ void seesaw_scale_rows(float (&o)[128], float row_g, float row_g8) {
#pragma unroll
    for (int j = 0; j < 32; ++j) o[4 * j] *= row_g, o[4 * j + 1] *= row_g, o[4 * j + 2] *= row_g8, o[4 * j + 3] *= row_g8;
}

// Stores P (64 x 64, 16-bit) in the K-major 128-byte swizzled layout wgmma reads A from.
template <typename T>
__device__ __forceinline__ void seesaw_store_p(const float (&s)[8][4], unsigned char* p_tile, int r0, int c) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *reinterpret_cast<unsigned*>(p_tile + seesaw_swizzled(r0 + 8 * h, (8 * j + 2 * c) * 2)) =
                pack_pair<T>(s[j][2 * h], s[j][2 * h + 1]);
    fence_proxy_async();  // for the other warpgroup's wgmma
}

// O (64 x 256) += P V_half, P from registers (this warpgroup's softmax), V the tile's boxes
// 4 half .. 4 half + 3 read N-major.
template <typename T>
__device__ __forceinline__ void seesaw_pv_local(float (&o)[128], const float (&s)[8][4], const unsigned char* tile, int half) {
    unsigned a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mla_p_fragment<T>(s, kk, a[kk]);
    const unsigned long long v = wgmma_descriptor_sw128_mn(tile + half * 4 * kSeesawBoxBytes, kSeesawBoxBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64k16<T, 256, 1>(o, a[kk], v + kk * 128, 1);
    wgmma_commit();
}

// O (64 x 256) += P V_half with P from shared memory (the other warpgroup's).
template <typename T>
__device__ __forceinline__ void seesaw_pv_remote(float (&o)[128], const unsigned char* p_tile, const unsigned char* tile, int half) {
    const unsigned long long a = wgmma_descriptor_sw128(p_tile);
    const unsigned long long v = wgmma_descriptor_sw128_mn(tile + half * 4 * kSeesawBoxBytes, kSeesawBoxBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64k16<T, 256, 1>(o, a + kk * 2, v + kk * 128, 1);
    wgmma_commit();
}

template <typename T, int PAGE_SIZE>
__global__ void __launch_bounds__(256, 1) mla_decode_seesaw_kernel(const MlaDecodeArgs p) {
    extern __shared__ unsigned char seesaw_shared_raw[];
    unsigned char* base = seesaw_shared_raw + ((1024 - (shared_address(seesaw_shared_raw) & 1023)) & 1023);
    unsigned char* q_tile = base;
    unsigned char* tiles = q_tile + kSeesawQBytes;                      // two key tiles
    unsigned char* p_tiles = tiles + 2 * kSeesawTileBytes;              // P0, P1
    float* row_max = reinterpret_cast<float*>(p_tiles + 2 * kSeesawPBytes);
    float* scale0 = row_max + kSeesawRows;
    float* scale1 = scale0 + kSeesawRows;
    float* row_sums = scale1 + kSeesawRows;                             // [2][64]: each warpgroup's
    unsigned long long* landed = reinterpret_cast<unsigned long long*>(row_sums + 2 * kSeesawRows);  // [buffer][low, high]

    const KvChunk work = mla_work<kSeesawRows, kSeesawKeys>(p);
    if (!work.active) return;
    const int row0 = work.column * kSeesawRows, batch = work.batch;
    // The warpgroup, read from lane 0 so that the compiler knows it is the same for the whole warp
    // (a branch on threadIdx.x / 128 counts as divergent and serializes the wgmmas in it).
    const int half = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0), t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32, g = lane / 4, c = lane % 4;
    const int rows[2] = {16 * warp + g, 16 * warp + g + 8};
    const MlaKeys keys = mla_keys<kSeesawRows, kSeesawKeys>(p, row0, batch, work.split, work.num_splits);
    const int pairs = (keys.num_tiles + 1) / 2;
    auto tile_key0 = [&](int index) { return (keys.first_tile + index) * kSeesawKeys; };

    if (threadIdx.x == 0) {
        for (int i = 0; i < 4; ++i) mbarrier_init(&landed[i], 128);
        fence_barrier_init();
    }
    if (threadIdx.x < kSeesawRows) row_max[threadIdx.x] = -INFINITY;
    // Q's first 512 dims into shared memory (zeros past the problem's rows), the rope dims of
    // this thread's A fragments into registers: a[0] = (g, 2c), a[1] = (g + 8, 2c), a[2] = (g, 2c + 8),
    // a[3] = (g + 8, 2c + 8) of k-step kk's 16 dims.
    seesaw_load_q<T>(p, row0, batch, q_tile);
    cp_async_commit();
    unsigned q_rope[4][4];
    {
        const T* q = static_cast<const T*>(p.q);
        const int total_rows = p.q_len * p.num_heads;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + rows[h];
            const T* src = q + batch * p.q_batch_stride + (row / p.num_heads) * p.q_token_stride +
                           (row % p.num_heads) * p.q_head_stride + kMlaValueDim + 2 * c;
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
#pragma unroll
                for (int hi = 0; hi < 2; ++hi)
                    q_rope[kk][h + 2 * hi] = row < total_rows ? *reinterpret_cast<const unsigned*>(src + 16 * kk + 8 * hi) : 0u;
        }
    }
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // Q, the barriers and the running max are ready for everyone

    // The first pair's tiles: warpgroup 0 loads the low boxes of both, warpgroup 1 the high ones.
    for (int b = 0; b < 2 && b < keys.num_tiles; ++b) {
        const SeesawRowPages<PAGE_SIZE> pages = seesaw_row_pages<PAGE_SIZE>(p, keys, batch, tile_key0(b), t);
        if (half == 0) seesaw_load_keys<T, PAGE_SIZE, 0, 4>(p, keys, batch, tile_key0(b), pages, tiles + b * kSeesawTileBytes, &landed[2 * b], t);
        else seesaw_load_keys<T, PAGE_SIZE, 4, 9>(p, keys, batch, tile_key0(b), pages, tiles + b * kSeesawTileBytes, &landed[2 * b + 1], t);
    }

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float sum[2] = {0.0f, 0.0f};  // this thread's part of its rows' sums, at the current max
    int row_end[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) row_end[h] = mla_row_end(p, keys, row0 + rows[h]);
    float s[8][4];
    float(&s_flat)[32] = reinterpret_cast<float(&)[32]>(s);
    unsigned char* my_tile = tiles + half * kSeesawTileBytes;      // tile 2i + half of each pair
    unsigned char* other_tile = tiles + (1 - half) * kSeesawTileBytes;
    // Scores of a tile this warpgroup does not have (an odd tile count): fully masked.
    auto no_scores = [&]() {
#pragma unroll
        for (int i = 0; i < 32; ++i) s_flat[i] = -INFINITY;
    };
    // The scores of the tile in this warpgroup's buffer (its copies' mbarrier phase `parity`),
    // waited for; fully masked when the warpgroup has no tile.
    auto scores_of_my_tile = [&](bool have_tile, unsigned parity) {
        if (have_tile) {
            seesaw_scores<T>(s_flat, q_tile, q_rope, my_tile, &landed[2 * half], &landed[2 * half + 1], parity);
            wgmma_wait<0>();
            wgmma_fence_registers(s_flat);
        } else {
            no_scores();
        }
    };
    scores_of_my_tile(half < keys.num_tiles, 0);

    // The page table entries behind this warpgroup's current tile (for the mask).
    SeesawTileEntries<PAGE_SIZE> entries = seesaw_tile_entries<PAGE_SIZE>(
        p, keys, batch, tile_key0(half), lane, seesaw_row_pages<PAGE_SIZE>(p, keys, batch, tile_key0(half), t));
    for (int pair = 0; pair < pairs; ++pair) {
        const int index = 2 * pair + half;  // this warpgroup's tile; the other's is 2 pair + 1 - half
        const bool have = index < keys.num_tiles, other_have = 2 * pair + 1 - half < keys.num_tiles;
        const int n0 = tile_key0(index);
        if (have) seesaw_mask<PAGE_SIZE>(s, p, keys, batch, n0, row_end, c, entries);
        float new_max[2], rescale[2], tile_sum[2];
        const unsigned next_parity = static_cast<unsigned>(pair + 1) & 1u;
        // The next tiles of this warpgroup's buffer (index + 2) and of the other buffer (the other
        // warpgroup's next: 2 pair + 3 - half), whose low (warpgroup 0) or high (1) boxes this one loads.
        const int other_next = 2 * pair + 3 - half;
        const bool next_mine = index + 2 < keys.num_tiles, next_other = other_next < keys.num_tiles;
        // The page table entries of both next tiles, read now so that their latency hides behind the softmax.
        const SeesawRowPages<PAGE_SIZE> mine_pages = seesaw_row_pages<PAGE_SIZE>(p, keys, batch, tile_key0(index + 2), t);
        const SeesawRowPages<PAGE_SIZE> other_pages = seesaw_row_pages<PAGE_SIZE>(p, keys, batch, tile_key0(other_next), t);
        entries = seesaw_tile_entries<PAGE_SIZE>(p, keys, batch, tile_key0(index + 2), lane, mine_pages);
        if (half == 0) {
            // Softmax of S0 against the running max; O_L and the sum follow the new max.
            seesaw_update_max(s, row_max, scale0, rows, p.scale_log2, new_max, rescale);
            seesaw_exponentiate(s, new_max, p.scale_log2, tile_sum);
#pragma unroll
            for (int h = 0; h < 2; ++h) sum[h] = sum[h] * rescale[h] + tile_sum[h];
            seesaw_scale_rows(o, rescale[0], rescale[1]);
            named_barrier_arrive(kScale0Ready, 256);
            seesaw_pv_local<T>(o, s, my_tile, 0);  // O_L += P0 V0_L
            wgmma_wait<0>();
            wgmma_fence_registers(o);
            // Buffer 0's low boxes are done with (S0 and V0_L were their only readers): tile 2i + 2.
            if (next_mine) seesaw_load_keys<T, PAGE_SIZE, 0, 4>(p, keys, batch, tile_key0(index + 2), mine_pages, my_tile, &landed[0], t);
            // P0 follows warpgroup 1's max (s1), for its P0 V0_R.
            named_barrier_sync(kScale1Ready, 256);
            const float s1[2] = {scale1[rows[0]], scale1[rows[1]]};
#pragma unroll
            for (int j = 0; j < 8; ++j) s[j][0] *= s1[0], s[j][1] *= s1[0], s[j][2] *= s1[1], s[j][3] *= s1[1];
            seesaw_store_p<T>(s, p_tiles, rows[0], c);
            named_barrier_arrive(kP0Ready, 256);
            // Once warpgroup 1 has stored P1 (it has by the time it issues P0 V0_R): O_L = O_L s1 + P1 V1_L.
            named_barrier_sync(kP0V0RIssued, 256);
            seesaw_scale_rows(o, s1[0], s1[1]);
#pragma unroll
            for (int h = 0; h < 2; ++h) sum[h] *= s1[h];
            if (other_have) seesaw_pv_remote<T>(o, p_tiles + kSeesawPBytes, other_tile, 0);
            wgmma_wait<0>();  // P1 V1_L: buffer 1's low boxes are free (S1 read them before)
            wgmma_fence_registers(o);
            // Their copies go out before the next scores, which may wait for buffer 0's high boxes:
            // warpgroup 1's next scores need these sooner.
            if (next_other)
                seesaw_load_keys<T, PAGE_SIZE, 0, 4>(p, keys, batch, tile_key0(other_next), other_pages, other_tile, &landed[2], t);
        } else {
            // Softmax of S1 against warpgroup 0's new max; O_R follows both rescales.
            named_barrier_sync(kScale0Ready, 256);
            seesaw_update_max(s, row_max, scale1, rows, p.scale_log2, new_max, rescale);
            seesaw_exponentiate(s, new_max, p.scale_log2, tile_sum);
            const float s0[2] = {scale0[rows[0]], scale0[rows[1]]};
            named_barrier_arrive(kScale1Ready, 256);
#pragma unroll
            for (int h = 0; h < 2; ++h) sum[h] = sum[h] * s0[h] * rescale[h] + tile_sum[h];
            seesaw_scale_rows(o, s0[0] * rescale[0], s0[1] * rescale[1]);
            seesaw_store_p<T>(s, p_tiles + kSeesawPBytes, rows[0], c);  // P1, for warpgroup 0's P1 V1_L
            if (have) seesaw_pv_local<T>(o, s, my_tile, 1);             // O_R += P1 V1_R
            named_barrier_sync(kP0Ready, 256);
            seesaw_pv_remote<T>(o, p_tiles, other_tile, 1);              // O_R += P0 V0_R
            named_barrier_arrive(kP0V0RIssued, 256);
            // Both P Vs done: buffer 0's high boxes first (warpgroup 0's next scores wait for them
            // sooner than this warpgroup's wait for buffer 1's), then buffer 1's.
            wgmma_wait<0>();
            wgmma_fence_registers(o);
            if (next_other)
                seesaw_load_keys<T, PAGE_SIZE, 4, 9>(p, keys, batch, tile_key0(other_next), other_pages, other_tile, &landed[1], t);
            if (next_mine) seesaw_load_keys<T, PAGE_SIZE, 4, 9>(p, keys, batch, tile_key0(index + 2), mine_pages, my_tile, &landed[3], t);
        }
        scores_of_my_tile(next_mine, next_parity);  // each warpgroup's next tile, for the next pair
    }

    // Each warpgroup's sums are at the final max now (warpgroup 0 rescaled by s1 last, 1 by both):
    // add the other's per row, and store this warpgroup's 256 columns.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float total = sum[h];
        total += __shfl_xor_sync(0xffffffffu, total, 1);
        total += __shfl_xor_sync(0xffffffffu, total, 2);
        if (c == 0) row_sums[half * kSeesawRows + rows[h]] = total;
    }
    __syncthreads();
    float final_max[2], final_sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        final_max[h] = row_max[rows[h]];
        // mla_store_rows adds the quad's four values: this thread's part, plus the other
        // warpgroup's whole row once.
        final_sum[h] = sum[h] + (c == 0 ? row_sums[(1 - half) * kSeesawRows + rows[h]] : 0.0f);
    }
    mla_store_rows<T, kSeesawRows>(p, reinterpret_cast<const float(&)[32][4]>(o), final_max, final_sum, row0, work, warp,
                                   half);
}

}  // namespace tileops
