// Multi-head latent attention (DeepSeek MLA) decode: every query head of a sequence attends to one
// shared latent KV head of 576 dims (512 latent + 64 rope); the output is the first 512 dims.
//
//   o[b, i, h] = softmax_j(scale * q[b, i, h] . kv[b, j]) kv[b, j, :512]
//   over the keys j <= len[b] - q_len + i (query token i of q_len sits at position len - q_len + i).
//
// A row is one (query token, query head) pair: row = token * num_heads + head. With one KV head
// for all heads, the rows of a sequence form the M dimension of two matrix products per key tile
// (S = Q K^T over 576 dims, O += P V over 512), which run on the tensor cores (mma.sync m16n8k16).
//
// One CTA = (split, row block of BLOCK_M rows, batch). Warps come in pairs per 16 rows: warp
// `half` of a pair computes the scores over its half of the 576 dims (288) for all BLOCK_N keys of
// the tile, the pair adds its partial scores through shared memory, both run the same online
// softmax on the full scores (so P stays in registers as the A operand), and each accumulates its
// half of the 512 output columns (16 x 256 fp32: 128 registers a thread). K and V are the same
// shared-memory tile (V = the first 512 dims of K), streamed with cp.async through a ring of
// STAGES tiles, one barrier per tile.
//
// Splits (flash decoding): the key tiles of a sequence are divided among gridDim.x CTAs; each
// writes its normalized partial output and natural-log lse to the workspace and the last to
// finish (an atomic counter per (batch, row block), reset by that CTA) merges them.
//
// Template parameters: T (q, kv and out: __half or __nv_bfloat16), BLOCK_M rows per CTA (16, 32
// or 64: 2 * BLOCK_M / 16 warps), BLOCK_N keys per tile (16, 32 or 64), STAGES key tiles in the
// ring, PAGE_SIZE tokens per page (0: contiguous KV).
//
// Dynamic shared memory (mla_shared_bytes in src/ops/mla_decode_config.cpp computes the same):
// Q tile BLOCK_M rows + ring STAGES * BLOCK_N rows of kMlaRowElems elements, the pair exchange
// (WARPS * BLOCK_N * 16 floats), and STAGES * BLOCK_N key flags.
#pragma once

#include "common/attention.cuh"
#include "common/mma_sm80.cuh"
#include "common/types.cuh"

