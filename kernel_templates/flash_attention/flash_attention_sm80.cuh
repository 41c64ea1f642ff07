// Flash attention forward for sm_80 and newer (sm_80/86/89; also runs on sm_90), FlashAttention-2
// style, with cp.async, ldmatrix and mma.sync m16n8k16.
//
// A block owns BM query rows of one (sequence, query head): blockIdx.y is the head, blockIdx.z the
// batch entry, blockIdx.x the query tile (reversed when causal, so the heaviest tiles start first).
// Its WARPS warps own BM / WARPS rows each (one or more m16 MMA tiles) and walk, together, the key
// tiles of BN keys that any row of the block may see. Per key tile, in each warp:
//   S = Q K^T       ldmatrix of Q (kept in shared memory, read by its own warp only) and K,
//                   mma.m16n8k16 into fp32 accumulators; raw (unscaled) scores;
//   P = softmax(S)  online, in registers: masked scores become -inf (only on tiles that need a
//                   mask), the row max over the quad that holds a row, exp2 with the scale folded in,
//                   the running sum and output rescaled when the max grows;
//   O += P V        P packed to 16 bits in place: the m16n8 accumulators of two adjacent key
//                   blocks are exactly the A fragment of the m16n8k16 MMA (no shared-memory round
//                   trip); V's B fragments with ldmatrix.trans from the row-major V tile.
// The epilogue divides by the row sums, stages O through the warp's own (no longer needed) Q rows
// and writes 16-byte row pieces; lse (natural log) per row when requested.
//
// Loads: Q once, then K and V tiles through rings of STAGES buffers each, every tile its own
// cp.async group, in the order K0 (with Q), V0, K1, V1, ... While the scores of tile i are computed,
// V of tile i + STAGES - 1 is loading; while its P V runs, K of tile i + STAGES. (With STAGES = 1
// this is FlashAttention-2's single K and V buffer: each load overlaps the other half of the work.)
// Rows past a sequence's end (queries, keys and values) are zero-filled by cp.async and never
// stored; key tiles outside the range the block's rows may see are not loaded at all.
//
// Shared memory: (BM * Q pitch + STAGES * BN * (K pitch + V pitch)) * sizeof(T) bytes, dynamic: the
// Q tile, STAGES K tiles, STAGES V tiles, each row-major with XOR-swizzled 16-byte chunks
// (flash_sm80_offset), so ldmatrix (plain and transposed) and the cp.async stores are free of bank
// conflicts. A row's pitch is its head dim rounded up to 64 elements (the swizzle permutes the
// chunks of 128-byte lines); the columns past the head dim are never written nor read. The Q tile
// also stages the output rows: its pitch is the larger of the two.
//
// Template parameters: T (__half, __nv_bfloat16), HEAD_DIM (of Q and K) and HEAD_DIM_V (of V and
// O): multiples of 16 up to 256, BM (query rows per
// block; BM / WARPS a multiple of 16), BN (keys per tile: 32, 64, 128), WARPS, STAGES (1 to 3 K/V
// buffers; 2 is the main case), CAUSAL, WINDOW (mask options; see common/attention.cuh).
//
// Intended configurations, HEAD_DIM: BM x BN, WARPS, STAGES (registers per thread, sm_80, ptxas of
// CUDA 13; fp32 O accumulators per thread = (BM / WARPS / 16) * HEAD_DIM_V / 2; head dims between
// these behave like the next one up):
//   64:  128 x 64, 8 warps, 2 or 3 stages (123); 128 x 128, 8 warps (158); 128 x 64, 4 warps of 32 rows
//        (198); 64 x 64, 4 warps (123); 128 x 32, 8 warps (98); all without spills.
//   128: 128 x 64, 8 warps, 2 stages, the default (158, no spills); 64 x 64 and 64 x 128, 4 warps (162,
//        205); 128 x 32, 8 warps, 3 stages (135); 128 x 32, 4 warps of 32 rows (255, no spills);
//        128 x 64, 4 warps of 32 rows (255 and 8-12 bytes of spills, one to three 4-byte local loads per
//        key tile; the fastest of these on an H100 all the same).
//   256: 64 x 64 or 64 x 32, 4 warps, 2 stages, the default (255, no spills); 128 x 32 or 128 x 64,
//        8 warps (255, no spills) where the shared memory allows.
// Not intended: 4 warps of 32 rows with BN = 128 (spills: about 25 bytes at HEAD_DIM 64, 700 at 128)
// or with HEAD_DIM = 256 (256 O accumulators per thread: kilobytes). They compile and are correct.
// STAGES = 1 (FlashAttention-2's single K and V buffer) works and saves shared memory; 3 rarely helps.
#pragma once

