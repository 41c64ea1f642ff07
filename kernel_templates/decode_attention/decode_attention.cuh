// Decode attention: a few query tokens per sequence against that sequence's cached keys and
// values, contiguous or paged, with the query heads of one KV head processed together (GQA) so
// that every KV byte is read once, and the KV length split over CTAs (flash decoding) when
// batch x kv_heads does not fill the GPU.
//
//   o[b, i, h] = softmax_j(scale * q[b, i, h] . k[b, j, h / group]) v[b, j, h / group]
//   over the keys j visible to query token i: j <= pos(i) = len[b] - q_len + i (causal, the query
//   tokens are the last q_len positions) and, with a window, j >= pos(i) - window_left.
//
// One CTA = (split, kv head x row block, batch); which keys a split holds: decode.cuh. A row is one (query token, query head) of the KV
// head; ROWS of them share the CTA. Each warp walks its own stride of KV tokens with its own
// online softmax; LANES lanes hold one token's row (16 bytes each, DecodeLanes), so a warp covers
// 32 / LANES tokens per 16-byte load and UNROLL such steps per iteration (loads issued first).
// The warps are merged through shared memory; with splits, each CTA writes its normalized
// partial output and log-sum-exp to the workspace and the last CTA of a (batch, kv head, row
// block) to finish merges them (an atomic counter it resets, so the workspace is reusable).
//
// An fp8 cache (TKV = __nv_fp8_e4m3) is read as e4m3 codes: the host folds the key scale into
// `scale`, and `v_scale` multiplies the values (applied once to the accumulated output).
//
// Template parameters: T query/output type, TKV key/value type, HEAD_DIM (a multiple of 16 up to
// 256), ROWS rows per CTA, WARPS, UNROLL steps per iteration, STAGES iterations of loads in the
// shared-memory ring (loads run STAGES - 1 iterations ahead), PAGE_SIZE tokens per page (0:
// contiguous KV), BALANCED the batch's keys cut into chunks by the lengths (decode.cuh).
//
// Dynamic shared memory: the larger of the ring (WARPS * 32 * STAGES * (UNROLL * 32 + 1) bytes)
// and the warps' partial results (WARPS * ROWS * (HEAD_DIM + 2) floats).
#pragma once

#include "arch/async_copy.cuh"
#include "common/fp8.cuh"
#include "common/infinity.cuh"
#include "common/types.cuh"
#include "decode_attention/decode.cuh"

