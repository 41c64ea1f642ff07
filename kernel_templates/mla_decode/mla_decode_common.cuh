// What the MLA decode kernels (mla_decode_sm80.cuh, mla_decode_sm90.cuh) share: the argument block,
// which keys a block works on, the copies of query rows and key tiles into shared memory, the
// store of finished rows (or of split partial results), and the kernel that merges the splits.
//
//   o[b, i, h] = softmax_j(scale * q[b, i, h] . kv[b, j]) kv[b, j, :512]
//   over the keys j <= len[b] - q_len + i (query token i of q_len sits at position len - q_len + i).
//
// A row is one (query token, query head) pair: row = token * num_heads + head. With one KV head
// for all heads, the rows of a sequence are the M dimension of two matrix products per key tile
// (S = Q K^T over 576 dims, O += P V over 512), which run on the tensor cores.
//
// Both kernels give each 16 rows two warps (sm_90: warp w of each of two warpgroups): `half` 0 and
// 1 split the 576 score dims (288 each) and the 512 output columns (256 each); the two add their
// partial scores through shared memory and run the same online softmax on the full scores.
//
// Splits (flash decoding): at batch 1 the key tiles of the sequence are divided among the splits
// (grid (splits, row blocks, 1)); for a batch (p.balanced, grid (row blocks, splits + 1, batch)),
// the lengths cut the batch's keys into about batch x splits chunks of equal tokens, a sequence
// as many as its keys fill (common/kv_chunks.cuh), so a
// long sequence among short ones is spread over the SMs. Each CTA of a split sequence writes its
// normalized partial output and natural-log lse to the workspace, by chunk number, and a
// follow-up kernel (mla_merge_kernel, one block per row) merges them; the first chunk's CTA
// notes where a sequence's chunks are (mla_sequence_chunks), so the merge does not search for them.
#pragma once

#include "arch/mma_sm80.cuh"
#include "common/attention.cuh"
#include "common/kv_chunks.cuh"
#include "common/types.cuh"
#include "mla_decode/mla_decode_args.cuh"

