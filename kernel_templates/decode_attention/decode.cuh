// What both decode attention kernels (decode_attention.cuh: CUDA cores, decode_attention_mma.cuh:
// tensor cores) share: which keys a row sees, and how a CTA turns its warps' partial softmax
// results into the output, or with split KV into a split's partial result that the last CTA of
// the (batch, kv head, row block) merges.
//
// A row is one (query token, query head) pair of a KV head; a CTA holds ROWS of them, starting at
// row0 of its KV head's group * q_len rows.
//
// Which sequence and which part of its keys a CTA streams (decode_work): a column is a (kv head,
// row block). At batch 1 (BALANCED false) the grid is (splits, columns, 1) and CTA x streams part
// x of the keys; for a batch (BALANCED true) it is (columns, splits + 1, batch) and the lengths cut
// the batch's keys into about batch x splits chunks of equal tokens (common/kv_chunks.cuh).
// Partial results are stored by chunk number and column, so the workspace is laid out the same
// way for both.
#pragma once

#include "common/infinity.cuh"
#include "common/kv_chunks.cuh"
#include "common/types.cuh"

namespace tileops {

constexpr float kDecodeLog2e = 1.4426950408889634f;

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

// The keys of a CTA's rows: `any` spans the keys some row sees, `all` the keys every row sees
// (where no mask is needed); both empty (begin >= end) when no row sees a key.
struct DecodeKeyRange {
    VisibleKeys any, all;
};

template <int ROWS>
__device__ __forceinline__ DecodeKeyRange decode_key_range(int row0, int total_rows, int group, int q_len, int len,
                                                           int window_left, int max_kv_len) {
    DecodeKeyRange range{{max_kv_len, 0}, {0, max_kv_len}};
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (row0 + r >= total_rows) continue;
        const VisibleKeys keys = visible_keys(row0 + r, total_rows, group, q_len, len, window_left);
        if (keys.end > keys.begin) {
            range.any.begin = min(range.any.begin, keys.begin);
            range.any.end = max(range.any.end, keys.end);
        }
        range.all.begin = max(range.all.begin, keys.begin);
        range.all.end = min(range.all.end, keys.end);
    }
    return range;
}

// The keys of sequence b that some row may see, at most: its length clamped to the cache, or the
// window and the query tokens when a window bounds it.
__device__ __forceinline__ long long decode_keys_bound(const int* lengths, int b, int max_kv_len, int q_len,
                                                       int window_left) {
    int len = lengths[b];
    len = len < 0 ? 0 : len > max_kv_len ? max_kv_len : len;
    return window_left >= 0 && window_left + q_len < len ? window_left + q_len : len;
}

// See the top of this file; GRANULE: keys a chunk holds a multiple of.
template <bool BALANCED, int GRANULE>
__device__ KvChunk decode_work(const int* __restrict__ lengths, int max_kv_len, int q_len, int window_left) {
    if constexpr (!BALANCED) {
        return kv_chunk_fixed();
    } else {
        constexpr long long kNoCap = 1LL << 40;  // the merge takes any number of splits
        return kv_chunk_of_cta<GRANULE>(
            kNoCap, [&](int b) { return decode_keys_bound(lengths, b, max_kv_len, q_len, window_left); });
    }
}

// Where a CTA's rows go: the output tensor, the optional log-sum-exp, and the split workspace.
template <typename T>
struct DecodeOutput {
    T* out;
    long long batch_stride, token_stride, head_stride;
    float* lse;        // [batch, q_len, num_heads] natural log, or null
    float* workspace;  // split KV only
    int group, q_len, row0, total_rows, kv_head, row_blocks;
    KvChunk work;
};

