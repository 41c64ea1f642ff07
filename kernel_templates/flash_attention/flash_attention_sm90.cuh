// Flash attention forward for sm_90a (H100), FlashAttention-3 style.
//
// Work is a tile of BM = 64 x CONSUMERS query rows of one (sequence, query head), walking the key tiles those rows
// may see. The grid is persistent: at most one block per SM, each taking a share of the work
// tiles (causal: from a global counter, longest first; see flash_sm90_work), so that one tile's
// epilogue overlaps the next one's loads.
// Warpgroup 0 is the producer: one thread loads each work tile's Q, then K and V tiles of BN keys into
// a ring of STAGES shared buffers with TMA (128-byte swizzled boxes of 64 head-dim columns; a head
// dim that is not a multiple of 64 ends in a box whose columns past it TMA fills with zeros and
// no MMA reads), each
// K and V buffer guarded by a "full" mbarrier (bytes landed) and an "empty" one (every consumer
// warp is done with it); Q has the same pair. With two Q buffers the next work tile's Q loads
// while the consumers finish this one, so no work tile starts by waiting for its queries. Warpgroups 1.. are consumers, 64 query rows each:
//   S = Q K^T       wgmma, both operands in shared memory, fp32 accumulators in registers;
//   P = softmax(S)  online, in registers: exp2 with the scale folded in, the running max and sum
//                   per row, the output rescaled only through one multiply per tile;
//   O += P V        wgmma with P as the register A operand (packed to 16 bits in place: for
//                   16-bit types the accumulator layout is the A fragment layout) and V N-major.
// Within a consumer the two MMAs of consecutive tiles overlap the softmax: while the softmax of
// tile i runs, the tensor cores already compute S of tile i + 1's predecessor product P_{i-1} V_{i-1}.
// With PINGPONG the consumers take turns issuing their MMAs (named barriers 1, 2, ...), so that
// one warpgroup's softmax runs while another's MMAs occupy the tensor cores.
// The producer gives its registers to the consumers (setmaxnreg).
//
// TMA fills rows outside the tensor with zeros; rows of other sequences (varlen) that a tile
// covers are masked (keys) or not stored (queries). Key tiles no row of the block can see are never
// loaded (causal: above the diagonal; window: below it). Masks per element only on the tiles that
// need them.
//
// Template parameters: T (__half, __nv_bfloat16), HEAD_DIM (of Q and K) and HEAD_DIM_V (of V and
// O): multiples of 16 up to 256, BN (keys per tile: 64
// or 128), STAGES (K/V buffers in the ring), CONSUMERS (2, or 3 at head dims up to 64, where the MMAs
// per tile are cheap next to the softmax, or 1 without ping-pong: 64-row work tiles, two blocks an
// SM), Q_BUFFERS (1 or 2: the host picks 2 where they fit),
// PINGPONG, CAUSAL, WINDOW. Shared memory:
// flash_sm90_shared_bytes below (host: ops/flash_attention_config.cpp computes the same).
#pragma once

#include "arch/hopper.cuh"
#include "arch/wgmma_rs_widths.cuh"
#include "common/attention.cuh"
#include "flash_attention/flash_varlen.cuh"

namespace tileops {


// Boxes of 64 columns (128 bytes) that hold a row of `dim` elements.
__host__ __device__ constexpr int flash_sm90_boxes(int dim) { return (dim + 63) / 64; }

// Byte offsets of the descriptors' K steps of 16 elements, in 16-byte units. A K-major tile of
// ROWS x HEAD_DIM is stored as flash_sm90_boxes(HEAD_DIM) boxes of ROWS rows x 128 bytes: step kk
// lies in box kk / 4, 32 bytes into its rows.
template <int ROWS>
__device__ __forceinline__ unsigned k_major_step(int kk) {
    return static_cast<unsigned>((kk / 4) * ROWS * 128 + (kk % 4) * 32) >> 4;
}

// Masks S (64 rows x BN keys, the m64nBN accumulator layout) in place: keys a row may not see become -inf.
// Each of the thread's two rows sees the keys [lo, hi) counted from its first column, so that an
// element costs one compare against a constant (a mask per element through range.visible cost
// 4% of the causal 16 x 16 x 1k, D = 64 run).
template <bool CAUSAL, bool WINDOW, int BN>
__device__ __forceinline__ void mask_scores(float (&s)[BN / 2], const AttentionKeyRange& range, int row, int n0) {
    const int col0 = n0 + (static_cast<int>(threadIdx.x) % 4) * 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = row + half * 8;
        int hi = range.len_k - col0;
        if (CAUSAL) hi = min(hi, r + range.offset + 1 - col0);
        const int lo = WINDOW ? r + range.offset - range.window - col0 : 0;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = 8 * j + e;
                if (c >= hi || (WINDOW && c < lo)) s[4 * j + 2 * half + e] = -INFINITY;
            }
        }
    }
}

