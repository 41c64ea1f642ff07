// A decode batch's keys cut into chunks of about equal tokens, from the lengths the kernel reads on
// the device (decode attention, MLA decode).
//
// With splits sized by the host for the whole batch, one long sequence among short ones is
// streamed by a few CTAs while the rest of the GPU idles. Instead, a launch of the balanced kind
// has a fixed grid (columns, splits + 1, batch): a column is the kernel's unit of rows (a KV head's
// row block, say), and each column has batch x (splits + 1) chunk CTAs. At each launch the
// lengths size the chunks so that the batch holds about batch x splits of them, a sequence as
// many as its keys fill (at least one), and CTA number z * (splits + 1) + y takes chunk number
// that in batch order. The columns vary fastest, so the CTAs are dispatched chunk by chunk and
// the unused ones (past the last chunk) come last, after every CTA with work has found an SM: a
// spare CTA dispatched early would push a working one onto an SM that already holds one.
// The grid and the workspace do not depend on the lengths, so a captured CUDA graph follows them.
//
// The fixed kind (kv_chunk_fixed) is the grid (splits, columns, batch) of a single sequence.
//
// Every function here is called by a whole CTA (one-dimensional, whole warps: the scans shuffle
// across full warps) and returns the same value in every thread.
// `keys_of(b)` gives sequence b's keys, already clamped to the cache.
#pragma once

namespace tileops {

// A CTA's share: part `split` of `num_splits` of sequence `batch` in column `column` of
// `columns`; `first_chunk` numbers part 0 among a column's chunks (partial results are stored by
// chunk number, then column). `active` is false past the last chunk.
struct KvChunk {
    int batch, split, num_splits;
    long long first_chunk;
    bool active;
    int column, columns;
};

// The fixed grid (splits, columns, batch).
__device__ __forceinline__ KvChunk kv_chunk_fixed() {
    return {static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x),
            static_cast<long long>(blockIdx.z) * gridDim.x, true, static_cast<int>(blockIdx.y), static_cast<int>(gridDim.y)};
}

// A chunk holds at least this many keys: a shorter one costs more to merge than it saves.
constexpr int kKvMinChunkKeys = 128;

// What the CTA's threads share while they search: per-warp partial sums and maxima, and the answer.
// The host counts its bytes (src/core/kv_chunks.hpp).
struct KvChunkScratch {
    long long warp_sum[32];
    long long warp_max[32];
    KvChunk found;
};

// The CTA's sum and maximum of one value a thread. Every thread gets both; ends on a barrier
// after the scratch was read, so it can be reused at once.
__device__ __forceinline__ void kv_cta_sum_max(long long& sum, long long& most, KvChunkScratch& s) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        most = max(most, __shfl_xor_sync(0xffffffffu, most, offset));
    }
    if (lane == 0) s.warp_sum[warp] = sum, s.warp_max[warp] = most;
    __syncthreads();
    sum = 0, most = 0;
    for (int w = 0; w < warps; ++w) sum += s.warp_sum[w], most = max(most, s.warp_max[w]);
    __syncthreads();
}

// Finds a chunk: the one numbered `x` in batch order when x >= 0 (inactive past the last), else
// sequence `b_wanted`'s chunks (split 0, active). The chunks hold GRANULE-key granules: about
// `target_chunks` in the batch, none shorter than kKvMinChunkKeys, and no sequence in more than
// `max_chunks_per_sequence`. The whole CTA calls it, and every thread gets the answer.
//
// Every CTA of a launch searches (thousands of them at a large batch of short sequences), so the
// search is the CTA's: each thread reads one length a pass, all in flight at once, and the sizes
// and the scan of chunk counts take a few barriers. (One warp walking the batch 32 lengths at a
// time, twice, took about a third of the life of a CTA streaming ~128 keys at batch 256.)
template <int GRANULE, typename KeysOf>
__device__ KvChunk kv_chunk_search(long long x, int b_wanted, int batch_size, long long target_chunks,
                                   long long max_chunks_per_sequence, KeysOf keys_of) {
    __shared__ KvChunkScratch scratch;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    const int threads = blockDim.x;
    auto granules_of = [&](int b) { return b < batch_size ? (keys_of(b) + GRANULE - 1) / GRANULE : 0LL; };

    // The granules per chunk, from the batch's total and longest.
    long long total = 0, longest = 0;
#pragma unroll 4
    for (int b = threadIdx.x; b < batch_size; b += threads) {
        const long long granules = granules_of(b);
        total += granules;
        longest = max(longest, granules);
    }
    if (threadIdx.x == 0) scratch.found = {0, 0, 1, 0, false, 0, 0};
    kv_cta_sum_max(total, longest, scratch);
    const long long shortest = (kKvMinChunkKeys + GRANULE - 1) / GRANULE;
    const long long by_total = (total + target_chunks - 1) / max(target_chunks, 1LL);
    const long long by_longest = (longest + max_chunks_per_sequence - 1) / max_chunks_per_sequence;
    const long long chunk_granules = max(max(by_total, by_longest), shortest);

    // Chunk numbers: an exclusive scan of the sequences' chunk counts in batch order, a pass of
    // one sequence a thread at a time; the owner of the wanted chunk writes it down.
    long long before = 0;  // chunks of the passes so far
    for (int b0 = 0; b0 < batch_size; b0 += threads) {
        if (x >= 0 ? before > x : b0 > b_wanted) break;  // the same in every thread
        const int b = b0 + threadIdx.x;
        const long long own = b < batch_size ? max((granules_of(b) + chunk_granules - 1) / chunk_granules, 1LL) : 0;
        long long inclusive = own;
#pragma unroll
        for (int offset = 1; offset < 32; offset *= 2) {
            const long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (lane >= offset) inclusive += up;
        }
        if (lane == 31) scratch.warp_sum[warp] = inclusive;
        __syncthreads();
        long long first = before + inclusive - own;
        for (int w = 0; w < warps; ++w) {
            if (w < warp) first += scratch.warp_sum[w];
            before += scratch.warp_sum[w];
        }
        const bool mine = x >= 0 ? own > 0 && x >= first && x < first + own : b == b_wanted;
        if (mine) scratch.found = {b, x >= 0 ? static_cast<int>(x - first) : 0, static_cast<int>(own), first, true, 0, 0};
        __syncthreads();  // warp_sum is read before the next pass writes it; `found` is written
    }
    return scratch.found;
}

// The CTA's chunk in the balanced grid (columns, splits + 1, batch). The whole CTA calls it.
template <int GRANULE, typename KeysOf>
__device__ KvChunk kv_chunk_of_cta(long long max_chunks_per_sequence, KeysOf keys_of) {
    const int batch_size = gridDim.z;
    const long long target = static_cast<long long>(batch_size) * (gridDim.y - 1);
    const long long number = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
    KvChunk chunk = kv_chunk_search<GRANULE>(number, 0, batch_size, target, max_chunks_per_sequence, keys_of);
    chunk.column = blockIdx.x, chunk.columns = gridDim.x;
    return chunk;
}

}  // namespace tileops
