// Decode attention: a few query tokens per sequence against that sequence's cached keys and
// values, contiguous or paged, with the query heads of one KV head processed together (GQA) so
// that every KV byte is read once, and the KV length split over CTAs (flash decoding) when
// batch x kv_heads does not fill the GPU.
//
//   o[b, i, h] = softmax_j(scale * q[b, i, h] . k[b, j, h / group]) v[b, j, h / group]
//   over the keys j visible to query token i: j <= pos(i) = len[b] - q_len + i (causal, the query
//   tokens are the last q_len positions) and, with a window, j >= pos(i) - window_left.
//
// One CTA = (split, kv head x row block, batch). A row is one (query token, query head) of the KV
// head; ROWS of them share the CTA. Each warp walks its own stride of KV tokens with its own
// online softmax; LANES lanes hold one token's row (16 bytes each), so a warp covers
// 32 / LANES tokens per 16-byte load and UNROLL such steps per iteration (loads issued first).
// The warps are merged through shared memory; with splits, each CTA writes its normalized
// partial output and log-sum-exp to the workspace and the last CTA of a (batch, kv head, row
// block) to finish merges them (an atomic counter it resets, so the workspace is reusable).
//
// Template parameters: T query/output type, TKV key/value type, HEAD_DIM, ROWS rows per CTA,
// WARPS, UNROLL steps per iteration, STAGES iterations of loads in the shared-memory ring (loads
// run STAGES - 1 iterations ahead), PAGE_SIZE tokens per page (0: contiguous KV).
//
// Dynamic shared memory: the largest of the ring (WARPS * 32 * STAGES * (UNROLL * 32 + 1) bytes),
// the warps' partial results (WARPS * ROWS * (HEAD_DIM + 2) floats) and the merge's weights
// (ROWS * (splits + 1) floats).
#pragma once

#include <cuda/std/limits>

#include "common/async_copy.cuh"
#include "common/types.cuh"

namespace tileops {

template <typename TKV, int HEAD_DIM>
struct DecodeLanes {
    static constexpr int VEC = 16 / static_cast<int>(sizeof(TKV));  // elements per 16-byte load
    static constexpr int LANES = HEAD_DIM / VEC;                     // lanes holding one token
    static constexpr int TOKENS_PER_STEP = 32 / LANES;
    static_assert(HEAD_DIM % VEC == 0 && LANES <= 32 && 32 % LANES == 0, "unsupported head dim");
};

// The keys row `r` of the CTA may see: [begin, end). Rows past the problem's rows see none.
struct VisibleKeys {
    int begin, end;
};

__device__ __forceinline__ VisibleKeys visible_keys(int row, int total_rows, int group, int q_len, int len,
                                                    int window_left) {
    if (row >= total_rows) return {0, 0};
    const int pos = len - q_len + row / group;  // absolute position of this row's query token
    const int end = pos + 1 > 0 ? pos + 1 : 0;
    const int begin = window_left >= 0 && pos - window_left > 0 ? pos - window_left : 0;
    return {begin, end};
}

template <typename T, typename TKV, int HEAD_DIM, int ROWS, int WARPS, int UNROLL, int STAGES, int PAGE_SIZE>
__global__ void __launch_bounds__(WARPS * 32)
    decode_attention_kernel(const T* __restrict__ q, long long q_batch_stride, long long q_token_stride,
                            long long q_head_stride, const TKV* __restrict__ k, const TKV* __restrict__ v,
                            long long kv_outer_stride,  // between sequences, or between pages when paged
                            long long kv_token_stride, long long kv_head_stride, const int* __restrict__ lengths,
                            const int* __restrict__ page_table, long long page_table_stride, int num_pages,
                            int max_kv_len, T* __restrict__ out, long long o_batch_stride, long long o_token_stride,
                            long long o_head_stride, float* __restrict__ lse, int group, int q_len,
                            int window_left, float scale, float softcap, float* workspace) {
    using Lanes = DecodeLanes<TKV, HEAD_DIM>;
    constexpr int VEC = Lanes::VEC, LANES = Lanes::LANES, TPS = Lanes::TOKENS_PER_STEP;
    constexpr int WARP_TOKENS = TPS * UNROLL;  // tokens a warp covers per iteration
    constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
    constexpr float kNegInf = -cuda::std::numeric_limits<float>::infinity();

    const int split = blockIdx.x, num_splits = gridDim.x;
    const int total_rows = group * q_len;
    const int row_blocks = (total_rows + ROWS - 1) / ROWS;
    const int kv_head = blockIdx.y / row_blocks;
    const int row0 = (blockIdx.y % row_blocks) * ROWS;
    const int batch = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = lane / LANES;       // which token of a step this lane loads
    const int dim0 = (lane % LANES) * VEC;  // which slice of the head dim

    // Lengths past the cache's capacity are clamped so that no read leaves it.
    int len = lengths[batch];
    len = len < 0 ? 0 : len > max_kv_len ? max_kv_len : len;

    __shared__ float q_tile[ROWS][HEAD_DIM];
    // The load ring while the warps stream the keys and values; afterwards the warps' partial
    // results: [WARPS][ROWS][HEAD_DIM], then m and l: [WARPS][ROWS] each.
    extern __shared__ __align__(16) float warp_out[];
    float* warp_m = warp_out + WARPS * ROWS * HEAD_DIM;
    float* warp_l = warp_m + WARPS * ROWS;

    for (int idx = threadIdx.x; idx < ROWS * HEAD_DIM; idx += WARPS * 32) {
        const int r = idx / HEAD_DIM, d = idx % HEAD_DIM, row = row0 + r;
        float value = 0.0f;
        if (row < total_rows) {
            const int token = row / group, head = kv_head * group + row % group;
            value = to_float(q[batch * q_batch_stride + token * q_token_stride + head * q_head_stride + d]);
        }
        q_tile[r][d] = value * scale * (softcap > 0.0f ? 1.0f : kLog2e);
    }

    VisibleKeys keys[ROWS];
    int kv_begin = max_kv_len, kv_end = 0;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        keys[r] = visible_keys(row0 + r, total_rows, group, q_len, len, window_left);
        if (keys[r].end > keys[r].begin) {
            kv_begin = min(kv_begin, keys[r].begin);
            kv_end = max(kv_end, keys[r].end);
        }
    }
    // Keys every row of the CTA sees: iterations inside this range need no masks.
    int full_begin = 0, full_end = max_kv_len;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
        if (row0 + r < total_rows) {
            full_begin = max(full_begin, keys[r].begin);
            full_end = min(full_end, keys[r].end);
        }
    const int span = kv_end > kv_begin ? kv_end - kv_begin : 0;
    const int chunk = (span + num_splits - 1) / num_splits;
    const int chunk_begin = kv_begin + split * chunk;
    const int chunk_end = min(chunk_begin + chunk, kv_end);
    __syncthreads();