// Row max of this thread's two rows (g and g + 8) over the tile, merged into `row_max` across the quad.
template <int BN>
__device__ __forceinline__ void tile_row_max(const float (&s)[BN / 2], float (&row_max)[2]) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float m = row_max[half];
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) m = fmaxf(m, fmaxf(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        row_max[half] = m;
    }
}

// s <- exp2(s * scale_log2 - shift) per row; adds this thread's part of each row's sum to `row_sum`.
template <int BN>
__device__ __forceinline__ void exponentiate(float (&s)[BN / 2], const float (&row_max)[2], float scale_log2,
                                             float (&row_sum)[2]) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const float shift = attention_shift(row_max[half], scale_log2);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = s[4 * j + 2 * half + e];
                x = fast_exp2(fmaf(x, scale_log2, -shift));
                row_sum[half] += x;
            }
        }
    }
}

// P (64 x BN probabilities in the accumulator layout) as the A fragments of BN / 16 MMAs.
template <typename T, int BN>
__device__ __forceinline__ void pack_probabilities(const float (&s)[BN / 2], unsigned (&p)[BN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) p[kk][r] = pack_pair<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }
}

// Keeps the packed P registers alive (not reused by the compiler) until the MMA reading them is done.
template <int BN>
__device__ __forceinline__ void fence_fragments(unsigned (&p)[BN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(p[kk][r])::"memory");
}

// O (64 x HEAD_DIM_V) += P V for one step of 16 keys, P in registers, `desc_v` the step's V
// (N-major boxes of 64 columns, BN rows each): the whole boxes in one MMA, the columns left (16,
// 32 or 48 of the last box) in another, so that no MMA reads the zeros past the head dim.
template <typename T, int HEAD_DIM_V, int BN>
__device__ __forceinline__ void flash_sm90_pv_step(float (&o)[HEAD_DIM_V / 2], const unsigned (&p)[4],
                                                   unsigned long long desc_v) {
    constexpr int kWhole = HEAD_DIM_V / 64 * 64, kRest = HEAD_DIM_V % 64;
    if constexpr (kWhole > 0) wgmma_rs_m64k16<T, kWhole, 1>(reinterpret_cast<float(&)[kWhole / 2]>(o[0]), p, desc_v, 1);
    if constexpr (kRest > 0)
        wgmma_rs_m64k16<T, kRest, 1>(reinterpret_cast<float(&)[kRest / 2]>(o[kWhole / 2]), p,
                                     desc_v + (kWhole / 64) * BN * 128 / 16, 1);
}

template <typename T, int HEAD_DIM, int HEAD_DIM_V, int BN, int STAGES, int CONSUMERS, int Q_BUFFERS>
struct FlashSm90Layout {
    // A Q buffer also stages the output rows (HEAD_DIM_V wide) on their way out.
    static constexpr int kQBoxes = flash_sm90_boxes(HEAD_DIM) > flash_sm90_boxes(HEAD_DIM_V) ? flash_sm90_boxes(HEAD_DIM)
                                                                                             : flash_sm90_boxes(HEAD_DIM_V);
    static constexpr int kQ = 64 * CONSUMERS * 64 * kQBoxes;  // elements of one Q buffer: 64 query rows per consumer
    static constexpr int kK = BN * 64 * flash_sm90_boxes(HEAD_DIM);
    static constexpr int kV = BN * 64 * flash_sm90_boxes(HEAD_DIM_V);
    static constexpr size_t kBarrierOffset = (static_cast<size_t>(Q_BUFFERS) * kQ + STAGES * (kK + kV)) * sizeof(T);
    // The Q buffers, the K ring, the V ring, then barriers: q_full, q_empty (one per Q buffer),
    // full_k, full_v, empty_k, empty_v, work_full, work_empty, and the work slot; plus 1024 bytes
    // so the tiles can start on a 1024-byte boundary (the swizzle's period).
    static constexpr size_t kBytes = kBarrierOffset + (2 * Q_BUFFERS + 3 + 4 * STAGES) * 8 + 1024;
};

// The shared-memory buffers and their barriers.
template <typename T>
struct FlashSm90Shared {
    T* q;  // Q_BUFFERS buffers of Layout::kQ elements
    T* ring_k;
    T* ring_v;
    unsigned long long *q_full, *q_empty, *full_k, *full_v, *empty_k, *empty_v;
    unsigned long long *work_full, *work_empty;  // the dynamic scheduler's slot
    int* work;
};

