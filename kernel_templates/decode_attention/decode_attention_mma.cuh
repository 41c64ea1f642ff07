// Decode attention on the tensor cores (mma.sync m16n8k16, sm_80 and newer): the same op, grid
// and split-KV merge as the CUDA-core kernel of decode_attention.cuh. The MMAs per key do not
// depend on how many of the 16 rows are real, so it serves GQA groups, speculative query tokens
// and, once batch x kv heads fills the GPU, MHA (one row per KV head).
//
// The 16 rows of a CTA are the M dimension of both products: S = Q K^T (16 rows x TILE keys) and
// O += P V (16 rows x HEAD_DIM). A row is one (query token, query head) of the KV head; rows past
// the problem's are zero and see no key. Each warp walks its own tiles of TILE keys (tile t of
// the split goes to warp t % WARPS) with its own online softmax, streaming the tiles' keys and
// values through its own ring of STAGES stages in shared memory with cp.async (STAGES - 1 tiles
// ahead). Only the warp's lanes touch its ring, so a __syncwarp orders copies and reads: no CTA
// barrier in the loop. Per 16 keys and head dim 128, a warp issues 32 MMAs and 16 ldmatrix (S and
// P V together) where the CUDA-core kernel spends about a thousand instructions: the loop is
// bound by the loads.
//
// Rows split over the warps (ROW_WARPS): where a KV head has many rows (large GQA groups times
// speculative query tokens: Falcon's 71 query heads on one KV head at 4 tokens are 284 rows), 16
// rows a CTA stream the same keys once per 16 rows. With ROW_WARPS each warp owns 16 rows of the
// CTA's 16 x WARPS and all warps read every tile of the split from one ring shared by the CTA:
// every thread copies its share of a tile, and one CTA barrier a tile both publishes the tile and
// frees the stage the next copies overwrite. A warp's registers are those of the other mode (16
// rows each), and its result needs no merge with the other warps'. The re-reads are served by L2
// and do not bound the per-warp mode (docs/perf/decode_attention.md measures both): ROW_WARPS
// wins only where a KV head's rows fill its CTAs and the batch keeps enough bytes in flight, so
// the heuristic leaves it to the tuner.
//
// Latency, which decides small problems (batch 1: each CTA streams a few hundred keys): the first
// tiles' copies start as soon as the sequence length is known, before Q is staged; with a paged
// cache, a warp loads the page numbers of 16-32 tiles at once, a batch ahead, so that it never
// waits for the page table in front of a copy.
//
// Rows of the ring are laid out for ldmatrix without bank conflicts (DecodeTileRows); keys feed S
// as the column operand, values feed O through ldmatrix.trans, P goes from S's accumulators to O's
// row operand in registers (the FlashAttention-2 layout).
//
// An fp8 e4m3 cache (decode_attention_mma_fp8_kernel) streams its codes through the ring, half the
// bytes, and each warp widens a tile to T in a tile of its own (DecodeTileRows) before the MMAs
// read it: e4m3 values are exact in fp16 and bf16, so the products are those of the 16-bit kernel
// on the dequantized cache. The host folds the key scale into `scale`; `v_scale` multiplies the
// accumulated output once.
//
// Template parameters: T query/output type, and key/value type of a 16-bit cache (__half or
// __nv_bfloat16), HEAD_DIM (a multiple of 16 up to 256), WARPS, TILE keys per warp iteration (16
// or 32), STAGES, PAGE_SIZE tokens per page (0: contiguous), BALANCED the batch's keys cut into
// chunks by the lengths (decode.cuh), ROW_WARPS the warps split the rows, not the keys.
// Shared memory: the query tile (static, 16 x STRIDE elements, STRIDE = DecodeTileRows::STRIDE)
// and, dynamic, the larger of the rings (WARPS * STAGES * 2 * TILE * STRIDE elements plus a word
// per warp and stage; fp8: WARPS * STAGES * 2 * TILE * HEAD_DIM codes, then the warps' widened
// tiles, WARPS * 2 * TILE * STRIDE elements, then the words; with ROW_WARPS one ring for the CTA,
// the widened tiles still one a warp) and the warps' partial results (WARPS * 16 * (HEAD_DIM + 2)
// floats). With ROW_WARPS the query tile has 16 x WARPS rows.
#pragma once

#include "arch/mma_sm80.cuh"
#include "common/attention.cuh"
#include "common/fp8.cuh"
#include "common/infinity.cuh"
#include "common/types.cuh"
#include "decode_attention/decode.cuh"