// Turns the warps' partial results into the CTA's result. On entry, after a __syncthreads(),
// `warp_out` holds PARTS partial results, unnormalized outputs [PARTS][ROWS][HEAD_DIM], followed by
// their running maxima (log2 domain) and sums [PARTS][ROWS] each: one a warp where the warps split
// the keys, one for the CTA where they split the rows. With one split the rows are written
// out; with several, each CTA writes its normalized partial output and log-sum-exp to the
// workspace and the last CTA of the (batch, kv head, row block) to finish merges them (through an
// atomic counter it resets, so the workspace is ready for the next launch).
template <typename T, int HEAD_DIM, int ROWS, int WARPS, int PARTS = WARPS>
__device__ void decode_finish(float* warp_out, const DecodeOutput<T>& o) {
    constexpr int THREADS = WARPS * 32;
    constexpr float kLn2 = 0.6931471805599453f;
    const int split = o.work.split, num_splits = o.work.num_splits;
    const float* warp_m = warp_out + PARTS * ROWS * HEAD_DIM;
    const float* warp_l = warp_m + PARTS * ROWS;

    // This CTA's result per row: normalized output and log-sum-exp (log2 domain), or 0 and -inf
    // when it saw no visible key.
    const long long block_slot = static_cast<long long>(o.work.batch) * o.work.columns + o.work.column;
    // Workspace (splits only): partial outputs [chunks][columns][ROWS][HEAD_DIM], their lse
    // [chunks][columns][ROWS], then one counter per slot; a slot is a (batch, column), a chunk a
    // part of one sequence's keys (decode_work).
    const long long partial_rows = static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z * ROWS;
    float* partial_out = o.workspace;
    float* partial_lse = num_splits > 1 ? o.workspace + partial_rows * HEAD_DIM : nullptr;
    unsigned* counters = num_splits > 1 ? reinterpret_cast<unsigned*>(partial_lse + partial_rows) : nullptr;
    // A row's partial results of consecutive splits are this many rows apart.
    const long long split_rows = static_cast<long long>(o.work.columns) * ROWS;
    const long long slot_rows = (o.work.first_chunk * o.work.columns + o.work.column) * ROWS;  // split 0's row 0
    const int num_heads = o.work.columns / o.row_blocks * o.group;
    // Rows past the problem's (the tensor-core kernel pads a KV head's rows to 16) are skipped.
    const int rows = min(ROWS, o.total_rows - o.row0);
    auto write_row = [&](int r, int d, float value, float row_lse2) {
        const int row = o.row0 + r;
        if (row >= o.total_rows) return;
        const int token = row / o.group, head = o.kv_head * o.group + row % o.group;
        o.out[o.work.batch * o.batch_stride + token * o.token_stride + head * o.head_stride + d] = from_float<T>(value);
        if (o.lse != nullptr && d == 0)
            o.lse[(static_cast<long long>(o.work.batch) * o.q_len + token) * num_heads + head] =
                row_lse2 == kNegativeInfinity ? kNegativeInfinity : row_lse2 * kLn2;
    };
    for (int idx = threadIdx.x; idx < rows * HEAD_DIM; idx += THREADS) {
        const int r = idx / HEAD_DIM, d = idx % HEAD_DIM;
        float row_max = kNegativeInfinity;
#pragma unroll
        for (int w = 0; w < PARTS; ++w) row_max = fmaxf(row_max, warp_m[w * ROWS + r]);
        const float base_m = row_max == kNegativeInfinity ? 0.0f : row_max;
        float sum = 0.0f, value = 0.0f;
#pragma unroll
        for (int w = 0; w < PARTS; ++w) {
            const float weight = exp2f(warp_m[w * ROWS + r] - base_m);
            sum += warp_l[w * ROWS + r] * weight;
            value += warp_out[(w * ROWS + r) * HEAD_DIM + d] * weight;
        }
        const float normalized = sum > 0.0f ? value / sum : 0.0f;
        const float row_lse2 = sum > 0.0f ? base_m + log2f(sum) : kNegativeInfinity;
        if (num_splits == 1) {
            write_row(r, d, normalized, row_lse2);
        } else {
            const long long at = slot_rows + split * split_rows + r;
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

    // The merge. At batch 1 the last CTA's merge is on the critical path of the whole launch, so
    // it is one round of loads: each thread takes four output elements of a row and loads, for 16
    // splits at a time, their lse and 16-byte partial outputs together (independent loads; the threads
    // of a row load the same lse words, one transaction per warp), then rescales online as the flash
    // kernels do.
    // (Loading the lse first and the partials after took one more L2 round trip, ~0.5 us.)
    constexpr int QUADS = HEAD_DIM / 4;
    constexpr int BATCH = 16;  // splits in flight per step
    const long long split_stride = split_rows * HEAD_DIM / 4;  // float4s between a row's splits
    for (int idx = threadIdx.x; idx < rows * QUADS; idx += THREADS) {
        const int r = idx / QUADS, d = (idx % QUADS) * 4;
        const float4* part = reinterpret_cast<const float4*>(partial_out + (slot_rows + r) * HEAD_DIM + d);
        const float* part_lse = partial_lse + slot_rows + r;
        float row_max = kNegativeInfinity, sum = 0.0f;
        float4 value = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s0 = 0; s0 < num_splits; s0 += BATCH) {
            float lse2[BATCH];
            float4 x[BATCH];
#pragma unroll
            for (int i = 0; i < BATCH; ++i) {
                const bool in = s0 + i < num_splits;
                lse2[i] = in ? __ldcg(part_lse + (s0 + i) * split_rows) : kNegativeInfinity;
                x[i] = in ? __ldcg(part + (s0 + i) * split_stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            float step_max = row_max;
#pragma unroll
            for (int i = 0; i < BATCH; ++i) step_max = fmaxf(step_max, lse2[i]);
            if (step_max == kNegativeInfinity) continue;  // no split so far saw a key
            const float correction = exp2f(row_max - step_max);  // 0 while row_max is -inf
            sum *= correction;
            value.x *= correction;
            value.y *= correction;
            value.z *= correction;
            value.w *= correction;
#pragma unroll
            for (int i = 0; i < BATCH; ++i) {
                const float w = exp2f(lse2[i] - step_max);  // 0 for a split that saw no key
                sum += w;
                value.x += w * x[i].x;
                value.y += w * x[i].y;
                value.z += w * x[i].z;
                value.w += w * x[i].w;
            }
            row_max = step_max;
        }
        const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
        const float lse_out = sum > 0.0f ? row_max + log2f(sum) : kNegativeInfinity;
        write_row(r, d, value.x * inverse, lse_out);
        write_row(r, d + 1, value.y * inverse, lse_out);
        write_row(r, d + 2, value.z * inverse, lse_out);
        write_row(r, d + 3, value.w * inverse, lse_out);
    }
}

}  // namespace tileops