// The work tiles of a launch: q_tiles per head, work_count in all, handed out causal in groups of
// group_heads heads (see flash_sm90_work).
struct FlashSm90Schedule {
    int q_tiles, work_count, group_heads;
};

// Causal: how many heads' work tiles are handed out longest first as one group. The longest
// tiles of the last group start last, so a group should span several waves of tiles: then the
// short tiles at its end fill the tail (16 x 16 heads x 1k, D = 64: with groups of one wave,
// the SMs idled 9% of the time, the last group a single head whose 8-tile work ran alone).
// The bound is L2: a group's K and V (kFlashGroupBytes) are read from DRAM once and reused by
// every query tile of its heads. Groups are made equal, so that the last one is not a remnant.
constexpr long long kFlashGroupBytes = 16ll << 20;
__device__ __forceinline__ int flash_sm90_group_heads(const FlashAttentionArgs& p, int q_tiles, int kv_row_bytes) {
    const int heads = p.num_heads * p.batch;
    int group = max(1, (static_cast<int>(gridDim.x) + q_tiles - 1) / q_tiles);  // at least a wave
    if (p.seqlen_k > 0) {
        // The K and V bytes per query head (a KV head serves p.group query heads, adjacent).
        const long long per_head = max(1ll, static_cast<long long>(p.seqlen_k) * kv_row_bytes / max(1, p.group));
        group = max(group, static_cast<int>(min(static_cast<long long>(heads), kFlashGroupBytes / per_head)));
    }
    group = min(group, heads);
    const int groups = (heads + group - 1) / group;
    return (heads + groups - 1) / groups;
}

// One work tile: 128 query rows of sequence b, query head h, and the key tiles they may see.
struct FlashSm90Work {
    int b, h, m0;
    AttentionSequence seq;
    AttentionKeyRange range;
    int first_tile, end_tile;  // key tiles [first_tile, end_tile); empty: the rows see no key
};

// Work tile `w` of q_tiles x num_heads x batch, handed out by FlashSm90Queue. Without a causal
// mask every tile costs the same and the query tiles of a head are adjacent (they share K and V
// in L2). With one, a tile's cost grows
// with its position in the sequence, and the order is: heads in groups (see
// flash_sm90_group_heads), each group's tiles longest first (all its heads' last query tiles,
// then the ones before), so that the last tiles handed out are short ones.
// False when the tile lies past its sequence's end (varlen sequences shorter than the longest).
template <bool CAUSAL, bool WINDOW, int BM, int BN>
__device__ __forceinline__ bool flash_sm90_work(const FlashAttentionArgs& p, const FlashPackedRows& rows, int w,
                                                const FlashSm90Schedule& schedule, FlashSm90Work& work) {
    const int q_tiles = schedule.q_tiles, group_heads = schedule.group_heads;
    int m_index, head_index;
    if (CAUSAL) {
        const int heads = p.num_heads * p.batch;
        const int group = w / (group_heads * q_tiles), first_head = group * group_heads;
        const int heads_here = min(group_heads, heads - first_head);
        const int rank = w - first_head * q_tiles;
        m_index = rank / heads_here;
        head_index = first_head + rank % heads_here;
    } else {
        m_index = w % q_tiles;
        head_index = w / q_tiles;
    }
    work.h = head_index % p.num_heads;
    work.b = head_index / p.num_heads;
    work.m0 = (CAUSAL ? q_tiles - 1 - m_index : m_index) * BM;
    work.seq = flash_sequence(p, rows, work.b);
    if (work.m0 >= work.seq.len_q) return false;
    work.range = attention_key_range<CAUSAL, WINDOW>(work.seq, p.window_left, work.m0, BM);
    work.first_tile = work.range.begin / BN;
    work.end_tile = (work.range.end + BN - 1) / BN;
    return true;
}

// Which work tiles this block takes. Dynamic: the producer thread takes the next index from the
// global counter p.scheduler[0] and hands it to the consumers through a shared slot (guarded by
// work_full / work_empty); the first index past the end stops everyone. The last block to stop
// puts the counters back to zero for the next launch. Handed out as blocks finish, the tiles even
// out SMs that run at different speeds (non-causal 1 x 16 x 16k, D = 128: 612-634 TFLOP/s with a
// static split, 651-683 dynamic). Static: b, b + gridDim.x, ..., where the producer has too few
// registers for the queue (three consumers leave it 32: the queue spills 20 bytes; causal work
// tiles need the queue all the same).
__host__ __device__ constexpr bool flash_sm90_dynamic(bool causal, int consumers) { return causal || consumers == 2; }
template <bool DYNAMIC>
struct FlashSm90Queue {
    int round = 0;
    unsigned phase = 0;