#include "arch/mma_sm80.cuh"
#include "common/attention.cuh"
#include "common/types.cuh"
#include "flash_attention/flash_varlen.cuh"

namespace tileops {

// ldmatrix (plain and transposed) at a 32-bit shared-memory address: the fragment loads below use
// per-lane base addresses plus compile-time offsets, which keeps the address registers few.
__device__ __forceinline__ void flash_sm80_ldmatrix_x4(unsigned (&r)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ __forceinline__ void flash_sm80_ldmatrix_x4_trans(unsigned (&r)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// Row pitch, in elements, of a shared tile holding rows of `dim` elements: whole 128-byte lines.
__host__ __device__ constexpr int flash_sm80_pitch(int dim) { return (dim + 63) / 64 * 64; }

// Element offset of (row, col) in a shared tile of PITCH-element rows (a multiple of 64): the 16-byte
// chunks of each 128-byte line permuted (XOR with the row's low bits) so that the 8 rows one
// ldmatrix reads at the same column fall into 8 different bank groups.
template <int PITCH>
__device__ __forceinline__ int flash_sm80_offset(int row, int col) {
    static_assert(PITCH % 64 == 0, "rows of whole 128-byte lines");
    return row * PITCH + (((col >> 3) ^ (row & 7)) << 3) + (col & 7);
}

// Fragment addresses in a swizzled tile of PITCH-element rows (flash_sm80_offset<PITCH>). Every
// ldmatrix of a lane reads a row r with r % 8 == lane % 8 (the swizzle's phase) at chunk C + bit,
// where C (the chunk a matrix pair starts at) is even and `bit` (0 or 1) depends on the lane only.
// Its chunk in shared memory is (C + bit) ^ phase = (C & ~7) + ((C & 7) ^ bit ^ phase). Rows start
// at multiples of 128 bytes (the shared buffer is 128-byte aligned and rows are whole 128-byte
// lines), so address bits 4-6 are the chunk within a line: the address is the lane's base
// (its row, chunk bit ^ phase) XOR ((C & 7) << 4), plus constant multiples of 128 bytes: one
// register per operand (K and V share one where their pitches agree), one XOR per load.
template <int PITCH>
struct FlashSm80Fragments {
    unsigned base;

    __device__ __forceinline__ FlashSm80Fragments(const void* tile, int lane_row, int chunk_bit) {
        base = shared_address(tile) + static_cast<unsigned>(lane_row * PITCH * 2 + ((chunk_bit ^ (lane_row & 7)) << 4));
    }
    // The byte address of (the lane's row + row, chunk + the lane's chunk bit), for a compile-time
    // even chunk and a row multiple of 8, `extra` bytes (a multiple of 128) further.
    __device__ __forceinline__ unsigned at(int row, int chunk, unsigned extra = 0) const {
        return ((base + extra) ^ static_cast<unsigned>((chunk & 7) << 4)) +
               static_cast<unsigned>((row * PITCH + (chunk & ~7) * 8) * 2);
    }
};

// Starts the copy of ROWS x DIM elements, rows [row0, row0 + ROWS) of a sequence whose row 0
// is `rows` (rows `stride` elements apart), into the swizzled shared tile of PITCH-element rows;
// rows >= `valid_rows` are zero-filled. `any` is a valid global address for the copies that read nothing.
template <typename T, int ROWS, int DIM, int PITCH, int THREADS>
__device__ __forceinline__ void flash_sm80_load_tile(T* tile, const T* rows, long long stride, int row0,
                                                     int valid_rows, const void* any) {
    constexpr int kChunks = DIM / 8;  // 16-byte chunks per row
    if constexpr (THREADS % kChunks == 0 && ROWS % (THREADS / kChunks) == 0) {
        // Every thread copies chunks of one column, a pass covering whole rows.
        constexpr int kRowsPerPass = THREADS / kChunks;
        const int r0 = static_cast<int>(threadIdx.x) / kChunks;
        const int c = (static_cast<int>(threadIdx.x) % kChunks) * 8;
        const T* src = rows + static_cast<long long>(row0 + r0) * stride + c;
#pragma unroll
        for (int pass = 0; pass < ROWS / kRowsPerPass; ++pass) {
            const int r = pass * kRowsPerPass + r0;
            const bool valid = row0 + r < valid_rows;
            cp_async<16>(tile + flash_sm80_offset<PITCH>(r, c),
                         valid ? static_cast<const void*>(src + static_cast<long long>(pass * kRowsPerPass) * stride) : any,
                         valid ? 16 : 0);
        }
    } else {
        // A chunk count that does not divide the threads (head dim 80: 10 chunks), or a pass
        // longer than the tile: each pass copies the next THREADS chunks of the tile, in row order.
        constexpr int kTotal = ROWS * kChunks;
#pragma unroll
        for (int pass = 0; pass < (kTotal + THREADS - 1) / THREADS; ++pass) {
            const int index = pass * THREADS + static_cast<int>(threadIdx.x);
            if (kTotal % THREADS != 0 && index >= kTotal) break;
            const int r = index / kChunks, c = (index % kChunks) * 8;
            const bool valid = row0 + r < valid_rows;
            cp_async<16>(tile + flash_sm80_offset<PITCH>(r, c),
                         valid ? static_cast<const void*>(rows + static_cast<long long>(row0 + r) * stride + c) : any,
                         valid ? 16 : 0);
        }
    }
}

template <typename T, int HEAD_DIM, int HEAD_DIM_V, int BM, int BN, int WARPS, int STAGES, bool CAUSAL, bool WINDOW>
__global__ void __launch_bounds__(WARPS * 32) flash_attention_sm80_kernel(const FlashAttentionArgs p, const FlashPackedRows rows) {
    static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256, "Q/K head dims: multiples of 16 up to 256");
    static_assert(HEAD_DIM_V % 16 == 0 && HEAD_DIM_V >= 16 && HEAD_DIM_V <= 256, "V head dims: multiples of 16 up to 256");
    static_assert(BN == 32 || BN == 64 || BN == 128, "key tiles of 32, 64 or 128");
    static_assert(WARPS >= 1 && BM % WARPS == 0 && (BM / WARPS) % 16 == 0, "each warp owns a multiple of 16 rows");
    static_assert(STAGES >= 1 && STAGES <= 3, "1 to 3 K/V buffers");
    constexpr int kThreads = WARPS * 32;
    constexpr int kWarpRows = BM / WARPS;
    constexpr int kMmaM = kWarpRows / 16;     // m16 tiles per warp
    constexpr int kBlocksN = BN / 8;          // n8 blocks of scores per m tile
    constexpr int kBlocksD = HEAD_DIM_V / 8;  // n8 blocks of output per m tile
    constexpr int kPitchK = flash_sm80_pitch(HEAD_DIM), kPitchV = flash_sm80_pitch(HEAD_DIM_V);
    constexpr int kPitchQ = kPitchK > kPitchV ? kPitchK : kPitchV;  // Q, then the output rows
    constexpr int kTileK = BN * kPitchK, kTileV = BN * kPitchV;  // elements of one K or V buffer
    // Groups that may still be in flight when a tile's K (or V) must have landed: the ring's loads
    // of later tiles (see the order above).
    constexpr int kPending = 2 * STAGES - 2;

    // 128-byte aligned (dynamic shared memory starts at least that aligned): FlashSm80Fragments' XOR
    // addressing relies on it.
    extern __shared__ __align__(128) unsigned char flash_sm80_shared[];
    T* q_tile = reinterpret_cast<T*>(flash_sm80_shared);
    T* k_ring = q_tile + BM * kPitchQ;
    T* v_ring = k_ring + STAGES * kTileK;

    const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
    const int m_block = CAUSAL ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    const AttentionSequence seq = flash_sequence(p, rows, b);
    const int m0 = m_block * BM;
    if (m0 >= seq.len_q) return;  // a varlen sequence shorter than the longest
    const AttentionKeyRange range = attention_key_range<CAUSAL, WINDOW>(seq, p.window_left, m0, BM);
    const int first_tile = range.begin / BN;
    const int num_tiles = (range.end + BN - 1) / BN - first_tile;
    const int kv_head = h / p.group;
    const int q_first = static_cast<int>(seq.q_first);  // cu_seqlens are int: a 32-bit register for the epilogue

    const T* q_rows = static_cast<const T*>(p.q) + b * p.q_batch_stride + seq.q_first * p.q_row_stride +
                      h * p.q_head_stride;
    const T* k_rows = static_cast<const T*>(p.k) + b * p.k_batch_stride + seq.k_first * p.k_row_stride +
                      kv_head * p.k_head_stride;
    const T* v_rows = static_cast<const T*>(p.v) + b * p.v_batch_stride + seq.k_first * p.v_row_stride +
                      kv_head * p.v_head_stride;

    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int warp_row0 = warp * kWarpRows;  // the warp's first row in the block's tile
    // Accumulator element e of an m16n8 tile: row lane / 4 (+ 8 for e >= 2), column 2 * (lane % 4) + e % 2.
    const int quad_row = lane / 4, quad_col = (lane % 4) * 2;

    float o[kMmaM][kBlocksD][4];
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kBlocksD; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[i][j][e] = 0.0f;
    float row_max[kMmaM][2], row_sum[kMmaM][2];
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) row_max[i][half] = -INFINITY, row_sum[i][half] = 0.0f;

    if (num_tiles > 0) {
        auto load_k = [&](int index, int stage) {
            flash_sm80_load_tile<T, BN, HEAD_DIM, kPitchK, kThreads>(k_ring + stage * kTileK, k_rows, p.k_row_stride,
                                                                     (first_tile + index) * BN, seq.len_k, p.k);
        };
        auto load_v = [&](int index, int stage) {
            flash_sm80_load_tile<T, BN, HEAD_DIM_V, kPitchV, kThreads>(v_ring + stage * kTileV, v_rows, p.v_row_stride,
                                                                       (first_tile + index) * BN, seq.len_k, p.v);
        };

        // Prologue: [Q, K0], V0, K1, V1, ..., V(STAGES-2), K(STAGES-1): 2 * STAGES - 1 groups. Every
        // group is committed, empty or not, so that the waits below count the same for every tile.
        flash_sm80_load_tile<T, BM, HEAD_DIM, kPitchQ, kThreads>(q_tile, q_rows, p.q_row_stride, m0, seq.len_q, p.q);
        load_k(0, 0);
        cp_async_commit();
#pragma unroll
        for (int s = 0; s + 1 < STAGES; ++s) {
            if (s < num_tiles) load_v(s, s);
            cp_async_commit();
            if (s + 1 < num_tiles) load_k(s + 1, s + 1);
            cp_async_commit();
        }

        // Per-lane ldmatrix addresses (see each load below for the lanes' rows and chunks).
        const FlashSm80Fragments<kPitchQ> q_frag(q_tile, warp_row0 + lane % 16, lane / 16);
        // K and V: the same lanes' rows and chunks. Where their pitches agree they share K's base
        // (V's ring is a constant further): one register.
        const FlashSm80Fragments<kPitchK> k_frag(k_ring, lane % 16, lane / 16);
        const FlashSm80Fragments<kPitchV> v_frag(kPitchK == kPitchV ? k_ring : v_ring, lane % 16, lane / 16);
        constexpr unsigned kVRingBytes = kPitchK == kPitchV ? STAGES * kTileK * sizeof(T) : 0;

        int stage = 0;  // index % STAGES: the buffers of this tile
        for (int index = 0; index < num_tiles; ++index) {
            const int n0 = (first_tile + index) * BN;
            // K of this tile has landed (for every thread), and every warp is done with the previous
            // tile: its V buffer, the one the next load overwrites, is free.
            cp_async_wait<kPending>();
            __syncthreads();
            {
                const int ahead = index + STAGES - 1;
                if (ahead < num_tiles) load_v(ahead, stage == 0 ? STAGES - 1 : stage - 1);
                cp_async_commit();
            }

            // S = Q K^T (raw scores).
            float s[kMmaM][kBlocksN][4];
#pragma unroll
            for (int i = 0; i < kMmaM; ++i)
#pragma unroll
                for (int j = 0; j < kBlocksN; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[i][j][e] = 0.0f;
            const unsigned stage_bytes = static_cast<unsigned>(stage * kTileK * sizeof(T));
#pragma unroll
            for (int kk = 0; kk < HEAD_DIM; kk += 16) {
                // A (Q rows x head dims 16): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
                unsigned a[kMmaM][4];
#pragma unroll
                for (int i = 0; i < kMmaM; ++i) flash_sm80_ldmatrix_x4(a[i], q_frag.at(i * 16, kk / 8));
#pragma unroll
                for (int j = 0; j < kBlocksN; j += 2) {
                    // B (head dims 16 x keys 8) of key blocks j and j + 1, from the keys x head dims
                    // tile: matrices (keys 0-7, k 0-7), (keys 8-15, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 8-15).
                    unsigned r[4];
                    flash_sm80_ldmatrix_x4(r, k_frag.at(j * 8, kk / 8, stage_bytes));
                    const unsigned b0[2] = {r[0], r[2]}, b1[2] = {r[1], r[3]};
#pragma unroll
                    for (int i = 0; i < kMmaM; ++i) {
                        mma_16816<T>(s[i][j], a[i], b0);
                        mma_16816<T>(s[i][j + 1], a[i], b1);
                    }
                }
            }

            // Mask (only tiles that need it: the sequence's end, the causal diagonal, the window's
            // edge, for this warp's rows). Row r sees the keys [lo, hi) with lo = r + offset - window
            // (window) and hi = min(len_k, r + offset + 1) (causal; else len_k): range.visible, with
            // the bounds made relative to this thread's first column, so each element is two
            // compares against constants.
            if (range.tile_needs_mask<CAUSAL, WINDOW>(m0 + warp_row0, kWarpRows, n0, BN)) {
                const int col0 = n0 + quad_col;
#pragma unroll
                for (int i = 0; i < kMmaM; ++i)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const int key_pos = m0 + warp_row0 + i * 16 + quad_row + half * 8 + range.offset - col0;
                        const int lo = WINDOW ? key_pos - range.window : -1;
                        const int hi = CAUSAL ? min(range.len_k - col0, key_pos + 1) : range.len_k - col0;
#pragma unroll
                        for (int j = 0; j < kBlocksN; ++j)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int c = j * 8 + e;
                                if (c < lo || c >= hi) s[i][j][2 * half + e] = -INFINITY;
                            }
                    }
            }

            // Online softmax: the new row max (over the quad holding each row), the previous sum
            // and output brought to it, then p = exp2(s * scale_log2 - max * scale_log2).
#pragma unroll
            for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    float m = row_max[i][half];
#pragma unroll
                    for (int j = 0; j < kBlocksN; ++j) m = fmaxf(m, fmaxf(s[i][j][2 * half], s[i][j][2 * half + 1]));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                    const float rescale = attention_rescale(row_max[i][half], m, p.scale_log2);
                    row_max[i][half] = m;
                    const float shift = attention_shift(m, p.scale_log2);
                    float sum = row_sum[i][half] * rescale;
#pragma unroll
                    for (int j = 0; j < kBlocksN; ++j) {
#pragma unroll
                        for (int e = 2 * half; e < 2 * half + 2; ++e) {
                            const float x = fast_exp2(fmaf(s[i][j][e], p.scale_log2, -shift));
                            s[i][j][e] = x;
                            sum += x;
                        }
                    }
                    row_sum[i][half] = sum;  // this thread's part of the row (the quad is summed at the end)
#pragma unroll
                    for (int j = 0; j < kBlocksD; ++j) {
                        o[i][j][2 * half] *= rescale;
                        o[i][j][2 * half + 1] *= rescale;
                    }
                }
            }

