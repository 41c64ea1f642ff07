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
// Every function here is called by a whole warp (lane = threadIdx.x % 32) and returns the same
// value in every lane. `keys_of(b)` gives sequence b's keys, already clamped to the cache.
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

// Granules (GRANULE keys each) per chunk: about `target_chunks` in the batch, none shorter than
// kKvMinChunkKeys, and no sequence in more than `max_chunks_per_sequence`.
template <int GRANULE, typename KeysOf>
__device__ long long kv_chunk_granules(int batch_size, long long target_chunks, long long max_chunks_per_sequence,
                                       KeysOf keys_of) {
    const int lane = threadIdx.x % 32;
    long long total = 0, longest = 0;
    for (int b = lane; b < batch_size; b += 32) {
        const long long granules = (keys_of(b) + GRANULE - 1) / GRANULE;
        total += granules;
        longest = max(longest, granules);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        total += __shfl_xor_sync(0xffffffffu, total, offset);
        longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, offset));
    }
    const long long shortest = (kKvMinChunkKeys + GRANULE - 1) / GRANULE;
    const long long by_total = (total + target_chunks - 1) / max(target_chunks, 1LL);
    const long long by_longest = (longest + max_chunks_per_sequence - 1) / max_chunks_per_sequence;
    return max(max(by_total, by_longest), shortest);
}

// Sequence b's chunks (`b` in [0, batch_size); split 0, active) when `x` < 0; else the chunk
// numbered x (inactive past the last).
template <int GRANULE, typename KeysOf>
__device__ KvChunk kv_chunk_find(long long x, int b_wanted, int batch_size, long long chunk_granules, KeysOf keys_of) {
    const int lane = threadIdx.x % 32;
    KvChunk found{0, 0, 1, 0, false, 0, 0};
    long long before = 0;  // chunks of the sequences before this pass of 32
    for (int b0 = 0; b0 < batch_size; b0 += 32) {
        if (x >= 0 ? before > x : b0 > b_wanted) break;
        const int b = b0 + lane;
        const long long granules = b < batch_size ? (keys_of(b) + GRANULE - 1) / GRANULE : 0;
        const long long own = b < batch_size ? max((granules + chunk_granules - 1) / chunk_granules, 1LL) : 0;
        long long inclusive = own;
#pragma unroll
        for (int offset = 1; offset < 32; offset *= 2) {
            const long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (lane >= offset) inclusive += up;
        }
        const long long first = before + inclusive - own;
        const bool mine = x >= 0 ? own > 0 && x >= first && x < first + own : b == b_wanted;
        if (mine) found = {b, x >= 0 ? static_cast<int>(x - first) : 0, static_cast<int>(own), first, true};
        before += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    const unsigned owner = __ballot_sync(0xffffffffu, found.active);
    if (owner == 0) return found;
    const int from = __ffs(owner) - 1;
    return {__shfl_sync(0xffffffffu, found.batch, from), __shfl_sync(0xffffffffu, found.split, from),
            __shfl_sync(0xffffffffu, found.num_splits, from), __shfl_sync(0xffffffffu, found.first_chunk, from), true,
            0, 0};
}

// The CTA's chunk in the balanced grid (columns, splits + 1, batch). The whole CTA calls it (warp
// 0 computes, one barrier shares it).
template <int GRANULE, typename KeysOf>
__device__ KvChunk kv_chunk_of_cta(long long max_chunks_per_sequence, KeysOf keys_of) {
    __shared__ KvChunk shared_chunk;
    if (threadIdx.x < 32) {
        const int batch_size = gridDim.z;
        const long long target = static_cast<long long>(batch_size) * (gridDim.y - 1);
        const long long granules = kv_chunk_granules<GRANULE>(batch_size, target, max_chunks_per_sequence, keys_of);
        const long long number = static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y;
        KvChunk chunk = kv_chunk_find<GRANULE>(number, 0, batch_size, granules, keys_of);
        chunk.column = blockIdx.x, chunk.columns = gridDim.x;
        if (threadIdx.x == 0) shared_chunk = chunk;
    }
    __syncthreads();
    return shared_chunk;
}

}  // namespace tileops