namespace tileops {

// How a tile of rows of HEAD_DIM 16-bit elements (queries, keys or values) lies in shared memory,
// where ldmatrix reads 8 rows at a time at the same 16-byte chunk of each: those 8 chunks must fall
// into 8 different bank groups (16 bytes of the 128-byte bank line each). Rows of 4, 8, 16 or 32
// chunks are XOR-swizzled (swizzled_offset), unpadded. An XOR permutes a row only when its chunks
// are a power of two, so any other row (head dims 16, 48, 80, 96, 112, 160, 192, ...: an even
// number of chunks) is padded by one chunk instead: with an odd stride in chunks, 8 consecutive
// rows put the same chunk into 8 different bank groups, at the cost of one chunk a row.
template <int HEAD_DIM>
struct DecodeTileRows {
    static constexpr int CHUNKS = HEAD_DIM / 8;  // 16-byte chunks of a row
    static constexpr bool SWIZZLED = CHUNKS >= 4 && (CHUNKS & (CHUNKS - 1)) == 0;
    static constexpr int STRIDE = SWIZZLED ? HEAD_DIM : HEAD_DIM + 8;  // elements from a row to the next

    // Element offset of (row, col) in the tile.
    static __device__ __forceinline__ int offset(int row, int col) {
        if constexpr (SWIZZLED) return swizzled_offset<HEAD_DIM>(row, col);
        return row * STRIDE + col;
    }
};

// Two values from a half pair, as a pair of T: e4m3 values are exact in both 16-bit types.
template <typename T>
__device__ __forceinline__ unsigned from_half_pair(__half2 h);
template <>
__device__ __forceinline__ unsigned from_half_pair<__half>(__half2 h) {
    return *reinterpret_cast<const unsigned*>(&h);
}
template <>
__device__ __forceinline__ unsigned from_half_pair<__nv_bfloat16>(__half2 h) {
    const float2 f = __half22float2(h);
    return pack_pair<__nv_bfloat16>(f.x, f.y);
}

// Widens 8 e4m3 codes to T, a pair at a time (one cvt per pair to halves on sm_89 and newer).
// Integer bit moves and one multiply per pair instead (no cvt) measured no faster: the widening
// is not what bounds the kernel (docs/perf/decode_attention.md).
template <typename T>
__device__ __forceinline__ uint4 widen_e4m3(uint2 codes) {
    const unsigned words[2] = {codes.x, codes.y};
    unsigned out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const auto pair = static_cast<__nv_fp8x2_storage_t>(words[i / 2] >> (16 * (i % 2)));
        out[i] = from_half_pair<T>(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
    }
    return {out[0], out[1], out[2], out[3]};
}

// The kernels' body; TKV is T for a 16-bit cache, __nv_fp8_e4m3 for an fp8 one.
template <typename T, typename TKV, int HEAD_DIM, int WARPS, int TILE, int STAGES, int PAGE_SIZE, bool BALANCED,
          bool ROW_WARPS>
__device__ __forceinline__ void decode_attention_mma(
    const T* __restrict__ q, long long q_batch_stride, long long q_token_stride, long long q_head_stride,
    const TKV* __restrict__ k, const TKV* __restrict__ v, long long kv_outer_stride, long long kv_token_stride,
    long long kv_head_stride, const int* __restrict__ lengths, const int* __restrict__ page_table,
    long long page_table_stride, int num_pages, int max_kv_len, T* __restrict__ out, long long o_batch_stride,
    long long o_token_stride, long long o_head_stride, float* __restrict__ lse, int group, int q_len, int window_left,
    float scale, float softcap, float* workspace, float v_scale) {
    constexpr int ROWS = ROW_WARPS ? 16 * WARPS : 16;
    // Rings and partial results: one per warp, or (ROW_WARPS) one for the CTA.
    constexpr int RINGS = ROW_WARPS ? 1 : WARPS, PARTS = ROW_WARPS ? 1 : WARPS;
    // A warp's iterations take tiles TILE_STRIDE apart (every tile with ROW_WARPS).
    constexpr int TILE_STRIDE = ROW_WARPS ? 1 : WARPS;
    using Rows = DecodeTileRows<HEAD_DIM>;
    constexpr int CHUNKS = Rows::CHUNKS;             // 16-byte chunks of a row of T (the query tile's, the MMAs')
    constexpr bool FP8 = sizeof(TKV) == 1;
    constexpr int CHUNK_ELEMS = 16 / sizeof(TKV);    // cache elements in 16 bytes
    constexpr int KV_CHUNKS = HEAD_DIM / CHUNK_ELEMS;  // 16-byte chunks of a key row in the cache
    // A copy (one 16-byte chunk per lane) moves BLOCK_CHUNKS consecutive chunks of ROWS_PER_COPY
    // key rows: a row's whole width where it is a power of two (head dims 16, 32, 64, 128, 256),
    // else 8 chunks (whole 128-byte lines: 192 is three of them) where they divide the row. So a
    // lane has the same place in every copy and only constants vary. Other rows (80: 10 chunks)
    // would leave pieces of 32 or 64 bytes, which streamed at 63-78% of the copy bandwidth against
    // 94% for lines (H200, GQA 32/8): there a copy moves the tile's next 32 chunks in row order,
    // each lane's row and column computed per copy, and rows are read whole.
    constexpr int LINE_CHUNKS = KV_CHUNKS & -KV_CHUNKS;  // the widest power of two dividing a row's chunks
    constexpr bool BLOCKED = LINE_CHUNKS == KV_CHUNKS || LINE_CHUNKS >= 8;
    constexpr int BLOCK_CHUNKS = LINE_CHUNKS == KV_CHUNKS ? KV_CHUNKS : 8;
    constexpr int BLOCKS = KV_CHUNKS / BLOCK_CHUNKS;  // blocks of a row
    constexpr int ROWS_PER_COPY = BLOCKED ? 32 / BLOCK_CHUNKS : 1;
    constexpr int COPIES = TILE * KV_CHUNKS / 32;    // chunks a lane copies per tile, of keys and of values
    constexpr int LANE_COPIES = ROW_WARPS ? COPIES / WARPS : COPIES;  // ROW_WARPS: the warps share a tile's
    constexpr int PAGE_SPAN = PAGE_SIZE > 0 && PAGE_SIZE < TILE ? PAGE_SIZE : TILE;  // keys sharing a page lookup
    constexpr int PAGES = TILE / PAGE_SPAN;          // page lookups per tile
    constexpr int S_TILES = TILE / 8;                // n-tiles of S
    constexpr int D_STEPS = HEAD_DIM / 16;           // k-steps of Q K^T
    constexpr int O_TILES = HEAD_DIM / 8;            // n-tiles of O
    constexpr int TILE_ELEMS = TILE * Rows::STRIDE;  // a tile of T for the MMAs
    constexpr int RING_TILE = FP8 ? TILE * HEAD_DIM : TILE_ELEMS;  // a tile in the ring (fp8: dense codes)
    static_assert(TILE == 16 || TILE == 32, "TILE is 16 or 32 keys");
    static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM <= 256, "head dim a multiple of 16 up to 256");
    static_assert(TILE * KV_CHUNKS % 32 == 0, "a tile is a whole number of copies per lane");
    static_assert(!ROW_WARPS || (COPIES % WARPS == 0 && STAGES >= 2), "ROW_WARPS: whole copies per warp, 2+ stages");
    static_assert(ROWS_PER_COPY <= TILE, "a copy stays in one tile");
    static_assert(PAGES <= 2, "a tile spans at most two page spans (pages of 16 keys or more)");

