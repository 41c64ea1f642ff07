// Flash attention forward for sm_90a (H100), FlashAttention-3 style.
//
// A block owns 128 query rows of one (sequence, query head) and walks the key tiles they may see.
// Warpgroup 0 is the producer: one thread loads the Q tile once, then K and V tiles of BN keys into
// a ring of STAGES shared buffers with TMA (128-byte swizzled boxes of 64 head-dim columns), each
// K and V buffer guarded by a "full" mbarrier (bytes landed) and an "empty" one (every consumer
// warp is done with it). Warpgroups 1 and 2 are consumers, 64 query rows each:
//   S = Q K^T       wgmma, both operands in shared memory, fp32 accumulators in registers;
//   P = softmax(S)  online, in registers: exp2 with the scale folded in, the running max and sum
//                   per row, the output rescaled only through one multiply per tile;
//   O += P V        wgmma with P as the register A operand (packed to 16 bits in place: for
//                   16-bit types the accumulator layout is the A fragment layout) and V N-major.
// Within a consumer the two MMAs of consecutive tiles overlap the softmax: while the softmax of
// tile i runs, the tensor cores already compute S of tile i + 1's predecessor product P_{i-1} V_{i-1}.
// With PINGPONG the two consumers take turns issuing their MMAs (named barriers 1 and 2), so that
// one warpgroup's softmax runs while the other's MMAs occupy the tensor cores.
// The producer gives its registers to the consumers (setmaxnreg).
//
// TMA fills rows outside the tensor with zeros; rows of other sequences (varlen) that a tile
// covers are masked (keys) or not stored (queries). Key tiles no row of the block can see are never
// loaded (causal: above the diagonal; window: below it). Masks per element only on the tiles that
// need them.
//
// Template parameters: T (__half, __nv_bfloat16), HEAD_DIM (64, 128, 256), BN (keys per tile: 64
// or 128), STAGES (K/V buffers in the ring), PINGPONG, CAUSAL, WINDOW. Shared memory:
// flash_sm90_shared_bytes below (host: ops/flash_attention_config.cpp computes the same).
#pragma once

#include "common/attention.cuh"
#include "common/hopper.cuh"
#include "common/wgmma_rs.cuh"