namespace tileops {

constexpr int kMlaValueDim = 512;  // latent dims: the values and the output
constexpr int kMlaKeyDim = 576;    // latent + rope dims: the queries and keys
constexpr int kMlaChunks = kMlaKeyDim / 8;  // 16-byte chunks of a row: 72
constexpr int kMlaMaxSplits = 256;          // per sequence: the merge kernel's weights in shared memory


// The keys of the block at rows [row0, row0 + BLOCK_M) of `batch`, and this split's key tiles.
struct MlaKeys {
    int len;         // the sequence's cached tokens (clamped to the cache)
    int kv_end;      // keys the block's last row sees (the most of any row)
    int full_end;    // keys its first row sees (every row sees these)
    int first_tile;  // this split's tiles of BLOCK_N keys: [first_tile, first_tile + num_tiles)
    int num_tiles;
};

template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ MlaKeys mla_keys(const MlaDecodeArgs& p, int row0, int batch, int split, int num_splits) {
    MlaKeys k;
    const int len = p.lengths[batch];
    k.len = len < 0 ? 0 : len > p.max_kv_len ? p.max_kv_len : len;  // no read leaves the cache
    const int total_rows = p.q_len * p.num_heads;
    const int last_row = min(row0 + BLOCK_M, total_rows) - 1;
    k.kv_end = max(0, k.len - p.q_len + last_row / p.num_heads + 1);
    k.full_end = max(0, k.len - p.q_len + row0 / p.num_heads + 1);
    const int tiles = (k.kv_end + BLOCK_N - 1) / BLOCK_N;
    const int per_split = (tiles + num_splits - 1) / num_splits;
    k.first_tile = split * per_split;
    k.num_tiles = max(0, min(tiles, k.first_tile + per_split) - k.first_tile);
    return k;
}

// The sequence's keys, clamped to the cache (what the chunks are cut from).
__device__ __forceinline__ long long mla_keys_bound(const MlaDecodeArgs& p, int b) {
    const int len = p.lengths[b];
    return len < 0 ? 0 : len > p.max_kv_len ? p.max_kv_len : len;
}

// Balanced launches: each sequence's chunks, {number of its first, how many}, which its first
// chunk's CTA of row block 0 writes after the partial results, so that the merge kernel reads them
// instead of searching the lengths again in each of its (row, sequence) blocks. (8-byte aligned:
// partial_rows is a multiple of BLOCK_M, at least 16.)
__device__ __forceinline__ int2* mla_sequence_chunks(const MlaDecodeArgs& p, long long partial_rows) {
    return reinterpret_cast<int2*>(p.workspace + partial_rows * (kMlaValueDim + 1));
}

// The CTA's sequence and split (see the top of this file). Called by the whole CTA.
template <int BLOCK_M, int BLOCK_N>
__device__ KvChunk mla_work(const MlaDecodeArgs& p) {
    if (!p.balanced) return kv_chunk_fixed();
    const KvChunk work = kv_chunk_of_cta<BLOCK_N>(kMlaMaxSplits, [&](int b) { return mla_keys_bound(p, b); });
    if (work.active && work.split == 0 && blockIdx.x == 0 && threadIdx.x == 0) {
        const long long partial_rows = static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z * BLOCK_M;
        mla_sequence_chunks(p, partial_rows)[work.batch] = make_int2(static_cast<int>(work.first_chunk), work.num_splits);
    }
    return work;
}

// Keys of row `row` (past the problem's rows: as many as the block's last row).
__device__ __forceinline__ int mla_row_end(const MlaDecodeArgs& p, const MlaKeys& k, int row) {
    return row < p.q_len * p.num_heads ? max(0, k.len - p.q_len + row / p.num_heads + 1) : k.kv_end;
}

// Starts cp.async copies of the block's BLOCK_M query rows (zeros past the problem's rows) into
// shared memory; `at(r, c)` is where chunk c of row r goes.
template <typename T, int BLOCK_M, int THREADS, typename At>
__device__ __forceinline__ void mla_load_q(const MlaDecodeArgs& p, int row0, int batch, At at) {
    const T* q = static_cast<const T*>(p.q);
    const int total_rows = p.q_len * p.num_heads;
    for (int idx = threadIdx.x; idx < BLOCK_M * kMlaChunks; idx += THREADS) {
        const int r = idx / kMlaChunks, c = idx % kMlaChunks, row = row0 + r;
        const bool valid = row < total_rows;
        const T* src = valid ? q + batch * p.q_batch_stride + (row / p.num_heads) * p.q_token_stride +
                                   (row % p.num_heads) * p.q_head_stride + c * 8
                             : q;
        cp_async<16>(at(r, c), src, valid ? 16 : 0);
    }
}

// Starts cp.async copies of the BLOCK_N keys from `n0` into shared memory; keys past kv_end or
// behind a page table entry outside [0, num_pages) are zero-filled and flagged unusable in
// key_ok[0 .. BLOCK_N). Eight threads share a key row: thread g of the eight copies chunks
// g, g + 8, ..., g + 64, so every copy instruction of a warp reads 128 contiguous bytes of each of
// its four rows, and a thread finds its row (a page table lookup when paged) once per tile.
// `at(r, g, j)` is where chunk 8 j + g of row r goes.
template <typename T, int BLOCK_N, int THREADS, int PAGE_SIZE, typename At>
__device__ __forceinline__ void mla_load_keys(const MlaDecodeArgs& p, const MlaKeys& k, int batch, int n0,
                                              unsigned char* key_ok, At at) {
    static_assert(THREADS % 8 == 0, "eight threads per key row");
    const T* kv = static_cast<const T*>(p.kv);
    const int* pages = PAGE_SIZE > 0 ? p.page_table + batch * p.page_table_stride : nullptr;
    const int g = threadIdx.x % 8;
    for (int r = threadIdx.x / 8; r < BLOCK_N; r += THREADS / 8) {
        const int token = n0 + r;
        bool valid = token < k.kv_end;
        long long offset;
        if constexpr (PAGE_SIZE > 0) {
            const int page = valid ? __ldg(pages + token / PAGE_SIZE) : 0;
            valid = valid && page >= 0 && page < p.num_pages;
            offset = static_cast<long long>(page) * p.kv_outer_stride + (token % PAGE_SIZE) * p.kv_token_stride;
        } else {
            offset = batch * p.kv_outer_stride + static_cast<long long>(token) * p.kv_token_stride;
        }
        const T* src = valid ? kv + offset + g * 8 : kv;
#pragma unroll
        for (int j = 0; j < kMlaChunks / 8; ++j) cp_async<16>(at(r, g, j), valid ? src + j * 64 : kv, valid ? 16 : 0);
        if (g == 0) key_ok[r] = valid;
    }
}

// Waits for the other warp serving the same rows (64 threads) at named barrier `id` (1..4; 0 is
// __syncthreads).
__device__ __forceinline__ void mla_pair_barrier(int id) { asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory"); }

// The full scores of the warp's 16 rows: adds the partial sums of `partner` (the warp with the other
// half of the dims, same fragment layout) through `exchange` (a float4 per lane and 8 keys per warp),
// meeting it at named barrier `barrier_id`. The caller keeps the exchange area from being written
// again before the partner has read it (a block-wide barrier per tile).
template <int BLOCKS_N>
__device__ __forceinline__ void mla_add_partner_scores(float (&s)[BLOCKS_N][4], float4* exchange, int warp, int partner,
                                                       int barrier_id) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < BLOCKS_N; ++j) exchange[(warp * BLOCKS_N + j) * 32 + lane] = make_float4(s[j][0], s[j][1], s[j][2], s[j][3]);
    mla_pair_barrier(barrier_id);
#pragma unroll
    for (int j = 0; j < BLOCKS_N; ++j) {
        const float4 other = exchange[(partner * BLOCKS_N + j) * 32 + lane];
        s[j][0] += other.x, s[j][1] += other.y, s[j][2] += other.z, s[j][3] += other.w;
    }
}