    const KvChunk work = decode_work<BALANCED, TILE>(lengths, max_kv_len, q_len, window_left);
    if (!work.active) return;
    const int split = work.split, num_splits = work.num_splits;
    const int total_rows = group * q_len;
    const int row_blocks = (total_rows + ROWS - 1) / ROWS;
    const int kv_head = work.column / row_blocks;
    const int row0 = (work.column % row_blocks) * ROWS;
    const int batch = work.batch;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int ring_index = ROW_WARPS ? 0 : warp;  // this warp's ring and its place in the tile order
    const int warp_row0 = ROW_WARPS ? 16 * warp : 0;  // this warp's first row of the CTA's
    const int quad_row = lane / 4, quad_col = 2 * (lane % 4);  // accumulator fragment coordinates

    // Lengths past the cache's capacity are clamped so that no read leaves it.
    int len = lengths[batch];
    len = len < 0 ? 0 : len > max_kv_len ? max_kv_len : len;

    __shared__ __align__(128) T q_tile[ROWS * Rows::STRIDE];
    // The load rings, [RINGS][STAGES][keys, values][RING_TILE], (fp8) the warps' widened tiles,
    // [WARPS][keys, values][TILE_ELEMS], then a word of valid pages per ring and stage; after the
    // loop, the warps' partial results (decode_finish).
    extern __shared__ __align__(128) unsigned char shared[];
    TKV* ring = reinterpret_cast<TKV*>(shared) + ring_index * STAGES * 2 * RING_TILE;
    T* widened = reinterpret_cast<T*>(reinterpret_cast<TKV*>(shared) + RINGS * STAGES * 2 * RING_TILE) + warp * 2 * TILE_ELEMS;
    unsigned* page_flags = reinterpret_cast<unsigned*>(reinterpret_cast<T*>(reinterpret_cast<TKV*>(shared) +
                                                                            RINGS * STAGES * 2 * RING_TILE) +
                                                       (FP8 ? WARPS * 2 * TILE_ELEMS : 0)) +
                           ring_index * STAGES;
    float* warp_out = reinterpret_cast<float*>(shared);