    __device__ __forceinline__ int static_index() { return round++ * static_cast<int>(gridDim.x) + static_cast<int>(blockIdx.x); }

    __device__ __forceinline__ int produce(const FlashAttentionArgs& p, volatile int* slot, unsigned long long* full,
                                           unsigned long long* empty) {
        if constexpr (!DYNAMIC) return static_index();
        const int w = atomicAdd(&p.scheduler[0], 1);
        mbarrier_wait(empty, phase ^ 1);  // every consumer warp has read the previous index
        *slot = w;
        mbarrier_arrive(full);
        phase ^= 1;
        return w;
    }
    __device__ __forceinline__ int consume(volatile int* slot, unsigned long long* full, unsigned long long* empty) {
        if constexpr (!DYNAMIC) return static_index();
        mbarrier_wait(full, phase);
        const int w = *slot;
        __syncwarp();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(empty);
        phase ^= 1;
        return w;
    }
    // The producer, after its last index.
    __device__ __forceinline__ void finish(const FlashAttentionArgs& p) {
        if constexpr (!DYNAMIC) return;
        __threadfence();
        if (atomicAdd(&p.scheduler[1], 1) == static_cast<int>(gridDim.x) - 1) {
            p.scheduler[0] = 0;
            p.scheduler[1] = 0;
        }
    }
};

// A stage index and the phase (parity) of its barriers, stepping round the ring.
template <int STAGES>
struct RingPosition {
    int stage = 0;
    unsigned phase = 0;
    __device__ __forceinline__ void advance() {
        if (++stage == STAGES) stage = 0, phase ^= 1;
    }
};

// The producer's single thread: Q, then K and V tiles, of every work tile of this block.
template <typename T, int HEAD_DIM, int HEAD_DIM_V, int BN, int STAGES, int CONSUMERS, int Q_BUFFERS, bool CAUSAL,
          bool WINDOW>
__device__ __forceinline__ void flash_sm90_produce(const FlashAttentionArgs& p, const FlashPackedRows& rows,
                                                   const TensorMap* map_q, const TensorMap* map_k, const TensorMap* map_v,
                                                   const FlashSm90Shared<T>& sh, const FlashSm90Schedule& schedule) {
    using Layout = FlashSm90Layout<T, HEAD_DIM, HEAD_DIM_V, BN, STAGES, CONSUMERS, Q_BUFFERS>;
    constexpr int BM = 64 * CONSUMERS;
    constexpr int kBoxesK = flash_sm90_boxes(HEAD_DIM), kBoxesV = flash_sm90_boxes(HEAD_DIM_V);
    // Boxes count in full, the zeros TMA writes past the head dim included.
    constexpr unsigned kTileBytesK = Layout::kK * sizeof(T), kTileBytesV = Layout::kV * sizeof(T);
    tma_prefetch_descriptor(map_q);
    tma_prefetch_descriptor(map_k);
    tma_prefetch_descriptor(map_v);
    RingPosition<STAGES> ring;
    RingPosition<Q_BUFFERS> q_ring;
    FlashSm90Queue<flash_sm90_dynamic(CAUSAL, BM / 64)> queue;
    for (int w; (w = queue.produce(p, sh.work, sh.work_full, sh.work_empty)) < schedule.work_count;) {
        FlashSm90Work work;
        if (!flash_sm90_work<CAUSAL, WINDOW, BM, BN>(p, rows, w, schedule, work) || work.first_tile >= work.end_tile) continue;
        // Tensor maps are 4-D: (head dim, rows, heads, batch); varlen has one batch entry of every packed row.
        const int batch_index = p.cu_seqlens_q != nullptr ? 0 : work.b;
        const int kv_head = work.h / p.group;
        // The consumers' last S of the work tile that used this buffer before is done.
        unsigned long long* q_full = &sh.q_full[q_ring.stage];
        mbarrier_wait(&sh.q_empty[q_ring.stage], q_ring.phase ^ 1);
        mbarrier_arrive_expect_tx(q_full, BM * 64 * kBoxesK * sizeof(T));
#pragma unroll
        for (int box = 0; box < kBoxesK; ++box)
            tma_load_4d(sh.q + q_ring.stage * Layout::kQ + box * BM * 64, map_q, q_full, box * 64,
                        static_cast<int>(work.seq.q_first) + work.m0, work.h, batch_index);
        q_ring.advance();
        for (int tile = work.first_tile; tile < work.end_tile; ++tile) {
            const int key_row = static_cast<int>(work.seq.k_first) + tile * BN;
            const int s = ring.stage;
            mbarrier_wait(&sh.empty_k[s], ring.phase ^ 1);
            mbarrier_arrive_expect_tx(&sh.full_k[s], kTileBytesK);
#pragma unroll
            for (int box = 0; box < kBoxesK; ++box)
                tma_load_4d(sh.ring_k + s * Layout::kK + box * BN * 64, map_k, &sh.full_k[s], box * 64, key_row, kv_head,
                            batch_index);
            mbarrier_wait(&sh.empty_v[s], ring.phase ^ 1);
            mbarrier_arrive_expect_tx(&sh.full_v[s], kTileBytesV);
#pragma unroll
            for (int box = 0; box < kBoxesV; ++box)
                tma_load_4d(sh.ring_v + s * Layout::kV + box * BN * 64, map_v, &sh.full_v[s], box * 64, key_row, kv_head,
                            batch_index);
            ring.advance();
        }
    }
    queue.finish(p);
}