    float qr[ROWS][VEC];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int e = 0; e < VEC; ++e) qr[r][e] = q_tile[r][dim0 + e];

    float m[ROWS], l[ROWS], acc[ROWS][VEC];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        m[r] = kNegInf;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[r][e] = 0.0f;
    }

    // Each lane streams its own 16-byte slices of keys and values through a ring of STAGES stages
    // in shared memory with cp.async, STAGES - 1 iterations ahead of its arithmetic. A lane only
    // reads back what it copied itself, so waiting for its own copies is enough (no barrier).
    const long long head_offset = kv_head * kv_head_stride + dim0;
    constexpr int CTA_TOKENS = WARPS * WARP_TOKENS;
    int4* ring = reinterpret_cast<int4*>(warp_out) + warp * (STAGES * UNROLL * 2 * 32) + lane;
    unsigned char* ring_valid = reinterpret_cast<unsigned char*>(warp_out) +
                                static_cast<size_t>(WARPS) * STAGES * UNROLL * 2 * 32 * 16 + (warp * STAGES) * 32 + lane;
    const int* pages_of_sequence = PAGE_SIZE > 0 ? page_table + batch * page_table_stride : nullptr;
    const int first = chunk_begin + warp * WARP_TOKENS;
    const int iterations = chunk_end > first ? (chunk_end - first + CTA_TOKENS - 1) / CTA_TOKENS : 0;

    // Starts the copies of iteration `it` into its stage (an empty group past the end).
    auto issue = [&](int it) {
        const int stage = it % STAGES, base = first + it * CTA_TOKENS;
        unsigned valid_bits = 0;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int token = base + u * TPS + slot;
            bool valid = it < iterations && token < chunk_end;
            long long offset = 0;
            if constexpr (PAGE_SIZE > 0) {
                const int page = valid ? __ldg(pages_of_sequence + token / PAGE_SIZE) : 0;
                valid = valid && page >= 0 && page < num_pages;  // a bad page table entry reads nothing
                offset = static_cast<long long>(page) * kv_outer_stride + (token % PAGE_SIZE) * kv_token_stride;
            } else {
                offset = batch * kv_outer_stride + static_cast<long long>(token) * kv_token_stride;
            }
            const long long at = valid ? offset + head_offset : 0;
            int4* slot_k = ring + ((stage * UNROLL + u) * 2) * 32;
            cp_async_16(slot_k, k + at, valid);
            cp_async_16(slot_k + 32, v + at, valid);
            valid_bits |= valid ? 1u << u : 0u;
        }
        ring_valid[stage * 32] = static_cast<unsigned char>(valid_bits);
        cp_async_commit();
    };