            // P as the A fragments of BN / 16 MMAs (keys 16 kk ... 16 kk + 15): registers (row g,
            // keys 0-1 of the quad's pair), (row g + 8, same), (row g, keys + 8), (row g + 8, keys + 8)
            // are the accumulators of key blocks 2 kk and 2 kk + 1.
            unsigned pf[kMmaM][BN / 16][4];
#pragma unroll
            for (int i = 0; i < kMmaM; ++i)
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    pf[i][kk][0] = pack_pair<T>(s[i][2 * kk][0], s[i][2 * kk][1]);
                    pf[i][kk][1] = pack_pair<T>(s[i][2 * kk][2], s[i][2 * kk][3]);
                    pf[i][kk][2] = pack_pair<T>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
                    pf[i][kk][3] = pack_pair<T>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
                }

            // V of this tile has landed, and every warp is done with this tile's K buffer: the next
            // load into it may start.
            cp_async_wait<kPending>();
            __syncthreads();
            {
                const int ahead = index + STAGES;
                if (ahead < num_tiles) load_k(ahead, stage);
                cp_async_commit();
            }

            // O += P V.
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
                for (int j = 0; j < kBlocksD; j += 2) {
                    // B (keys 16 x head dims 8) of output blocks j and j + 1 from the keys x head dims
                    // tile, transposed: matrices (keys 0-7, dims 0-7), (keys 8-15, dims 0-7),
                    // (keys 0-7, dims 8-15), (keys 8-15, dims 8-15).
                    unsigned r[4];
                    flash_sm80_ldmatrix_x4_trans(r, v_frag.at(kk * 16, j, kVRingBytes + static_cast<unsigned>(stage * kTileV * sizeof(T))));
                    const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                    for (int i = 0; i < kMmaM; ++i) {
                        mma_16816<T>(o[i][j], pf[i][kk], b0);
                        mma_16816<T>(o[i][j + 1], pf[i][kk], b1);
                    }
                }
            }
            stage = stage + 1 == STAGES ? 0 : stage + 1;
        }
        cp_async_wait<0>();  // only empty groups can be left; nothing may land after the epilogue's writes
    }

    // Each row's sum over its quad; O / sum (0 for a row that saw no key), staged in the warp's own Q
    // rows (only this warp ever read them) and stored in 16-byte pieces; rows past the end are not stored.
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float sum = row_sum[i][half];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inverse = sum > 0.0f ? __fdividef(1.0f, sum) : 0.0f;  // sum >= 1 when > 0
            const int local = warp_row0 + i * 16 + quad_row + half * 8;