// P of keys 16 kk .. 16 kk + 15 as the A fragment of an MMA (mma.sync m16n8k16 or wgmma with A from
// registers): the accumulators of key blocks 2 kk and 2 kk + 1, packed to 16-bit pairs.
template <typename T, int BLOCKS_N>
__device__ __forceinline__ void mla_p_fragment(const float (&s)[BLOCKS_N][4], int kk, unsigned (&a)[4]) {
    a[0] = pack_pair<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack_pair<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Masks the scores of one warp's 16 rows x BLOCK_N keys (m16n8 accumulator layout: s[j][2h + e] is
// row quad_row + 8h, key 8j + quad_col + e) and runs the online softmax step on them: the running
// max and sum are brought up to date, o (kBlocksO accumulators of 16 x 8) rescaled, and s replaced
// by the probabilities. `mask` is false when every key of the tile is usable and visible to every row.
template <int BLOCK_N, int BLOCKS_O>
__device__ __forceinline__ void mla_softmax_step(float (&s)[BLOCK_N / 8][4], float (&o)[BLOCKS_O][4], float (&row_max)[2],
                                                 float (&row_sum)[2], bool mask, const int (&row_end)[2], int n0,
                                                 const unsigned char* key_ok, float scale_log2) {
    const int quad_col = (threadIdx.x % 4) * 2;
    if (mask) {
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int local = j * 8 + quad_col + e, key = n0 + local;
                const bool ok = key_ok[local] != 0;
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    if (!ok || key >= row_end[h]) s[j][2 * h + e] = -INFINITY;
            }
    }
    float rescale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m = row_max[h];
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j) m = fmaxf(m, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        rescale[h] = attention_rescale(row_max[h], m, scale_log2);
        row_max[h] = m;
        const float shift = attention_shift(m, scale_log2);
        float sum = row_sum[h] * rescale[h];
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
                const float x = fast_exp2(fmaf(s[j][e], scale_log2, -shift));
                s[j][e] = x;
                sum += x;
            }
        row_sum[h] = sum;
    }
    // The output follows only when a row's max grew (rare after the first tiles; decided for the
    // whole warp so the branch does not diverge): 4 x BLOCKS_O multiplies a thread saved per tile.
    if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
        for (int j = 0; j < BLOCKS_O; ++j) {
            o[j][0] *= rescale[0], o[j][1] *= rescale[0];
            o[j][2] *= rescale[1], o[j][3] *= rescale[1];
        }
    }
}