// A consumer warpgroup: 64 query rows of every work tile of this block.
template <typename T, int HEAD_DIM, int HEAD_DIM_V, int BN, int STAGES, int CONSUMERS, int Q_BUFFERS, bool PINGPONG,
          bool CAUSAL, bool WINDOW>
__device__ __forceinline__ void flash_sm90_consume(const FlashAttentionArgs& p, const FlashPackedRows& rows,
                                                   const FlashSm90Shared<T>& sh,
                                                   int consumer, const FlashSm90Schedule& schedule) {
    using Layout = FlashSm90Layout<T, HEAD_DIM, HEAD_DIM_V, BN, STAGES, CONSUMERS, Q_BUFFERS>;
    const int t = static_cast<int>(threadIdx.x) % 128;
    const bool warp_leader = t % 32 == 0;
    constexpr int BM = 64 * CONSUMERS;
    // Pingpong: consumer c issues after barrier 1 + c completes (its own 128 threads and the
    // previous consumer's), then lets the next one go: turns go round 0, 1, .., CONSUMERS - 1.
    // Consumer 0 starts; every wait is matched by an arrival (see the end).
    auto my_turn = [&] {
        if constexpr (PINGPONG) named_barrier_sync(1 + consumer, 256);
    };
    auto their_turn = [&] {
        if constexpr (PINGPONG) named_barrier_arrive(1 + (consumer + 1) % CONSUMERS, 256);
    };
    if (PINGPONG && consumer == CONSUMERS - 1) named_barrier_arrive(1, 256);

    // K and V buffers are filled in the same order; V is consumed one tile behind K.
    RingPosition<STAGES> k_ring, v_ring;
    RingPosition<Q_BUFFERS> q_ring;  // advanced for the work tiles that see keys, as the producer's
    float o[HEAD_DIM_V / 2];
    float s[BN / 2];
    unsigned pv[BN / 16][4];

    FlashSm90Queue<flash_sm90_dynamic(CAUSAL, CONSUMERS)> queue;
    for (int w; (w = queue.consume(sh.work, sh.work_full, sh.work_empty)) < schedule.work_count;) {
        FlashSm90Work work;
        if (!flash_sm90_work<CAUSAL, WINDOW, BM, BN>(p, rows, w, schedule, work)) continue;
        const AttentionKeyRange& range = work.range;
        // This thread's rows (within the sequence): g and g + 8 of its warp's 16.
        const int rows0 = work.m0 + consumer * 64;  // this warpgroup's first row
        const int row = rows0 + (t / 32) * 16 + (t % 32) / 4;
#pragma unroll
        for (int i = 0; i < HEAD_DIM_V / 2; ++i) o[i] = 0.0f;
        float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
        // This warpgroup's rows of the work tile's Q buffer: 64 rows into each 64-column box.
        const T* q_rows = sh.q + q_ring.stage * Layout::kQ + consumer * 64 * 64;

        // S = Q K^T of the tile in `stage`, issued (not waited for).
        auto issue_scores = [&](int stage) {
            const T* k = sh.ring_k + stage * Layout::kK;
            // Three consumers (160 registers each): opaque to the compiler, so that it rebuilds the
            // descriptors here instead of keeping them for every stage in registers across the
            // loop (the causal kernel spilled 80 bytes for them). Two consumers have the registers
            // and run 4-7% faster with the descriptors kept.
            const T* q = q_rows;
            if constexpr (CONSUMERS == 3) asm volatile("" : "+l"(q), "+l"(k));
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
                wgmma_m64k16<T, BN, 0>(s, wgmma_descriptor_sw128(q) + k_major_step<BM>(kk),
                                       wgmma_descriptor_sw128(k) + k_major_step<BN>(kk), kk > 0 ? 1 : 0);
            wgmma_commit();
        };
        // O += P V of the tile in `stage`, issued.
        auto issue_values = [&](int stage) {
            const T* v = sh.ring_v + stage * Layout::kV;
            // V is BN keys (K of this product) x HEAD_DIM_V (N), N-major, in boxes of 64 columns.
            const unsigned long long desc_v = wgmma_descriptor_sw128_mn(v, BN * 128);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) flash_sm90_pv_step<T, HEAD_DIM_V, BN>(o, pv[kk], desc_v + kk * 128);
            wgmma_commit();
        };
        // The tile's S has landed in registers: its K buffer is free. (The Q buffer is freed after
        // the epilogue, which stages the output in it.)
        auto scores_done = [&] {
            wgmma_fence_registers(s);
            if (warp_leader) mbarrier_arrive(&sh.empty_k[k_ring.stage]);
            k_ring.advance();
        };
        // P V has finished: its V buffer and the P registers are free.
        auto values_done = [&] {
            wgmma_fence_registers(o);
            fence_fragments<BN>(pv);
            if (warp_leader) mbarrier_arrive(&sh.empty_v[v_ring.stage]);
            v_ring.advance();
        };
        // Masks (when the tile needs it) and folds the tile's scores into the running max;
        // returns the factor the previous sum and output must be scaled by.
        auto softmax = [&](int tile, float (&scale)[2]) {
            const int n0 = tile * BN;
            if (range.tile_needs_mask<CAUSAL, WINDOW>(rows0, 64, n0, BN)) mask_scores<CAUSAL, WINDOW, BN>(s, range, row, n0);
            float new_max[2] = {row_max[0], row_max[1]};
            tile_row_max<BN>(s, new_max);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                scale[half] = attention_rescale(row_max[half], new_max[half], p.scale_log2);
                row_sum[half] *= scale[half];
                row_max[half] = new_max[half];
            }
            exponentiate<BN>(s, row_max, p.scale_log2, row_sum);
        };

        if (work.first_tile < work.end_tile) {
            mbarrier_wait(&sh.q_full[q_ring.stage], q_ring.phase);
            mbarrier_wait(&sh.full_k[k_ring.stage], k_ring.phase);
            my_turn();
            issue_scores(k_ring.stage);
            their_turn();
            wgmma_wait<0>();
            scores_done();
            float scale[2];
            softmax(work.first_tile, scale);
            pack_probabilities<T, BN>(s, pv);

            for (int tile = work.first_tile + 1; tile < work.end_tile; ++tile) {
                mbarrier_wait(&sh.full_k[k_ring.stage], k_ring.phase);
                mbarrier_wait(&sh.full_v[v_ring.stage], v_ring.phase);
                my_turn();
                issue_scores(k_ring.stage);
                issue_values(v_ring.stage);
                their_turn();
                wgmma_wait<1>();  // the scores are in; P V of the previous tile may still run
                scores_done();
                softmax(tile, scale);
                wgmma_wait<0>();
                values_done();
#pragma unroll
                for (int j = 0; j < HEAD_DIM_V / 8; ++j) {
                    o[4 * j + 0] *= scale[0];
                    o[4 * j + 1] *= scale[0];
                    o[4 * j + 2] *= scale[1];
                    o[4 * j + 3] *= scale[1];
                }
                pack_probabilities<T, BN>(s, pv);
            }
            // The last tile's P V.
            mbarrier_wait(&sh.full_v[v_ring.stage], v_ring.phase);
            my_turn();
            issue_values(v_ring.stage);
            their_turn();
            wgmma_wait<0>();
            values_done();
        }

        // Each row's sum over its quad, then O / sum. Three consumers decode the work tile's
        // coordinates again from its index rather than keep them in registers through the loop.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            row_sum[half] += __shfl_xor_sync(0xffffffffu, row_sum[half], 1);
            row_sum[half] += __shfl_xor_sync(0xffffffffu, row_sum[half], 2);
        }
        if constexpr (CONSUMERS == 3) {
            asm volatile("" : "+r"(w));
            flash_sm90_work<CAUSAL, WINDOW, BM, BN>(p, rows, w, schedule, work);
        }
        const bool has_keys = work.first_tile < work.end_tile;
        float inverse[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            inverse[half] = row_sum[half] > 0.0f ? 1.0f / row_sum[half] : 0.0f;
            const int r = row + half * 8;
            if (p.lse != nullptr && t % 4 == 0 && r < work.seq.len_q)
                p.lse[work.b * p.lse_batch_stride + work.h * p.lse_head_stride + work.seq.q_first + r] =
                    attention_lse(row_max[half], row_sum[half], p.scale);
        }
        T* const out_tile = static_cast<T*>(p.o) + work.b * p.o_batch_stride + work.seq.q_first * p.o_row_stride +
                            work.h * p.o_head_stride;
        // The output pair (columns 8 j + 2 (t % 4), + 1) of accumulator row `half`, normalized.
        auto normalized_pair = [&](int j, int half) {
            return pack_pair<T>(o[4 * j + 2 * half] * inverse[half], o[4 * j + 2 * half + 1] * inverse[half]);
        };
        // The op checks that O and its strides are 16-byte aligned, so the staged 16-byte stores
        // always apply where the work tile has a Q buffer.
        if (has_keys) {
            // Each warp stages its 16 rows in its own rows of the work tile's Q buffer (no longer
            // read: the last S is done), in the buffer's 128-byte swizzled layout so that the
            // 4-byte writes of the accumulator layout are free of bank conflicts, then stores
            // whole 16-byte pieces of rows: a store instruction covers full rows instead of
            // 16 bytes of eight rows.
            constexpr int kChunks = HEAD_DIM_V / 8;  // 16-byte pieces of a row
            // Opaque, so that the compiler computes the addresses below here rather than hoisting
            // them out of the work loop into registers that the loop needs.
            int lane = t % 32;
            asm volatile("" : "+r"(lane));
            unsigned char* staging = reinterpret_cast<unsigned char*>(sh.q + q_ring.stage * Layout::kQ) +
                                     (consumer * 64 + (t / 32) * 16) * 128;
            auto piece = [&](int warp_row, int chunk) {  // byte offset of a 16-byte piece in the staging rows
                return (chunk / 8) * (BM * 128) + warp_row * 128 + (((chunk % 8) ^ (warp_row % 8)) * 16);
            };
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int warp_row = lane / 4 + half * 8;
#pragma unroll
                for (int j = 0; j < kChunks; ++j)
                    *reinterpret_cast<unsigned*>(staging + piece(warp_row, j) + (lane % 4) * 4) = normalized_pair(j, half);
            }
            __syncwarp();
            const int warp_row0 = rows0 + (t / 32) * 16;  // the warp's first row in the sequence