#pragma unroll
    for (int it = 0; it < STAGES - 1; ++it) issue(it);

    for (int it = 0; it < iterations; ++it) {
        issue(it + STAGES - 1);
        cp_async_wait<STAGES - 1>();
        const int stage = it % STAGES, base = first + it * CTA_TOKENS;
        const unsigned valid_bits = ring_valid[stage * 32];
        Vec<TKV, VEC> kv[UNROLL], vv[UNROLL];
        int token[UNROLL];
        bool valid[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            token[u] = base + u * TPS + slot;
            valid[u] = (valid_bits >> u) & 1u;
            const int4* slot_k = ring + ((stage * UNROLL + u) * 2) * 32;
            const int4 raw_k = *slot_k, raw_v = *(slot_k + 32);
            memcpy(&kv[u], &raw_k, 16);
            memcpy(&vv[u], &raw_v, 16);
        }

        // Scores (log2 domain): a partial dot product per lane, summed over the LANES lanes of a token.
        float s[UNROLL][ROWS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            float kf[VEC];
            unpack(kv[u], kf);
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < VEC; ++e) dot = fmaf(qr[r][e], kf[e], dot);
                s[u][r] = dot;
            }
        }
#pragma unroll
        for (int offset = LANES / 2; offset > 0; offset >>= 1)
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int r = 0; r < ROWS; ++r) s[u][r] += __shfl_xor_sync(0xffffffffu, s[u][r], offset);
        if (softcap > 0.0f) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int r = 0; r < ROWS; ++r) s[u][r] = softcap * tanhf(s[u][r] / softcap) * kLog2e;
        }
        // Masks, unless every token of the iteration is valid and visible to every row (the common
        // case, decided for the whole warp so that the branch does not diverge).
        const bool lane_full = valid_bits == (1u << UNROLL) - 1u && token[0] >= full_begin && token[UNROLL - 1] < full_end;
        if (!__all_sync(0xffffffffu, lane_full)) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const bool visible = valid[u] && token[u] >= keys[r].begin && token[u] < keys[r].end;
                    s[u][r] = visible ? s[u][r] : kNegInf;
                }
        }

        // Online softmax; the running max of a row is the same in every lane of the warp.
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float tile_max = s[0][r];
#pragma unroll
            for (int u = 1; u < UNROLL; ++u) tile_max = fmaxf(tile_max, s[u][r]);
#pragma unroll
            for (int offset = LANES; offset < 32; offset <<= 1)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
            // Rescale only when the maximum grows (warp-uniform; rare after the first iterations).
            if (tile_max > m[r]) {
                const float correction = exp2f(m[r] - tile_max);
                m[r] = tile_max;
                l[r] *= correction;
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[r][e] *= correction;
            }
            const float base_m = m[r] == kNegInf ? 0.0f : m[r];  // all masked so far: every p is 0
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                s[u][r] = exp2f(s[u][r] - base_m);
                l[r] += s[u][r];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            float vf[VEC];
            unpack(vv[u], vf);
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[r][e] = fmaf(s[u][r], vf[e], acc[r][e]);
        }
    }

    cp_async_wait<0>();
    __syncthreads();  // the ring is reused for the warps' partial results below

    // Merge the tokens of the warp's slots (same max), then the warps (different maxima).