namespace tileops {

constexpr int decode_power_of_two_at_least(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

// How a token's row of keys or values is spread over the lanes: a 16-byte slice per lane, on a
// power-of-two number of lanes so that a token's lanes sum its dot product with xor shuffles and
// 32 / LANES tokens fill a warp. Where the slices are not a power of two (bf16 at head dim 80: 10
// slices on 16 lanes), the lanes past them idle: they read nothing (their ring slots are
// zero-filled), their slices of the query tile are zeros, so they add 0 to the dot products, and
// they store nothing. Narrower slices would not keep them busy: the odd factor of such a head dim
// (80 = 5 x 16, 96 = 3 x 32) stays in the slice count whatever the slice's width, and loads under
// 16 bytes only add instructions.
template <typename TKV, int HEAD_DIM>
struct DecodeLanes {
    static constexpr int VEC = 16 / static_cast<int>(sizeof(TKV));  // elements per 16-byte load
    static constexpr int SLICES = HEAD_DIM / VEC;                    // lanes with a slice of a token
    static constexpr int LANES = decode_power_of_two_at_least(SLICES);  // lanes holding one token
    static constexpr int TOKENS_PER_STEP = 32 / LANES;
    static_assert(HEAD_DIM % VEC == 0 && LANES <= 32, "head dim a multiple of 16 bytes, 32 slices at most");
};

template <typename T, typename TKV, int HEAD_DIM, int ROWS, int WARPS, int UNROLL, int STAGES, int PAGE_SIZE, bool BALANCED = false>
__global__ void __launch_bounds__(WARPS * 32)
    decode_attention_kernel(const T* __restrict__ q, long long q_batch_stride, long long q_token_stride,
                            long long q_head_stride, const TKV* __restrict__ k, const TKV* __restrict__ v,
                            long long kv_outer_stride,  // between sequences, or between pages when paged
                            long long kv_token_stride, long long kv_head_stride, const int* __restrict__ lengths,
                            const int* __restrict__ page_table, long long page_table_stride, int num_pages,
                            int max_kv_len, T* __restrict__ out, long long o_batch_stride, long long o_token_stride,
                            long long o_head_stride, float* __restrict__ lse, int group, int q_len,
                            int window_left, float scale, float softcap, float* workspace, float v_scale) {
    using Lanes = DecodeLanes<TKV, HEAD_DIM>;
    constexpr int VEC = Lanes::VEC, LANES = Lanes::LANES, TPS = Lanes::TOKENS_PER_STEP;
    constexpr int WARP_TOKENS = TPS * UNROLL;  // tokens a warp covers per iteration
    constexpr int Q_DIM = LANES * VEC;         // the head dim and the idle lanes' slices (zeros) of the query tile

    const KvChunk work = decode_work<BALANCED, 16>(lengths, max_kv_len, q_len, window_left);
    if (!work.active) return;
    const int split = work.split, num_splits = work.num_splits;
    const int total_rows = group * q_len;
    const int row_blocks = (total_rows + ROWS - 1) / ROWS;
    const int kv_head = work.column / row_blocks;
    const int row0 = (work.column % row_blocks) * ROWS;
    const int batch = work.batch;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = lane / LANES;       // which token of a step this lane loads
    const int dim0 = (lane % LANES) * VEC;  // which slice of the head dim
    const bool has_slice = Lanes::SLICES == LANES || dim0 < HEAD_DIM;  // false: an idle lane (DecodeLanes)

    // Lengths past the cache's capacity are clamped so that no read leaves it.
    int len = lengths[batch];
    len = len < 0 ? 0 : len > max_kv_len ? max_kv_len : len;

    __shared__ float q_tile[ROWS][Q_DIM];
    // The load ring while the warps stream the keys and values; afterwards the warps' partial
    // results: [WARPS][ROWS][HEAD_DIM], then m and l: [WARPS][ROWS] each.
    extern __shared__ __align__(16) float warp_out[];
    float* warp_m = warp_out + WARPS * ROWS * HEAD_DIM;
    float* warp_l = warp_m + WARPS * ROWS;

    VisibleKeys keys[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) keys[r] = visible_keys(row0 + r, total_rows, group, q_len, len, window_left);
    // Keys every row of the CTA sees: iterations inside this range need no masks.
    const DecodeKeyRange range = decode_key_range<ROWS>(row0, total_rows, group, q_len, len, window_left, max_kv_len);
    const int kv_begin = range.any.begin, kv_end = range.any.end;
    const int full_begin = range.all.begin, full_end = range.all.end;
    const int span = kv_end > kv_begin ? kv_end - kv_begin : 0;
    const int chunk = (span + num_splits - 1) / num_splits;
    const int chunk_begin = kv_begin + split * chunk;
    const int chunk_end = min(chunk_begin + chunk, kv_end);

    float m[ROWS], l[ROWS], acc[ROWS][VEC];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        m[r] = kNegativeInfinity;
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

    // The page-table entry of this lane's token u of iteration `it`, or -1 for none. Loaded one
    // iteration before the copies that need it are issued (pages_ahead), so that a lane never
    // waits for the page table in front of a copy.
    auto page_entry = [&](int it, int u) {
        const int token = first + it * CTA_TOKENS + u * TPS + slot;
        // Tokens are never negative: unsigned division by the page size is a shift.
        return it < iterations && token < chunk_end
                   ? __ldg(pages_of_sequence + static_cast<unsigned>(token) / (PAGE_SIZE > 0 ? PAGE_SIZE : 1))
                   : -1;
    };
    int pages_ahead[UNROLL];  // the entries of the next iteration to issue
    if constexpr (PAGE_SIZE > 0) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) pages_ahead[u] = page_entry(0, u);
    }