#pragma unroll
            for (int i = 0; i < 16 * kChunks / 32; ++i) {
                const int index = i * 32 + lane, warp_row = index / kChunks, chunk = index % kChunks;
                if (warp_row0 + warp_row < work.seq.len_q)
                    *reinterpret_cast<int4*>(out_tile + (warp_row0 + warp_row) * p.o_row_stride + chunk * 8) =
                        *reinterpret_cast<const int4*>(staging + piece(warp_row, chunk));
            }
            // The producer's TMA (the async proxy) writes a later Q here once the buffer is
            // released: order this thread's generic writes before it.
            fence_proxy_async();
            __syncwarp();
        } else {
            // Rows that see no key (their tile loaded no Q buffer): T pairs straight from the
            // accumulators.
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = row + half * 8;
                if (r >= work.seq.len_q) continue;
                T* out = out_tile + r * p.o_row_stride + (t % 4) * 2;
#pragma unroll
                for (int j = 0; j < HEAD_DIM_V / 8; ++j) *reinterpret_cast<unsigned*>(out + 8 * j) = normalized_pair(j, half);
            }
        }
        if (has_keys) {
            // The staging reads are done: the producer may load the Q of a later work tile here.
            if (warp_leader) mbarrier_arrive(&sh.q_empty[q_ring.stage]);
            q_ring.advance();
        }
    }
    // Consumer 0's barrier got one arrival more than it was waited for (the start): take it.
    if (PINGPONG && consumer == 0) named_barrier_sync(1, 256);
}