    // This thread's two accumulator rows, and the keys they see.
    const VisibleKeys keys_lo = visible_keys(row0 + warp_row0 + quad_row, total_rows, group, q_len, len, window_left);
    const VisibleKeys keys_hi = visible_keys(row0 + warp_row0 + quad_row + 8, total_rows, group, q_len, len, window_left);
    const DecodeKeyRange range = decode_key_range<ROWS>(row0, total_rows, group, q_len, len, window_left, max_kv_len);
    const int kv_begin = range.any.begin, kv_end = range.any.end;

    // This split's tiles, aligned to TILE keys so that a tile lies in one page (or in TILE /
    // PAGE_SIZE whole pages).
    const int first_tile = kv_begin / TILE;
    const int tiles = kv_end > kv_begin ? (kv_end + TILE - 1) / TILE - first_tile : 0;
    const int split_tiles = (tiles + num_splits - 1) / num_splits;
    const int tile_begin = first_tile + split * split_tiles;
    const int tile_end = min(tile_begin + split_tiles, first_tile + tiles);
    const int iterations =
        tile_end > tile_begin + ring_index ? (tile_end - tile_begin - ring_index + TILE_STRIDE - 1) / TILE_STRIDE : 0;
    const float score_scale = scale * (softcap > 0.0f ? 1.0f : kDecodeLog2e);

    const int* pages_of_sequence = PAGE_SIZE > 0 ? page_table + batch * page_table_stride : nullptr;
    // Blocked copies: this lane's element offset inside a tile's keys (its row and chunk of the
    // first copy, and the KV head). Copy i is a constant number of copy_steps (ROWS_PER_COPY rows)
    // and chunks further; only the tile's (or page span's) start varies. Otherwise only the KV
    // head's offset is fixed.
    const int lane_row = lane / BLOCK_CHUNKS, lane_chunk = lane % BLOCK_CHUNKS;
    const long long lane_offset =
        (BLOCKED ? lane_row * kv_token_stride + lane_chunk * CHUNK_ELEMS : 0) + kv_head * kv_head_stride;
    const long long copy_step = ROWS_PER_COPY * kv_token_stride;
    static_assert(PAGE_SPAN % ROWS_PER_COPY == 0, "a copy's rows lie in one page span");

    // Page-table entries, fetched a whole batch of iterations ahead: lane j of the warp holds the
    // entry of page j % PAGES of the batch's iteration j / PAGES (-1 past the split or the
    // sequence), and a tile takes its entries from the lanes with a shuffle. One load per 32 / PAGES
    // tiles, issued that many tiles before it is needed: a load just one tile ahead queues behind
    // the copies in a saturated memory system and then delays the next tile's copies. Tokens are
    // never negative: unsigned division by the page size is a shift.
    constexpr int BATCH_ITERATIONS = 32 / PAGES;
    auto fetch_pages = [&](int batch_index) {
        const int it = batch_index * BATCH_ITERATIONS + lane / PAGES;
        const int token = (tile_begin + ring_index + it * TILE_STRIDE) * TILE + (lane % PAGES) * PAGE_SPAN;
        return it < iterations && token < kv_end
                   ? __ldg(pages_of_sequence + static_cast<unsigned>(token) / (PAGE_SIZE > 0 ? PAGE_SIZE : 1))
                   : -1;
    };
    int pages_now = -1, pages_next = -1;  // this batch's entries and the next one's
    if constexpr (PAGE_SIZE > 0) {
        pages_now = fetch_pages(0);
        pages_next = fetch_pages(1);
    }