#pragma unroll
            for (int j = 0; j < kBlocksD; ++j)
                *reinterpret_cast<unsigned*>(q_tile + flash_sm80_offset<kPitchQ>(local, j * 8 + quad_col)) =
                    pack_pair<T>(o[i][j][2 * half] * inverse, o[i][j][2 * half + 1] * inverse);
            const int row = m0 + local;
            if (p.lse != nullptr && lane % 4 == 0 && row < seq.len_q)
                p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + (q_first + row)] =
                    attention_lse(row_max[i][half], sum, p.scale);
        }
    }
    __syncwarp();

    T* o_rows = static_cast<T*>(p.o) + b * p.o_batch_stride + static_cast<long long>(q_first) * p.o_row_stride +
              h * p.o_head_stride;
    constexpr int kChunks = HEAD_DIM_V / 8;  // 16-byte chunks per output row
    static_assert((kWarpRows * kChunks) % 32 == 0, "the warp's rows are stored in whole passes");
#pragma unroll
    for (int pass = 0; pass < kWarpRows * kChunks / 32; ++pass) {
        const int idx = pass * 32 + lane;
        const int local = warp_row0 + idx / kChunks, c = (idx % kChunks) * 8;
        const int row = m0 + local;
        if (row < seq.len_q)
            *reinterpret_cast<uint4*>(o_rows + static_cast<long long>(row) * p.o_row_stride + c) =
                *reinterpret_cast<const uint4*>(q_tile + flash_sm80_offset<kPitchQ>(local, c));
    }
}

}  // namespace tileops