template <typename T, int HEAD_DIM, int HEAD_DIM_V, int BN, int STAGES, int CONSUMERS, int Q_BUFFERS, bool PINGPONG,
          bool CAUSAL, bool WINDOW>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), CONSUMERS == 1 ? 2 : 1)
    flash_attention_sm90_kernel(const __grid_constant__ TensorMap map_q, const __grid_constant__ TensorMap map_k,
                                const __grid_constant__ TensorMap map_v, const FlashAttentionArgs p,
                                const FlashPackedRows rows) {
    static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256, "Q/K head dims: multiples of 16 up to 256");
    static_assert(HEAD_DIM_V % 16 == 0 && HEAD_DIM_V >= 16 && HEAD_DIM_V <= 256, "V head dims: multiples of 16 up to 256");
    static_assert(BN == 64 || BN == 128, "key tiles of 64 or 128");
    static_assert(STAGES >= 2, "K/V tiles are double-buffered at least");
    static_assert(CONSUMERS == 2 || (CONSUMERS == 3 && HEAD_DIM <= 64 && HEAD_DIM_V <= 64) ||
                      (CONSUMERS == 1 && !PINGPONG && HEAD_DIM_V <= 192),
                  "two consumers, three at head dims up to 64, or one (no ping-pong) at value head dims up to 192");
    static_assert(Q_BUFFERS == 1 || Q_BUFFERS == 2, "one or two Q buffers");
    using Layout = FlashSm90Layout<T, HEAD_DIM, HEAD_DIM_V, BN, STAGES, CONSUMERS, Q_BUFFERS>;
    constexpr int BM = 64 * CONSUMERS;
    constexpr unsigned kConsumerWarps = 4 * CONSUMERS;

    extern __shared__ __align__(1024) unsigned char flash_shared[];
    unsigned char* base = flash_shared + ((1024 - (shared_address(flash_shared) & 1023)) & 1023);
    FlashSm90Shared<T> sh;
    sh.q = reinterpret_cast<T*>(base);
    sh.ring_k = sh.q + Q_BUFFERS * Layout::kQ;
    sh.ring_v = sh.ring_k + STAGES * Layout::kK;
    sh.q_full = reinterpret_cast<unsigned long long*>(base + Layout::kBarrierOffset);
    sh.q_empty = sh.q_full + Q_BUFFERS;
    sh.full_k = sh.q_empty + Q_BUFFERS;
    sh.full_v = sh.full_k + STAGES;
    sh.empty_k = sh.full_v + STAGES;
    sh.empty_v = sh.empty_k + STAGES;
    sh.work_full = sh.empty_v + STAGES;
    sh.work_empty = sh.work_full + 1;
    sh.work = reinterpret_cast<int*>(sh.work_empty + 1);

    if (threadIdx.x == 0) {
        for (int b = 0; b < Q_BUFFERS; ++b) {
            mbarrier_init(&sh.q_full[b], 1);
            mbarrier_init(&sh.q_empty[b], kConsumerWarps);  // one arrive per consumer warp
        }
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&sh.full_k[s], 1);
            mbarrier_init(&sh.full_v[s], 1);
            mbarrier_init(&sh.empty_k[s], kConsumerWarps);
            mbarrier_init(&sh.empty_v[s], kConsumerWarps);
        }
        mbarrier_init(sh.work_full, 1);
        mbarrier_init(sh.work_empty, kConsumerWarps);
        fence_barrier_init();
    }
    __syncthreads();

    FlashSm90Schedule schedule;
    schedule.q_tiles = (p.seqlen_q + BM - 1) / BM;
    schedule.work_count = schedule.q_tiles * p.num_heads * p.batch;
    schedule.group_heads =
        CAUSAL ? flash_sm90_group_heads(p, schedule.q_tiles, (HEAD_DIM + HEAD_DIM_V) * static_cast<int>(sizeof(T))) : 1;
    const int warpgroup = static_cast<int>(threadIdx.x) / 128;
    // Registers per thread after the producer gives its share away. The block keeps what it was
    // launched with (the launch bound's per-thread cap x threads), so 128 x producer + consumers
    // x 128 x consumer must not exceed it (a claim beyond it waits forever). Value head dims past
    // 192 need 240 in the consumers (up to 128 output accumulators); the producer then has 24 (its
    // work queue spills about 124 bytes). Three consumers (head dims up to 64) get 160 each. One
    // consumer keeps the two consumers' 232 with the producer at 24, so that two blocks share an
    // SM (128 registers a thread at launch): two independent 64-row work tiles where one block
    // would run a 128-row tile whose consumers share each key tile.
    constexpr bool kWideV = HEAD_DIM_V > 192;
    constexpr int kProducerRegisters = CONSUMERS == 3 ? 32 : kWideV || CONSUMERS == 1 ? 24 : 40;
    constexpr int kConsumerRegisters = CONSUMERS == 3 ? 160 : kWideV ? 240 : 232;
    constexpr int kLaunchRegisters = CONSUMERS == 2 ? 168 : 128;
    static_assert(128 * kProducerRegisters + 128 * CONSUMERS * kConsumerRegisters <= kLaunchRegisters * 128 * (CONSUMERS + 1),
                  "register budget");
    if (warpgroup == 0) {
        warpgroup_registers_release<kProducerRegisters>();
        if (threadIdx.x == 0)
            flash_sm90_produce<T, HEAD_DIM, HEAD_DIM_V, BN, STAGES, CONSUMERS, Q_BUFFERS, CAUSAL, WINDOW>(p, rows, &map_q, &map_k,
                                                                                                  &map_v, sh, schedule);
    } else {
        warpgroup_registers_claim<kConsumerRegisters>();
        flash_sm90_consume<T, HEAD_DIM, HEAD_DIM_V, BN, STAGES, CONSUMERS, Q_BUFFERS, PINGPONG, CAUSAL, WINDOW>(
            p, rows, sh, warpgroup - 1, schedule);
    }
}

}  // namespace tileops