    // Starts the copies of iteration `it` into its stage (zero-filled past the end), and records
    // which of the tile's pages are valid: a bad page table entry reads nothing and is masked.
    // Iterations are issued in order, by the whole warp (the shuffles need every lane; with
    // ROW_WARPS by every warp, each copying its share of the tile). The address
    // of each page span is computed once per tile (a tile lies in one page, or spans whole pages), so
    // a copy adds only constants (a multiple of copy_step and a chunk offset).
    auto issue = [&](int it) {
        const int stage = it % STAGES;
        const int base = (tile_begin + ring_index + it * TILE_STRIDE) * TILE;
        const bool live = it < iterations;
        const unsigned in_batch = static_cast<unsigned>(it) % BATCH_ITERATIONS;
        if (PAGE_SIZE > 0 && in_batch == 0 && it > 0) {
            pages_now = pages_next;
            pages_next = fetch_pages(it / BATCH_ITERATIONS + 1);
        }
        long long span_offset[PAGES];
        unsigned valid_pages = 0;
#pragma unroll
        for (int p = 0; p < PAGES; ++p) {
            const int token = base + p * PAGE_SPAN;
            bool ok = live && token < kv_end;
            if constexpr (PAGE_SIZE > 0) {
                const int page = __shfl_sync(0xffffffffu, pages_now, in_batch * PAGES + p);
                ok = ok && page >= 0 && page < num_pages;
                const unsigned in_page = PAGE_SIZE > TILE ? static_cast<unsigned>(base) % PAGE_SIZE : 0u;
                span_offset[p] = static_cast<long long>(ok ? page : 0) * kv_outer_stride + in_page * kv_token_stride;
            } else {
                span_offset[p] = batch * kv_outer_stride + static_cast<long long>(token) * kv_token_stride;
            }
            span_offset[p] += lane_offset;
            valid_pages |= ok ? 1u << p : 0u;
        }
        TKV* stage_k = ring + stage * 2 * RING_TILE;
#pragma unroll
        for (int lane_copy = 0; lane_copy < LANE_COPIES; ++lane_copy) {
            const int i = ROW_WARPS ? warp * LANE_COPIES + lane_copy : lane_copy;  // the copy of the tile
            if constexpr (BLOCKED) {
                const int first_row = i / BLOCKS * ROWS_PER_COPY, first_chunk = i % BLOCKS * BLOCK_CHUNKS;
                const int p = first_row / PAGE_SPAN;
                const int row = first_row + lane_row, chunk = first_chunk + lane_chunk;
                const int token = base + row;
                const bool valid = ((valid_pages >> p) & 1u) && token >= kv_begin && token < kv_end;
                const long long at = valid ? span_offset[p] + (first_row % PAGE_SPAN / ROWS_PER_COPY) * copy_step +
                                                 first_chunk * CHUNK_ELEMS
                                           : 0;
                // fp8 codes lie densely in the ring; T lies as the MMAs read it. (Written out, not
                // as a lambda: a lambda here changed the 16-bit kernels' instruction schedule.)
                const int offset = FP8 ? row * HEAD_DIM + chunk * CHUNK_ELEMS : Rows::offset(row, chunk * 8);
                cp_async<16>(stage_k + offset, k + at, valid ? 16 : 0);
                cp_async<16>(stage_k + RING_TILE + offset, v + at, valid ? 16 : 0);
            } else {
                const int index = i * 32 + lane, row = index / KV_CHUNKS, chunk = index % KV_CHUNKS;
                const int p = PAGES > 1 && row >= PAGE_SPAN ? 1 : 0;
                const int token = base + row;
                const bool valid = ((valid_pages >> p) & 1u) && token >= kv_begin && token < kv_end;
                const long long span = p ? span_offset[PAGES - 1] : span_offset[0];
                const long long at = valid ? span + (row % PAGE_SPAN) * kv_token_stride + chunk * CHUNK_ELEMS : 0;
                const int offset = FP8 ? row * HEAD_DIM + chunk * CHUNK_ELEMS : Rows::offset(row, chunk * 8);
                cp_async<16>(stage_k + offset, k + at, valid ? 16 : 0);
                cp_async<16>(stage_k + RING_TILE + offset, v + at, valid ? 16 : 0);
            }
        }
        if (lane == 0 && (!ROW_WARPS || warp == 0)) page_flags[stage] = valid_pages;
        cp_async_commit();
    };

    // The first tiles' copies go out before Q is staged: at batch 1 a CTA streams only a few
    // hundred keys, and Q's load latency then overlaps them instead of delaying them.
#pragma unroll
    for (int it = 0; it < STAGES - 1; ++it) issue(it);