// Stores this thread's part of the finished rows: rows row0 + 16 pair + quad_row (+ 8), output
// columns 256 half + 8j + quad_col (+ 1), from 32 accumulators of 16 x 8 (o[j][2h], o[j][2h + 1]).
// Without splits the normalized output (and lse) goes to `out`; with splits, to the workspace.
template <typename T, int BLOCK_M>
__device__ __forceinline__ void mla_store_rows(const MlaDecodeArgs& p, const float (&o)[32][4], const float (&row_max)[2],
                                               const float (&row_sum)[2], int row0, const KvChunk& work, int pair,
                                               int half) {
    const int lane = threadIdx.x % 32, quad_row = lane / 4, quad_col = (lane % 4) * 2;
    const int total_rows = p.q_len * p.num_heads, batch = work.batch;
    const int col0 = half * (kMlaValueDim / 2) + quad_col;
    // Partial rows by chunk: [chunks][row blocks][BLOCK_M].
    const long long chunk_row0 = ((work.first_chunk + work.split) * work.columns + work.column) * BLOCK_M;
    const long long partial_rows = static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z * BLOCK_M;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = row_sum[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
        const float lse = attention_lse(row_max[h], sum, p.scale);
        const int local = pair * 16 + quad_row + h * 8, row = row0 + local;
        if (work.num_splits == 1) {
            if (row >= total_rows) continue;
            T* dst = static_cast<T*>(p.out) + batch * p.o_batch_stride + (row / p.num_heads) * p.o_token_stride +
                     (row % p.num_heads) * p.o_head_stride + col0;
#pragma unroll
            for (int j = 0; j < 32; ++j)
                *reinterpret_cast<unsigned*>(dst + j * 8) = pack_pair<T>(o[j][2 * h] * inverse, o[j][2 * h + 1] * inverse);
            if (p.lse != nullptr && half == 0 && lane % 4 == 0) p.lse[static_cast<long long>(batch) * total_rows + row] = lse;
        } else {
            const long long at = chunk_row0 + local;
            float* dst = p.workspace + at * kMlaValueDim + col0;
#pragma unroll
            for (int j = 0; j < 32; ++j)
                *reinterpret_cast<float2*>(dst + j * 8) = make_float2(o[j][2 * h] * inverse, o[j][2 * h + 1] * inverse);
            if (half == 0 && lane % 4 == 0) p.workspace[partial_rows * kMlaValueDim + at] = lse;
        }
    }
}

// The merge of split partial results: block (row, batch) of 128 threads, each thread 4 of the
// row's 512 columns; the weights of the splits from their lse through shared memory. Grid:
// (q_len * num_heads, batch). BLOCK_M is the main kernel's (the workspace's row blocks). A
// sequence in one chunk was written by the main kernel.
template <typename T, int BLOCK_M>
__global__ void __launch_bounds__(128) mla_merge_kernel(const MlaDecodeArgs p) {
    __shared__ float weights[kMlaMaxSplits];
    __shared__ float merged_lse;
    const int row = blockIdx.x, batch = blockIdx.y;
    const int total_rows = p.q_len * p.num_heads;
    const int row_blocks = (total_rows + BLOCK_M - 1) / BLOCK_M;
    const long long partial_rows = static_cast<long long>(p.num_splits) * row_blocks * gridDim.y * BLOCK_M;
    long long first_chunk = static_cast<long long>(batch) * p.num_splits;
    int splits = p.num_splits;
    if (p.balanced) {
        const int2 chunks = __ldcg(mla_sequence_chunks(p, partial_rows) + batch);
        first_chunk = chunks.x, splits = chunks.y;
    }
    if (splits == 1) return;
    // Partial rows are [chunks][row blocks][BLOCK_M]: this row's of split 0, and the step between splits.
    const long long first = (first_chunk * row_blocks + row / BLOCK_M) * BLOCK_M + row % BLOCK_M;
    const long long split_rows = static_cast<long long>(row_blocks) * BLOCK_M;
    const float* lse = p.workspace + partial_rows * kMlaValueDim;
    for (int s = threadIdx.x; s < splits; s += 128) weights[s] = __ldcg(lse + first + s * split_rows);
    __syncthreads();
    if (threadIdx.x < 32) {
        float m = -INFINITY;
        for (int s = threadIdx.x; s < splits; s += 32) m = fmaxf(m, weights[s]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
        const float base = m == -INFINITY ? 0.0f : m;
        float sum = 0.0f;
        for (int s = threadIdx.x; s < splits; s += 32) sum += __expf(weights[s] - base);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
        __syncwarp();
        for (int s = threadIdx.x; s < splits; s += 32) weights[s] = __expf(weights[s] - base) * inverse;
        if (threadIdx.x == 0) merged_lse = sum > 0.0f ? base + __logf(sum) : -INFINITY;
    }
    __syncthreads();
    const int c = threadIdx.x * 4;
    const float* part = p.workspace + first * kMlaValueDim + c;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < splits; ++s) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(part + s * split_rows * kMlaValueDim));
        const float w = weights[s];
        acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
    }
    T* dst = static_cast<T*>(p.out) + batch * p.o_batch_stride + (row / p.num_heads) * p.o_token_stride +
             (row % p.num_heads) * p.o_head_stride + c;
    const uint2 packed = make_uint2(pack_pair<T>(acc.x, acc.y), pack_pair<T>(acc.z, acc.w));
    *reinterpret_cast<uint2*>(dst) = packed;
    if (p.lse != nullptr && threadIdx.x == 0) p.lse[static_cast<long long>(batch) * total_rows + row] = merged_lse;
}

}  // namespace tileops