namespace tileops {

constexpr int kMlaValueDim = 512;  // latent dims: the values and the output
constexpr int kMlaKeyDim = 576;    // latent + rope dims: the queries and keys
// Shared-memory rows are padded by 16 bytes: 73 16-byte chunks, so the 8 rows one ldmatrix reads at
// the same column fall into 8 different bank groups (576 is not a power of two: no XOR swizzle).
constexpr int kMlaRowElems = kMlaKeyDim + 8;
constexpr int kMlaRowBytes = kMlaRowElems * 2;

// The same layout as MlaDecodeKernelArgs in src/ops/mla_decode.cpp.
struct MlaDecodeArgs {
    const void* q;               // [batch, q_len, num_heads, 576] with strides
    const void* kv;              // [batch, max_kv_len, 576] or paged [num_pages, page_size, 576]
    const int* lengths;          // [batch]
    const int* page_table;       // [batch, page_table_stride] (paged)
    void* out;                   // [batch, q_len, num_heads, 512] with strides
    float* lse;                  // [batch, q_len, num_heads] or null
    float* workspace;            // splits: partial outputs, their lse, counters
    long long q_batch_stride, q_token_stride, q_head_stride;
    long long kv_outer_stride, kv_token_stride;  // outer: between sequences, or pages when paged
    long long page_table_stride;
    long long o_batch_stride, o_token_stride, o_head_stride;
    int num_heads, q_len, num_pages, max_kv_len;
    float scale_log2;            // softmax scale * log2(e)
    float scale;
};

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

// Waits for the other warp of this warp's pair (64 threads) at named barrier `id` (1..4; 0 is
// __syncthreads).
__device__ __forceinline__ void mla_pair_barrier(int id) { asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory"); }

template <typename T, int BLOCK_M, int BLOCK_N, int STAGES, int PAGE_SIZE>
__global__ void __launch_bounds__(BLOCK_M / 16 * 64, 1) mla_decode_kernel(const MlaDecodeArgs p) {
    static_assert(BLOCK_M == 16 || BLOCK_M == 32 || BLOCK_M == 64, "BLOCK_M is 16, 32 or 64");
    static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64, "BLOCK_N is 16, 32 or 64");
    static_assert(STAGES >= 2, "at least two stages");
    constexpr int WARPS = BLOCK_M / 16 * 2, THREADS = WARPS * 32;
    constexpr int kChunks = kMlaKeyDim / 8;          // 16-byte chunks of a row: 72
    constexpr int kHalfChunks = kChunks / 2;         // the score dims of one warp of a pair: 36 chunks
    constexpr int kBlocksN = BLOCK_N / 8;            // score accumulators of 16 x 8
    constexpr int kBlocksV = kMlaValueDim / 2 / 8;   // output accumulators of 16 x 8: 32
    constexpr unsigned kTileBytes = BLOCK_N * kMlaRowBytes;

    extern __shared__ __align__(128) unsigned char mla_shared[];
    T* q_tile = reinterpret_cast<T*>(mla_shared);
    T* ring = q_tile + BLOCK_M * kMlaRowElems;
    float4* exchange = reinterpret_cast<float4*>(ring + STAGES * BLOCK_N * kMlaRowElems);
    unsigned char* key_ok = reinterpret_cast<unsigned char*>(exchange + WARPS * kBlocksN * 32);

    const int split = blockIdx.x, num_splits = gridDim.x;
    const int row0 = blockIdx.y * BLOCK_M, batch = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int pair = warp / 2, half = warp % 2;
    const int quad_row = lane / 4, quad_col = (lane % 4) * 2;
    const int total_rows = p.q_len * p.num_heads;
    const T* q = static_cast<const T*>(p.q);
    const T* kv = static_cast<const T*>(p.kv);

    // Lengths past the cache's capacity are clamped so that no read leaves it.
    int len = p.lengths[batch];
    len = len < 0 ? 0 : len > p.max_kv_len ? p.max_kv_len : len;
    // Keys the block's last row sees (the most of any row), and those its first row sees (every row).
    const int last_row = min(row0 + BLOCK_M, total_rows) - 1;
    const int kv_end = max(0, len - p.q_len + last_row / p.num_heads + 1);
    const int full_end = max(0, len - p.q_len + row0 / p.num_heads + 1);
    const int tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;
    const int tiles_per_split = (tiles + num_splits - 1) / num_splits;
    const int first_tile = split * tiles_per_split;
    const int num_tiles = max(0, min(tiles, first_tile + tiles_per_split) - first_tile);

    // Q rows (zeros past the problem's rows), copied with the first key tile.
    for (int idx = threadIdx.x; idx < BLOCK_M * kChunks; idx += THREADS) {
        const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
        const bool valid = row < total_rows;
        const T* src = valid ? q + batch * p.q_batch_stride + (row / p.num_heads) * p.q_token_stride +
                                   (row % p.num_heads) * p.q_head_stride + c * 8
                             : q;
        cp_async<16>(q_tile + r * kMlaRowElems + c * 8, src, valid ? 16 : 0);
    }
    // Starts the copy of key tile `index` (of this split) into ring stage `stage`; keys past kv_end
    // or behind a page table entry outside [0, num_pages) are zero-filled and flagged unusable.
    const int* pages = PAGE_SIZE > 0 ? p.page_table + batch * p.page_table_stride : nullptr;
    auto load_tile = [&](int index, int stage) {
        const int n0 = (first_tile + index) * BLOCK_N;
        T* tile = ring + stage * BLOCK_N * kMlaRowElems;
        for (int idx = threadIdx.x; idx < BLOCK_N * kChunks; idx += THREADS) {
            const int r = idx / kChunks, c = idx % kChunks, token = n0 + r;
            bool valid = token < kv_end;
            long long offset;
            if constexpr (PAGE_SIZE > 0) {
                const int page = valid ? __ldg(pages + token / PAGE_SIZE) : 0;
                valid = valid && page >= 0 && page < p.num_pages;
                offset = static_cast<long long>(page) * p.kv_outer_stride + (token % PAGE_SIZE) * p.kv_token_stride;
            } else {
                offset = batch * p.kv_outer_stride + static_cast<long long>(token) * p.kv_token_stride;
            }
            cp_async<16>(tile + r * kMlaRowElems + c * 8, valid ? kv + offset + c * 8 : kv, valid ? 16 : 0);
            if (c == 0) key_ok[stage * BLOCK_N + r] = valid;
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < num_tiles) load_tile(s, s);
        cp_async_commit();
    }

    // Per-lane ldmatrix bases: lanes 0-15 address rows 0-15 of a 16-row block at a chunk, lanes
    // 16-31 the same rows at the next chunk.
    const unsigned lane_offset = static_cast<unsigned>((lane % 16) * kMlaRowBytes + (lane / 16) * 16);
    const unsigned q_base = shared_address(q_tile) + pair * 16 * kMlaRowBytes + lane_offset + half * kHalfChunks * 16;
    const unsigned ring_base = shared_address(ring) + lane_offset;

    // This thread's rows (quad_row and quad_row + 8 of the pair's 16) and the keys they see.
    int row_end[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + pair * 16 + quad_row + h * 8;
        row_end[h] = row < total_rows ? max(0, len - p.q_len + row / p.num_heads + 1) : kv_end;
    }

    float o[kBlocksV][4];
#pragma unroll
    for (int j = 0; j < kBlocksV; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

    int stage = 0;
    for (int index = 0; index < num_tiles; ++index) {
        const int n0 = (first_tile + index) * BLOCK_N;
        // This tile has landed for every thread, and every warp is done with the previous tile: its
        // stage (the one the next copy fills) is free, and so is the exchange area.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int ahead = index + STAGES - 1;
            if (ahead < num_tiles) load_tile(ahead, (stage + STAGES - 1) % STAGES);
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
        // The pair's full scores: each adds the other's partial sums (the same fragment layout).
#pragma unroll
        for (int j = 0; j < kBlocksN; ++j)
            exchange[(warp * kBlocksN + j) * 32 + lane] = make_float4(s[j][0], s[j][1], s[j][2], s[j][3]);
        mla_pair_barrier(1 + pair);
#pragma unroll
        for (int j = 0; j < kBlocksN; ++j) {
            const float4 other = exchange[((warp ^ 1) * kBlocksN + j) * 32 + lane];
            s[j][0] += other.x, s[j][1] += other.y, s[j][2] += other.z, s[j][3] += other.w;
        }

        // Masks: keys past a row's causal end, or unusable (past the cache, bad page).
        const bool paged_tile = PAGE_SIZE > 0;
        if (paged_tile || n0 + BLOCK_N > full_end) {
#pragma unroll
            for (int j = 0; j < kBlocksN; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int local = j * 8 + quad_col + e, key = n0 + local;
                    const bool ok = key_ok[stage * BLOCK_N + local] != 0;
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        if (!ok || key >= row_end[h]) s[j][2 * h + e] = -INFINITY;
                }
        }

        // Online softmax (both warps of the pair compute the same numbers).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float m = row_max[h];
#pragma unroll
            for (int j = 0; j < kBlocksN; ++j) m = fmaxf(m, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            const float rescale = attention_rescale(row_max[h], m, p.scale_log2);
            row_max[h] = m;
            const float shift = attention_shift(m, p.scale_log2);
            float sum = row_sum[h] * rescale;
#pragma unroll
            for (int j = 0; j < kBlocksN; ++j)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    const float x = fast_exp2(fmaf(s[j][e], p.scale_log2, -shift));
                    s[j][e] = x;
                    sum += x;
                }
            row_sum[h] = sum;
#pragma unroll
            for (int j = 0; j < kBlocksV; ++j) {
                o[j][2 * h] *= rescale;
                o[j][2 * h + 1] *= rescale;
            }
        }

        // O += P V over this warp's 256 output columns; P's A fragments are the score accumulators.
        const unsigned v_base = ring_base + stage * kTileBytes + half * (kMlaValueDim / 2) * 2;
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            unsigned pf[4];
            pf[0] = pack_pair<T>(s[2 * kk][0], s[2 * kk][1]);
            pf[1] = pack_pair<T>(s[2 * kk][2], s[2 * kk][3]);
            pf[2] = pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pf[3] = pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
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

    // Finish the rows: the quad's sums, the normalized output and the natural-log lse.
    float inverse[2], row_lse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = row_sum[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inverse[h] = sum > 0.0f ? 1.0f / sum : 0.0f;
        row_lse[h] = attention_lse(row_max[h], sum, p.scale);
    }
    const int col0 = half * (kMlaValueDim / 2) + quad_col;
    T* out = static_cast<T*>(p.out);
    auto out_row = [&](int row) {
        return out + batch * p.o_batch_stride + (row / p.num_heads) * p.o_token_stride + (row % p.num_heads) * p.o_head_stride;
    };
    if (num_splits == 1) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + pair * 16 + quad_row + h * 8;
            if (row >= total_rows) continue;
            T* dst = out_row(row) + col0;
#pragma unroll
            for (int j = 0; j < kBlocksV; ++j)
                *reinterpret_cast<unsigned*>(dst + j * 8) = pack_pair<T>(o[j][2 * h] * inverse[h], o[j][2 * h + 1] * inverse[h]);
            if (p.lse != nullptr && half == 0 && lane % 4 == 0)
                p.lse[static_cast<long long>(batch) * total_rows + row] = row_lse[h];
        }
        return;
    }