    for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += WARPS * 32) {
        const int r = idx / CHUNKS, c = idx % CHUNKS, row = row0 + r;
        // Element loads: q need only be aligned to its element.
        T values[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) values[e] = from_float<T>(0.0f);
        if (row < total_rows) {
            const int token = row / group, head = kv_head * group + row % group;
            const T* src = q + batch * q_batch_stride + token * q_token_stride + head * q_head_stride + c * 8;
#pragma unroll
            for (int e = 0; e < 8; ++e) values[e] = src[e];
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) q_tile[Rows::offset(r, c * 8) + e] = values[e];
    }

    __syncthreads();  // q_tile

    // Q as the row operand of S = Q K^T: held in registers for the whole loop (HEAD_DIM / 4 of
    // them) up to head dim 192, where ptxas still fits it beside O's accumulators at about 240
    // registers; above, the register file is full (208: 248-255) and the accumulators would spill,
    // so there it is read per tile.
    constexpr bool Q_IN_REGISTERS = HEAD_DIM <= 192;
    auto load_q = [&](unsigned (&frag)[4], int kk) {
        const int matrix = lane / 8;
        ldmatrix_x4(frag, q_tile + Rows::offset(warp_row0 + (matrix & 1) * 8 + lane % 8, kk * 16 + (matrix >> 1) * 8));
    };
    unsigned q_frag[Q_IN_REGISTERS ? D_STEPS : 2][4];
    if constexpr (Q_IN_REGISTERS) {
#pragma unroll
        for (int kk = 0; kk < D_STEPS; ++kk) load_q(q_frag[kk], kk);
    }
    float m[2] = {kNegativeInfinity, kNegativeInfinity}, l[2] = {0.0f, 0.0f};  // rows quad_row and quad_row + 8
    float o[O_TILES][4];