namespace tileops {

constexpr int kFlashSm90Rows = 128;  // query rows per block: two consumer warpgroups of 64

// Byte offsets of the descriptors' K steps of 16 elements, in 16-byte units. A K-major tile of
// ROWS x HEAD_DIM is stored as HEAD_DIM / 64 boxes of ROWS rows x 128 bytes: step kk lies in box
// kk / 4, 32 bytes into its rows.
template <int ROWS>
__device__ __forceinline__ unsigned k_major_step(int kk) {
    return static_cast<unsigned>((kk / 4) * ROWS * 128 + (kk % 4) * 32) >> 4;
}

// Masks S (64 rows x BN keys, the m64nBN accumulator layout) in place: keys a row may not see become -inf.
template <bool CAUSAL, bool WINDOW, int BN>
__device__ __forceinline__ void mask_scores(float (&s)[BN / 2], const AttentionKeyRange& range, int row, int n0) {
    const int col0 = n0 + (static_cast<int>(threadIdx.x) % 4) * 2;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = row + (e >= 2 ? 8 : 0), c = col0 + 8 * j + (e & 1);
            if (!range.visible<CAUSAL, WINDOW>(r, c)) s[4 * j + e] = -INFINITY;
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

template <typename T, int HEAD_DIM, int BN, int STAGES>
struct FlashSm90Layout {
    static constexpr int kQ = kFlashSm90Rows * HEAD_DIM;  // elements
    static constexpr int kKV = BN * HEAD_DIM;
    static constexpr size_t kBarrierOffset = (static_cast<size_t>(kQ) + 2 * STAGES * kKV) * sizeof(T);
    // Q, the K ring, the V ring, then barriers: q_full, full_k, full_v, empty_k, empty_v; plus
    // 1024 bytes so the tiles can start on a 1024-byte boundary (the swizzle's period).
    static constexpr size_t kBytes = kBarrierOffset + (1 + 4 * STAGES) * 8 + 1024;
};

template <typename T, int HEAD_DIM, int BN, int STAGES, bool PINGPONG, bool CAUSAL, bool WINDOW>
__device__ __forceinline__ void flash_sm90_consume(const FlashAttentionArgs& p, const T* q_tile, const T* ring_k,
                                                   const T* ring_v, unsigned long long* q_full,
                                                   unsigned long long* full_k, unsigned long long* full_v,
                                                   unsigned long long* empty_k, unsigned long long* empty_v,
                                                   int consumer, const AttentionSequence& seq, int m0,
                                                   const AttentionKeyRange& range) {
    constexpr int kKV = BN * HEAD_DIM;
    const int t = static_cast<int>(threadIdx.x) % 128;
    const bool warp_leader = t % 32 == 0;
    // This thread's rows (within the sequence): g and g + 8 of its warp's 16.
    const int row = m0 + consumer * 64 + (t / 32) * 16 + (t % 32) / 4;
    const int rows0 = m0 + consumer * 64;  // this warpgroup's first row

    float o[HEAD_DIM / 2];
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 2; ++i) o[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

    // Pingpong: consumer c issues after barrier 1 + c completes, then lets the other one go.
    // Consumer 0 starts; every wait is matched by an arrival of the other (see the end).
    auto my_turn = [&] {
        if constexpr (PINGPONG) named_barrier_sync(1 + consumer, 256);
    };
    auto their_turn = [&] {
        if constexpr (PINGPONG) named_barrier_arrive(2 - consumer, 256);
    };
    if (PINGPONG && consumer == 1) named_barrier_arrive(1, 256);

    const int first_tile = range.begin / BN, end_tile = (range.end + BN - 1) / BN;
    if (first_tile < end_tile) {
        const T* q_rows = q_tile + consumer * 64 * 64;  // 64 rows into each 64-column box
        float s[BN / 2];
        unsigned pv[BN / 16][4];
        // K and V buffers are filled in the same order; V is consumed one tile behind K.
        int k_stage = 0, v_stage = 0;
        unsigned k_phase = 0, v_phase = 0;
        auto advance = [](int& stage, unsigned& phase) {
            if (++stage == STAGES) stage = 0, phase ^= 1;
        };

        // S = Q K^T of the tile in `stage`, issued (not waited for).
        auto issue_scores = [&](int st) {
            const T* k = ring_k + st * kKV;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
                wgmma_m64k16<T, BN, 0>(s, wgmma_descriptor_sw128(q_rows) + k_major_step<kFlashSm90Rows>(kk),
                                       wgmma_descriptor_sw128(k) + k_major_step<BN>(kk), kk > 0 ? 1 : 0);
            wgmma_commit();
        };
        // O += P V of the tile in `stage`, issued.
        auto issue_values = [&](int st) {
            const T* v = ring_v + st * kKV;
            // V is BN keys (K of this product) x HEAD_DIM (N), N-major, in boxes of 64 columns.
            const unsigned long long desc_v = wgmma_descriptor_sw128_mn(v, BN * 128);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_m64k16<T, HEAD_DIM, 1>(o, pv[kk], desc_v + kk * 128, 1);
            wgmma_commit();
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

        mbarrier_wait(q_full, 0);
        mbarrier_wait(&full_k[k_stage], k_phase);
        my_turn();
        issue_scores(k_stage);
        their_turn();
        wgmma_wait<0>();
        wgmma_fence_registers(s);
        if (warp_leader) mbarrier_arrive(&empty_k[k_stage]);
        advance(k_stage, k_phase);
        float scale[2];
        softmax(first_tile, scale);
        pack_probabilities<T, BN>(s, pv);

        for (int tile = first_tile + 1; tile < end_tile; ++tile) {
            mbarrier_wait(&full_k[k_stage], k_phase);
            mbarrier_wait(&full_v[v_stage], v_phase);
            my_turn();
            issue_scores(k_stage);
            issue_values(v_stage);
            their_turn();
            wgmma_wait<1>();  // the scores are in; P V of the previous tile may still run
            wgmma_fence_registers(s);
            if (warp_leader) mbarrier_arrive(&empty_k[k_stage]);
            advance(k_stage, k_phase);
            softmax(tile, scale);
            wgmma_wait<0>();
            wgmma_fence_registers(o);
            fence_fragments<BN>(pv);
            if (warp_leader) mbarrier_arrive(&empty_v[v_stage]);
            advance(v_stage, v_phase);
#pragma unroll
            for (int j = 0; j < HEAD_DIM / 8; ++j) {
                o[4 * j + 0] *= scale[0];
                o[4 * j + 1] *= scale[0];
                o[4 * j + 2] *= scale[1];
                o[4 * j + 3] *= scale[1];
            }
            pack_probabilities<T, BN>(s, pv);
        }
        // The last tile's P V.
        mbarrier_wait(&full_v[v_stage], v_phase);
        my_turn();
        issue_values(v_stage);
        their_turn();
        wgmma_wait<0>();
        wgmma_fence_registers(o);
        fence_fragments<BN>(pv);
        if (warp_leader) mbarrier_arrive(&empty_v[v_stage]);
    } else {
        mbarrier_wait(q_full, 0);
    }
    // Consumer 0's barrier got one arrival more than it was waited for (the start): take it.
    if (PINGPONG && consumer == 0) named_barrier_sync(1, 256);

    // Each row's sum over its quad, then O / sum, stored as T pairs; rows of other sequences or
    // past the end are not stored.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        row_sum[half] += __shfl_xor_sync(0xffffffffu, row_sum[half], 1);
        row_sum[half] += __shfl_xor_sync(0xffffffffu, row_sum[half], 2);
    }
    const int h = blockIdx.y, b = blockIdx.z;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = row + half * 8;
        if (r >= seq.len_q) continue;
        const float inverse = row_sum[half] > 0.0f ? 1.0f / row_sum[half] : 0.0f;
        T* out = static_cast<T*>(p.o) + b * p.o_batch_stride + (seq.q_first + r) * p.o_row_stride + h * p.o_head_stride +
                 (t % 4) * 2;
#pragma unroll
        for (int j = 0; j < HEAD_DIM / 8; ++j) {
            const unsigned pair = pack_pair<T>(o[4 * j + 2 * half] * inverse, o[4 * j + 2 * half + 1] * inverse);
            *reinterpret_cast<unsigned*>(out + 8 * j) = pair;
        }
        if (p.lse != nullptr && t % 4 == 0)
            p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_first + r] =
                attention_lse(row_max[half], row_sum[half], p.scale);
    }
}