    // Splits. Workspace: partial outputs [slots][splits][BLOCK_M][512], their lse
    // [slots][splits][BLOCK_M], then a counter per slot; a slot is a (batch, row block).
    const long long slot = static_cast<long long>(batch) * gridDim.y + blockIdx.y;
    const long long partial_rows = static_cast<long long>(num_splits) * gridDim.y * gridDim.z * BLOCK_M;
    float* partial_out = p.workspace;
    float* partial_lse = p.workspace + partial_rows * kMlaValueDim;
    unsigned* counters = reinterpret_cast<unsigned*>(partial_lse + partial_rows);
    const long long slot_rows = slot * num_splits * BLOCK_M;  // the slot's first partial row
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int local = pair * 16 + quad_row + h * 8;
        const long long at = slot_rows + static_cast<long long>(split) * BLOCK_M + local;
        float* dst = partial_out + at * kMlaValueDim + col0;
#pragma unroll
        for (int j = 0; j < kBlocksV; ++j)
            *reinterpret_cast<float2*>(dst + j * 8) = make_float2(o[j][2 * h] * inverse[h], o[j][2 * h + 1] * inverse[h]);
        if (half == 0 && lane % 4 == 0) partial_lse[at] = row_lse[h];
    }

    // The last CTA of this slot to finish merges the splits.
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned done = atomicAdd(&counters[slot], 1u);
        is_last = done == static_cast<unsigned>(num_splits - 1);
        if (is_last) counters[slot] = 0;  // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();

    // Weights per (row, split) through shared memory (the ring is free now), then each output
    // element as a weighted sum of independent loads.
    float* weights = reinterpret_cast<float*>(mla_shared);     // [BLOCK_M][num_splits]
    float* merged_lse = weights + BLOCK_M * num_splits;          // [BLOCK_M]
    for (int i = threadIdx.x; i < BLOCK_M * num_splits; i += THREADS) {
        const int r = i / num_splits, s = i % num_splits;
        weights[i] = __ldcg(partial_lse + slot_rows + static_cast<long long>(s) * BLOCK_M + r);
    }
    __syncthreads();
    for (int r = warp; r < BLOCK_M; r += WARPS) {
        float m = -INFINITY;
        for (int s = lane; s < num_splits; s += 32) m = fmaxf(m, weights[r * num_splits + s]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
        const float base = m == -INFINITY ? 0.0f : m;
        float sum = 0.0f;
        for (int s = lane; s < num_splits; s += 32) sum += __expf(weights[r * num_splits + s] - base);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        __syncwarp();
        for (int s = lane; s < num_splits; s += 32)
            weights[r * num_splits + s] = __expf(weights[r * num_splits + s] - base) * inv;
        if (lane == 0) merged_lse[r] = sum > 0.0f ? base + __logf(sum) : -INFINITY;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < BLOCK_M * (kMlaValueDim / 2); idx += THREADS) {
        const int r = idx / (kMlaValueDim / 2), c = (idx % (kMlaValueDim / 2)) * 2, row = row0 + r;
        if (row >= total_rows) continue;
        const float* w = weights + r * num_splits;
        const float* part = partial_out + (slot_rows + r) * kMlaValueDim + c;
        float x = 0.0f, y = 0.0f;
#pragma unroll 4
        for (int s = 0; s < num_splits; ++s) {
            const float2 v = __ldcg(reinterpret_cast<const float2*>(part + static_cast<long long>(s) * BLOCK_M * kMlaValueDim));
            x += w[s] * v.x;
            y += w[s] * v.y;
        }
        *reinterpret_cast<unsigned*>(out_row(row) + c) = pack_pair<T>(x, y);
        if (p.lse != nullptr && c == 0) p.lse[static_cast<long long>(batch) * total_rows + row] = merged_lse[r];
    }
}

}  // namespace tileops