#pragma unroll
    for (int n = 0; n < O_TILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;

    for (int it = 0; it < iterations; ++it) {
        if constexpr (ROW_WARPS) {
            // One barrier: every thread's copies of this tile have landed, and every warp is done
            // with the previous tile, whose stage the next copies overwrite.
            cp_async_wait<STAGES - 2>();
            __syncthreads();
            issue(it + STAGES - 1);
        } else {
            __syncwarp();  // every lane is done with the stage the next copies overwrite
            issue(it + STAGES - 1);
            cp_async_wait<STAGES - 1>();
            __syncwarp();  // the other lanes' copies of this tile are visible
        }
        const int stage = it % STAGES;
        const int base = (tile_begin + ring_index + it * TILE_STRIDE) * TILE;
        if constexpr (FP8) {
            // Widen the stage's keys and values: 8 codes a lane at a time, read in order, written
            // as one 16-byte chunk of T.
            const TKV* codes = ring + stage * 2 * RING_TILE;
            constexpr int PIECES = 2 * TILE * HEAD_DIM / 8;  // of keys, then of values
            static_assert(PIECES % 32 == 0, "a tile widens in whole steps of the warp");
#pragma unroll
            for (int i = 0; i < PIECES / 32; ++i) {
                const int piece = i * 32 + lane, half = piece / (PIECES / 2), in_half = piece % (PIECES / 2);
                const int row = in_half / (HEAD_DIM / 8), col = in_half % (HEAD_DIM / 8) * 8;
                const uint2 packed = *reinterpret_cast<const uint2*>(codes + piece * 8);
                *reinterpret_cast<uint4*>(widened + half * TILE_ELEMS + Rows::offset(row, col)) = widen_e4m3<T>(packed);
            }
            __syncwarp();  // the widened tile is visible to every lane
        }
        const T* keys = FP8 ? widened : reinterpret_cast<const T*>(ring + stage * 2 * RING_TILE);
        const T* values = keys + TILE_ELEMS;
        const unsigned valid_pages = page_flags[stage];

        // S = Q K^T: keys are the column operand (row = key, contiguous along the head dim).
        float s[S_TILES][4];
#pragma unroll
        for (int j = 0; j < S_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk + 1 < D_STEPS; kk += 2) {
            const unsigned(&qa)[4] = q_frag[Q_IN_REGISTERS ? kk : 0];
            const unsigned(&qb)[4] = q_frag[Q_IN_REGISTERS ? kk + 1 : 1];
            if constexpr (!Q_IN_REGISTERS) {
                load_q(q_frag[0], kk);
                load_q(q_frag[1], kk + 1);
            }
#pragma unroll
            for (int j = 0; j < S_TILES; ++j) {
                unsigned b[4];  // k-steps kk (b[0], b[1]) and kk + 1 (b[2], b[3])
                ldmatrix_x4(b, keys + Rows::offset(j * 8 + lane % 8, kk * 16 + (lane / 8) * 8));
                mma_16816<T>(s[j], qa, {b[0], b[1]});
                mma_16816<T>(s[j], qb, {b[2], b[3]});
            }
        }
        if constexpr (D_STEPS % 2 == 1) {  // the last k-step alone (head dims 16, 48, 80, 112, ...)
            constexpr int kk = D_STEPS - 1;
            const unsigned(&qa)[4] = q_frag[Q_IN_REGISTERS ? kk : 0];
            if constexpr (!Q_IN_REGISTERS) load_q(q_frag[0], kk);
#pragma unroll
            for (int j = 0; j < S_TILES; j += 2) {
                unsigned b[4];  // n-tiles j (b[0], b[1]) and j + 1 (b[2], b[3])
                ldmatrix_x4(b, keys + Rows::offset((j + lane / 16) * 8 + lane % 8, kk * 16 + (lane / 8 % 2) * 8));
                mma_16816<T>(s[j], qa, {b[0], b[1]});
                mma_16816<T>(s[j + 1], qa, {b[2], b[3]});
            }
        }

        // Scores in the log2 domain, masked unless every key of the tile is valid and visible to
        // every row (decided for the whole warp, so the branch does not diverge).
#pragma unroll
        for (int j = 0; j < S_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[j][e] = softcap > 0.0f ? softcap * tanhf(s[j][e] * score_scale / softcap) * kDecodeLog2e
                                         : s[j][e] * score_scale;
        const bool full = valid_pages == (1u << PAGES) - 1u && base >= range.all.begin && base + TILE <= range.all.end;
        if (!full) {
#pragma unroll
            for (int j = 0; j < S_TILES; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = j * 8 + quad_col + (e & 1), token = base + key;
                    const VisibleKeys& seen = e < 2 ? keys_lo : keys_hi;
                    const bool visible = ((valid_pages >> (key / PAGE_SPAN)) & 1u) && token >= seen.begin && token < seen.end;
                    s[j][e] = visible ? s[j][e] : kNegativeInfinity;
                }
        }

        // Online softmax per row; the four lanes of a quad hold a row's keys.
        float tile_max[2] = {kNegativeInfinity, kNegativeInfinity};
#pragma unroll
        for (int j = 0; j < S_TILES; ++j) {
            tile_max[0] = fmaxf(tile_max[0], fmaxf(s[j][0], s[j][1]));
            tile_max[1] = fmaxf(tile_max[1], fmaxf(s[j][2], s[j][3]));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
        }
        const bool grows = tile_max[0] > m[0] || tile_max[1] > m[1];
        // Rescale only when some row's maximum grows (rare after the first tiles).
        if (__any_sync(0xffffffffu, grows)) {
            float correction[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float grown = fmaxf(m[h], tile_max[h]);
                correction[h] = grown == kNegativeInfinity ? 1.0f : exp2f(m[h] - grown);
                m[h] = grown;
                l[h] *= correction[h];
            }
#pragma unroll
            for (int n = 0; n < O_TILES; ++n) {
                o[n][0] *= correction[0];
                o[n][1] *= correction[0];
                o[n][2] *= correction[1];
                o[n][3] *= correction[1];
            }
        }
        const float base_m[2] = {m[0] == kNegativeInfinity ? 0.0f : m[0], m[1] == kNegativeInfinity ? 0.0f : m[1]};
#pragma unroll
        for (int j = 0; j < S_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[j][e] = exp2f(s[j][e] - base_m[e / 2]);
                l[e / 2] += s[j][e];
            }

        // O += P V: P from S's accumulators as the row operand, values through ldmatrix.trans.
#pragma unroll
        for (int ks = 0; ks < TILE / 16; ++ks) {
            const unsigned p[4] = {pack_pair<T>(s[2 * ks][0], s[2 * ks][1]), pack_pair<T>(s[2 * ks][2], s[2 * ks][3]),
                                   pack_pair<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                   pack_pair<T>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
            const int matrix = lane / 8;
#pragma unroll
            for (int n = 0; n < O_TILES; n += 2) {
                unsigned b[4];  // n-tiles n (b[0], b[1]) and n + 1 (b[2], b[3])
                ldmatrix_x4_trans(b, values + Rows::offset(ks * 16 + (matrix & 1) * 8 + lane % 8, n * 8 + (matrix >> 1) * 8));
                mma_16816<T>(o[n], p, {b[0], b[1]});
                mma_16816<T>(o[n + 1], p, {b[2], b[3]});
            }
        }
    }

    cp_async_wait<0>();
    __syncthreads();  // the rings are reused for the warps' partial results below

    // Row sums: each lane of a quad summed its own keys.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    if constexpr (FP8) {
#pragma unroll
        for (int n = 0; n < O_TILES; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[n][e] *= v_scale;
    }
    // Each warp's 16 rows: its own partial result, or (ROW_WARPS) its rows of the CTA's one.
    const int my_row0 = ROW_WARPS ? warp_row0 : warp * ROWS;
    float* my_out = warp_out + my_row0 * HEAD_DIM;
#pragma unroll
    for (int n = 0; n < O_TILES; ++n) {
        my_out[quad_row * HEAD_DIM + n * 8 + quad_col] = o[n][0];
        my_out[quad_row * HEAD_DIM + n * 8 + quad_col + 1] = o[n][1];
        my_out[(quad_row + 8) * HEAD_DIM + n * 8 + quad_col] = o[n][2];
        my_out[(quad_row + 8) * HEAD_DIM + n * 8 + quad_col + 1] = o[n][3];
    }
    if (lane % 4 == 0) {
        float* warp_m = warp_out + PARTS * ROWS * HEAD_DIM;
        float* warp_l = warp_m + PARTS * ROWS;
        warp_m[my_row0 + quad_row] = m[0];
        warp_m[my_row0 + quad_row + 8] = m[1];
        warp_l[my_row0 + quad_row] = l[0];
        warp_l[my_row0 + quad_row + 8] = l[1];
    }
    __syncthreads();

    decode_finish<T, HEAD_DIM, ROWS, WARPS, PARTS>(warp_out, {out, o_batch_stride, o_token_stride, o_head_stride, lse,
                                                             workspace, group, q_len, row0, total_rows, kv_head,
                                                             row_blocks, work});
}

// A 16-bit cache.
template <typename T, int HEAD_DIM, int WARPS, int TILE, int STAGES, int PAGE_SIZE, bool BALANCED = false,
          bool ROW_WARPS = false>
__global__ void __launch_bounds__(WARPS * 32)
    decode_attention_mma_kernel(const T* __restrict__ q, long long q_batch_stride, long long q_token_stride,
                                long long q_head_stride, const T* __restrict__ k, const T* __restrict__ v,
                                long long kv_outer_stride,  // between sequences, or between pages when paged
                                long long kv_token_stride, long long kv_head_stride, const int* __restrict__ lengths,
                                const int* __restrict__ page_table, long long page_table_stride, int num_pages,
                                int max_kv_len, T* __restrict__ out, long long o_batch_stride, long long o_token_stride,
                                long long o_head_stride, float* __restrict__ lse, int group, int q_len,
                                int window_left, float scale, float softcap, float* workspace) {
    decode_attention_mma<T, T, HEAD_DIM, WARPS, TILE, STAGES, PAGE_SIZE, BALANCED, ROW_WARPS>(
        q, q_batch_stride, q_token_stride, q_head_stride, k, v, kv_outer_stride, kv_token_stride, kv_head_stride,
        lengths, page_table, page_table_stride, num_pages, max_kv_len, out, o_batch_stride, o_token_stride,
        o_head_stride, lse, group, q_len, window_left, scale, softcap, workspace, 1.0f);
}

// An fp8 e4m3 cache; the key scale is folded into `scale`, v_scale multiplies the output. Four
// warps on 16-key tiles up to head dim 128 are held to 168 registers (164-167 used, no spill; tiles
// of 32 keys would spill) so that three CTAs share an SM: the widening's shared-memory round trips
// want more warps in flight (H200, 256 x 32/8 x 4k contiguous with a 2-stage ring: 734 us against
// 870 at two CTAs an SM).
template <typename T, int HEAD_DIM, int WARPS, int TILE, int STAGES, int PAGE_SIZE, bool BALANCED = false,
          bool ROW_WARPS = false>
__global__ void __launch_bounds__(WARPS * 32, WARPS == 4 && TILE == 16 && HEAD_DIM <= 128 ? 3 : 1)
    decode_attention_mma_fp8_kernel(const T* __restrict__ q, long long q_batch_stride, long long q_token_stride,
                                    long long q_head_stride, const __nv_fp8_e4m3* __restrict__ k,
                                    const __nv_fp8_e4m3* __restrict__ v, long long kv_outer_stride,
                                    long long kv_token_stride, long long kv_head_stride, const int* __restrict__ lengths,
                                    const int* __restrict__ page_table, long long page_table_stride, int num_pages,
                                    int max_kv_len, T* __restrict__ out, long long o_batch_stride,
                                    long long o_token_stride, long long o_head_stride, float* __restrict__ lse,
                                    int group, int q_len, int window_left, float scale, float softcap,
                                    float* workspace, float v_scale) {
    decode_attention_mma<T, __nv_fp8_e4m3, HEAD_DIM, WARPS, TILE, STAGES, PAGE_SIZE, BALANCED, ROW_WARPS>(
        q, q_batch_stride, q_token_stride, q_head_stride, k, v, kv_outer_stride, kv_token_stride, kv_head_stride,
        lengths, page_table, page_table_stride, num_pages, max_kv_len, out, o_batch_stride, o_token_stride,
        o_head_stride, lse, group, q_len, window_left, scale, softcap, workspace, v_scale);
}

}  // namespace tileops