    // Starts the copies of iteration `it` into its stage (an empty group past the end). Iterations
    // are issued in order: `pages_ahead` holds this one's page entries, and the next one's are
    // loaded here.
    auto issue = [&](int it) {
        const int stage = it % STAGES, base = first + it * CTA_TOKENS;
        unsigned valid_bits = 0;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int token = base + u * TPS + slot;
            bool valid = it < iterations && token < chunk_end;
            long long offset = 0;
            if constexpr (PAGE_SIZE > 0) {
                const int page = pages_ahead[u];
                valid = valid && page >= 0 && page < num_pages;  // a bad page table entry reads nothing
                offset = static_cast<long long>(page) * kv_outer_stride + (static_cast<unsigned>(token) % PAGE_SIZE) * kv_token_stride;
            } else {
                offset = batch * kv_outer_stride + static_cast<long long>(token) * kv_token_stride;
            }
            const bool read = valid && has_slice;
            const long long at = read ? offset + head_offset : 0;
            int4* slot_k = ring + ((stage * UNROLL + u) * 2) * 32;
            cp_async_16(slot_k, k + at, read);
            cp_async_16(slot_k + 32, v + at, read);
            valid_bits |= valid ? 1u << u : 0u;
        }
        ring_valid[stage * 32] = static_cast<unsigned char>(valid_bits);
        cp_async_commit();
        if constexpr (PAGE_SIZE > 0) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) pages_ahead[u] = page_entry(it + 1, u);
        }
    };
    // The first iterations' copies go out before Q is staged: at batch 1 a CTA streams only a few
    // hundred keys, and Q's load latency then overlaps them instead of delaying them.
#pragma unroll
    for (int it = 0; it < STAGES - 1; ++it) issue(it);

    for (int idx = threadIdx.x; idx < ROWS * Q_DIM; idx += WARPS * 32) {
        const int r = idx / Q_DIM, d = idx % Q_DIM, row = row0 + r;
        float value = 0.0f;
        if (row < total_rows && d < HEAD_DIM) {
            const int token = row / group, head = kv_head * group + row % group;
            value = to_float(q[batch * q_batch_stride + token * q_token_stride + head * q_head_stride + d]);
        }
        q_tile[r][d] = value * scale * (softcap > 0.0f ? 1.0f : kDecodeLog2e);
    }

    __syncthreads();  // q_tile

    float qr[ROWS][VEC];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int e = 0; e < VEC; ++e) qr[r][e] = q_tile[r][dim0 + e];

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
                for (int r = 0; r < ROWS; ++r) s[u][r] = softcap * tanhf(s[u][r] / softcap) * kDecodeLog2e;
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
                    s[u][r] = visible ? s[u][r] : kNegativeInfinity;
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
            const float base_m = m[r] == kNegativeInfinity ? 0.0f : m[r];  // all masked so far: every p is 0
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
    if (slot == 0 && has_slice) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int e = 0; e < VEC; ++e) warp_out[(warp * ROWS + r) * HEAD_DIM + dim0 + e] = acc[r][e] * v_scale;
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            warp_m[warp * ROWS + r] = m[r];
            warp_l[warp * ROWS + r] = l[r];
        }
    }
    __syncthreads();

    decode_finish<T, HEAD_DIM, ROWS, WARPS>(warp_out, {out, o_batch_stride, o_token_stride, o_head_stride, lse, workspace,
                                                      group, q_len, row0, total_rows, kv_head, row_blocks, work});
}

}  // namespace tileops