#pragma unroll
    for (int offset = LANES; offset < 32; offset <<= 1)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], offset);
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], offset);
        }
    if (slot == 0) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int e = 0; e < VEC; ++e) warp_out[(warp * ROWS + r) * HEAD_DIM + dim0 + e] = acc[r][e];
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            warp_m[warp * ROWS + r] = m[r];
            warp_l[warp * ROWS + r] = l[r];
        }
    }
    __syncthreads();

    // This CTA's result per row: normalized output and log-sum-exp (log2 domain), or 0 and -inf
    // when it saw no visible key.
    const long long block_slot = static_cast<long long>(batch) * gridDim.y + blockIdx.y;
    // Workspace (splits only): partial outputs [slots][splits][ROWS][HEAD_DIM], their lse
    // [slots][splits][ROWS], then one counter per slot; a slot is a (batch, kv head, row block).
    const long long partial_rows = static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z * ROWS;
    float* partial_out = workspace;
    float* partial_lse = num_splits > 1 ? workspace + partial_rows * HEAD_DIM : nullptr;
    unsigned* counters = num_splits > 1 ? reinterpret_cast<unsigned*>(partial_lse + partial_rows) : nullptr;
    auto write_row = [&](int r, int d, float value, float row_lse2) {
        const int row = row0 + r;
        if (row >= total_rows) return;
        const int token = row / group, head = kv_head * group + row % group;
        out[batch * o_batch_stride + token * o_token_stride + head * o_head_stride + d] = from_float<T>(value);
        if (lse != nullptr && d == 0)
            lse[(static_cast<long long>(batch) * q_len + token) * (gridDim.y / row_blocks * group) + head] =
                row_lse2 == kNegInf ? kNegInf : row_lse2 * kLn2;
    };
    for (int idx = threadIdx.x; idx < ROWS * HEAD_DIM; idx += WARPS * 32) {
        const int r = idx / HEAD_DIM, d = idx % HEAD_DIM;
        float row_max = kNegInf;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) row_max = fmaxf(row_max, warp_m[w * ROWS + r]);
        const float base_m = row_max == kNegInf ? 0.0f : row_max;
        float sum = 0.0f, value = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const float weight = exp2f(warp_m[w * ROWS + r] - base_m);
            sum += warp_l[w * ROWS + r] * weight;
            value += warp_out[(w * ROWS + r) * HEAD_DIM + d] * weight;
        }
        const float normalized = sum > 0.0f ? value / sum : 0.0f;
        const float row_lse2 = sum > 0.0f ? base_m + log2f(sum) : kNegInf;
        if (num_splits == 1) {
            write_row(r, d, normalized, row_lse2);
        } else {
            const long long at = (block_slot * num_splits + split) * ROWS + r;
            partial_out[at * HEAD_DIM + d] = normalized;
            if (d == 0) partial_lse[at] = row_lse2;
        }
    }
    if (num_splits == 1) return;

    // The last CTA of this (batch, kv head, row block) to finish merges the splits.
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned done = atomicAdd(&counters[block_slot], 1u);
        is_last = done == static_cast<unsigned>(num_splits - 1);
        if (is_last) counters[block_slot] = 0;  // every split has arrived: ready for the next launch
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();

    // The merge, in three parallel steps through shared memory (reused once more): every split's
    // lse loaded at once; per row its maximum and sum, the lse turned into weights; then each output
    // element as a weighted sum of independent loads. A loop of dependent L2 reads per element
    // would cost about a microsecond per 2 splits.
    float* weights = warp_out;                       // [ROWS][num_splits]
    float* row_lse2 = warp_out + ROWS * num_splits;  // [ROWS]
    const long long slot_rows = block_slot * num_splits * ROWS;  // this slot's first partial row
    for (int i = threadIdx.x; i < ROWS * num_splits; i += WARPS * 32) {
        const int r = i / num_splits, s = i % num_splits;
        weights[i] = __ldcg(partial_lse + slot_rows + static_cast<long long>(s) * ROWS + r);
    }
    __syncthreads();
    for (int r = warp; r < ROWS; r += WARPS) {
        float row_max = kNegInf;
        for (int s = lane; s < num_splits; s += 32) row_max = fmaxf(row_max, weights[r * num_splits + s]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
        const float base_m = row_max == kNegInf ? 0.0f : row_max;
        float sum = 0.0f;
        for (int s = lane; s < num_splits; s += 32) sum += exp2f(weights[r * num_splits + s] - base_m);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int s = lane; s < num_splits; s += 32)
            weights[r * num_splits + s] = exp2f(weights[r * num_splits + s] - base_m) * inverse;
        if (lane == 0) row_lse2[r] = sum > 0.0f ? base_m + log2f(sum) : kNegInf;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < ROWS * HEAD_DIM; idx += WARPS * 32) {
        const int r = idx / HEAD_DIM, d = idx % HEAD_DIM;
        const float* w = weights + r * num_splits;
        const float* part = partial_out + (slot_rows + r) * HEAD_DIM + d;
        float value = 0.0f;
#pragma unroll 8
        for (int s = 0; s < num_splits; ++s) value += w[s] * __ldcg(part + static_cast<long long>(s) * ROWS * HEAD_DIM);
        write_row(r, d, value, row_lse2[r]);
    }
}

}  // namespace tileops