template <typename T, int HEAD_DIM, int BN, int STAGES, bool PINGPONG, bool CAUSAL, bool WINDOW>
__global__ void __launch_bounds__(384, 1)
    flash_attention_sm90_kernel(const __grid_constant__ TensorMap map_q, const __grid_constant__ TensorMap map_k,
                                const __grid_constant__ TensorMap map_v, const FlashAttentionArgs p) {
    static_assert(HEAD_DIM == 64 || HEAD_DIM == 128 || HEAD_DIM == 256, "head dims 64, 128, 256");
    static_assert(BN == 64 || BN == 128, "key tiles of 64 or 128");
    static_assert(STAGES >= 2, "K/V tiles are double-buffered at least");
    using Layout = FlashSm90Layout<T, HEAD_DIM, BN, STAGES>;
    constexpr int kKV = Layout::kKV;

    extern __shared__ __align__(1024) unsigned char flash_shared[];
    unsigned char* base = flash_shared + ((1024 - (shared_address(flash_shared) & 1023)) & 1023);
    T* q_tile = reinterpret_cast<T*>(base);
    T* ring_k = q_tile + Layout::kQ;
    T* ring_v = ring_k + STAGES * kKV;
    unsigned long long* q_full = reinterpret_cast<unsigned long long*>(base + Layout::kBarrierOffset);
    unsigned long long* full_k = q_full + 1;
    unsigned long long* full_v = full_k + STAGES;
    unsigned long long* empty_k = full_v + STAGES;
    unsigned long long* empty_v = empty_k + STAGES;

    const int h = blockIdx.y, b = blockIdx.z;
    const int m_block = CAUSAL ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    const AttentionSequence seq = attention_sequence(p, b);
    const int m0 = m_block * kFlashSm90Rows;
    if (m0 >= seq.len_q) return;  // a varlen sequence shorter than the longest
    const AttentionKeyRange range = attention_key_range<CAUSAL, WINDOW>(seq, p.window_left, m0, kFlashSm90Rows);
    const int first_tile = range.begin / BN, end_tile = (range.end + BN - 1) / BN;

    if (threadIdx.x == 0) {
        mbarrier_init(q_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full_k[s], 1);
            mbarrier_init(&full_v[s], 1);
            mbarrier_init(&empty_k[s], 8);  // one arrive per consumer warp
            mbarrier_init(&empty_v[s], 8);
        }
        fence_barrier_init();
    }
    __syncthreads();

    const int warpgroup = static_cast<int>(threadIdx.x) / 128;
    if (warpgroup == 0) {
        warpgroup_registers_release<24>();
        if (threadIdx.x == 0) {
            tma_prefetch_descriptor(&map_q);
            tma_prefetch_descriptor(&map_k);
            tma_prefetch_descriptor(&map_v);
            // Tensor maps are 4-D: (head dim, rows, heads, batch); varlen has one batch entry of
            // every packed row.
            const int batch_index = p.cu_seqlens_q != nullptr ? 0 : b;
            const int kv_head = h / p.group;
            constexpr unsigned kTileBytes = kKV * sizeof(T);
            mbarrier_arrive_expect_tx(q_full, Layout::kQ * sizeof(T));
#pragma unroll
            for (int box = 0; box < HEAD_DIM / 64; ++box)
                tma_load_4d(q_tile + box * kFlashSm90Rows * 64, &map_q, q_full, box * 64,
                            static_cast<int>(seq.q_first) + m0, h, batch_index);
            int stage = 0;
            unsigned phase = 0;
            for (int tile = first_tile; tile < end_tile; ++tile) {
                const int key_row = static_cast<int>(seq.k_first) + tile * BN;
                mbarrier_wait(&empty_k[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(&full_k[stage], kTileBytes);
#pragma unroll
                for (int box = 0; box < HEAD_DIM / 64; ++box)
                    tma_load_4d(ring_k + stage * kKV + box * BN * 64, &map_k, &full_k[stage], box * 64, key_row, kv_head,
                                batch_index);
                mbarrier_wait(&empty_v[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(&full_v[stage], kTileBytes);
#pragma unroll
                for (int box = 0; box < HEAD_DIM / 64; ++box)
                    tma_load_4d(ring_v + stage * kKV + box * BN * 64, &map_v, &full_v[stage], box * 64, key_row, kv_head,
                                batch_index);
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
        }
    } else {
        warpgroup_registers_claim<240>();
        flash_sm90_consume<T, HEAD_DIM, BN, STAGES, PINGPONG, CAUSAL, WINDOW>(p, q_tile, ring_k, ring_v, q_full, full_k, full_v,
                                                                    empty_k, empty_v, warpgroup - 1, seq, m0, range);
    }
}

}  // namespace tileops
