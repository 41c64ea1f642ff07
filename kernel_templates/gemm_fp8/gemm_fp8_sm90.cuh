// FP8 GEMM for sm_90a: D = act(alpha * A * B^T + beta * C + bias), A M x K and B N x K of e4m3
// codes, each row K-major (the only layout FP8 wgmma reads), dequantized by fp32 scales per
// tensor, per row, or per block (1 x 128 for A, 128 x 128 for B: DeepSeek-V3's layout); D fp32,
// fp16 or bf16; bias and C in D's type.
//
// The structure of the 16-bit TMA kernel (gemm/gemm_sm90.cuh), without its ping-pong, block
// pairs and split K: a persistent grid, warpgroup 0 loading 128-byte (128-element) K steps of A
// and B with TMA into a ring of STAGES buffers, warpgroups 1..CONSUMERS multiplying with
// m64 x BN x k32 wgmmas.
//
// Accuracy over long K: the tensor cores add FP8 products with fewer mantissa bits than fp32
// (DeepSeek-V3 measured ~2% relative error at K = 4096 from this alone). Each K step of 128 is
// therefore multiplied into a fresh register tile `part` and added to the fp32 accumulator
// `acc` by the CUDA cores ("promotion"), with the step's block scales where those apply: the
// scales of A's row block and of B's column block change every 128 elements of K, so they must
// be applied per step. Per-tensor and per-row scales are applied once, in the epilogue.
// The promotion waits for each step's wgmmas to finish; with two consumers the other one keeps
// the tensor cores busy meanwhile. `part` doubles the accumulator registers: a consumer's tile
// holds at most 224 values per thread in both (gemm_fp8_config.cpp). (A third tile, so that one
// consumer's wgmmas of step kt run while it adds step kt - 1, fits only small tiles, and ptxas
// then serializes the wgmmas anyway: it cannot tell that wgmma.wait_group 1 finished the tile
// being added, warning C7514.)
//
// Block scales travel with the stage: a producer warp copies the step's scales of the tile's
// rows of A and of its block of B into the stage's slot in shared memory and counts itself on the
// stage's "full" barrier, so the consumers read them from shared memory once the stage is there.
// (Read by the consumers from global memory, the L2 latency held up the wgmmas: 22% of their
// stall samples, 1009 TFLOP/s at 4096 x 7168 x 16384 on an H200, 1318 per tensor.)
//
// The epilogue (scales, alpha, beta * C, bias, activation) stores a 16-bit D whose rows are
// 16-byte aligned (TMA_STORE) as the 16-bit kernel does: through two 64 x 64 shared buffers per
// consumer and TMA stores that run on while the consumer starts the next tile; other outputs are
// stored from registers.
//
// Template parameters: TOut (float, __half, __nv_bfloat16), BM x BN (BM = 64 x CONSUMERS x
// atoms, BN a wgmma width), STAGES, CONSUMERS (1 or 2), GROUP_M, SCALING (gemm_fp8_args.cuh;
// block scales need BN to divide 128, so a tile's columns share one block of B, or BN = 192,
// whose tiles start at column 0 or 64 of a block and so span exactly two), HAS_C, BIAS, ACT,
// TMA_STORE, GROUPS (gemm/gemm_groups.cuh: batch entries, or groups of rows given on the device,
// each with its own B and B scales: s.b + group x (1, N or ceil(N/128) x ceil(K/128))). A and B
// rows and pointers must be 16-byte aligned (the host checks).
#pragma once

#include "arch/hopper.cuh"
#include "arch/wgmma_fp8.cuh"
#include "gemm/gemm_epilogue.cuh"
#include "gemm/gemm_groups.cuh"
#include "gemm/gemm_sm90.cuh"  // the TMA-store epilogue's helpers (gemm_stmatrix_x4, gemm_out_offset)
#include "gemm_fp8/gemm_fp8_args.cuh"

namespace tileops {

// D[row, col] and D[row, col + 1] dequantized by per-tensor or per-row scales (block scales were
// applied in the main loop): v times the scales of the row of A and the columns of B. Rows and
// columns past the matrix get zeros (their scales are not read).
template <int SCALING>
__device__ __forceinline__ void gemm_fp8_scale_pair(const GemmArgs& p, const GemmFp8Scales& s, float tensor_scale,
                                                    long long row, long long col, float (&v)[2]) {
    if constexpr (SCALING == kGemmFp8PerTensor) {
        v[0] *= tensor_scale;
        v[1] *= tensor_scale;
    } else if constexpr (SCALING == kGemmFp8PerRow) {
        const float row_scale = row < p.m ? s.a[row] : 0.0f;
        v[0] *= col < p.n ? row_scale * s.b[col] : 0.0f;
        v[1] *= col + 1 < p.n ? row_scale * s.b[col + 1] : 0.0f;
    }
}

// Where group g's scales of B start: one scale, a row's (N) or the blocks' (ceil(N/128) x K steps).
template <int SCALING>
__device__ __forceinline__ const float* gemm_fp8_group_scales_b(const GemmArgs& p, const float* b, int group, int k_tiles) {
    const long long per_group = SCALING == kGemmFp8PerTensor ? 1 : SCALING == kGemmFp8PerRow ? p.n : (p.n + 127) / 128 * k_tiles;
    return b + group * per_group;
}

// The producer warp's part with block scales: for every K step of every tile this block takes,
// waits for the stage to be free, copies the step's scales into the stage's slot (zeros past M;
// slot[BM] the tile's block of B, slot[BM + 1] the next block where a 192-column tile reaches
// it) and counts each lane on the stage's "full" barrier (which then also waits for these 32).
template <int BM, int BN, int STAGES, int GROUPS, typename Schedule>
__device__ __forceinline__ void gemm_fp8_load_block_scales(const GemmArgs& p, const GemmFp8Scales& scales, float* slots,
                                                           unsigned long long* full, unsigned long long* empty,
                                                           const Schedule& schedule, int k_tiles) {
    // Few live registers: the producer warpgroup runs on 56 of them (setmaxnreg).
    const int lane = static_cast<int>(threadIdx.x) % 32;
    int stage = 0;
    unsigned phase = 0;
    for (long long tile = blockIdx.x; tile < schedule.units; tile += gridDim.x) {
        const GemmTile at = schedule.tile(p, tile, 0);
        const float* b = GROUPS == kGemmBatched ? scales.b
                                                : gemm_fp8_group_scales_b<kGemmFp8Blocks>(p, scales.b, at.b_batch, k_tiles);
        const long long first_block = static_cast<long long>(at.tile_n) * BN / 128;
        b += first_block * k_tiles;  // the tile's (first) block of columns, step 0
        const bool next_block = BN > 128 && (first_block + 1) * 128 < p.n;
        const float* a = scales.a + at.row0;                              // the tile's first row, step 0
        const int rows = static_cast<int>(min(p.m - at.row0, static_cast<long long>(BM)));
        for (int kt = 0; kt < k_tiles; ++kt, a += p.m) {
            mbarrier_wait(&empty[stage], phase ^ 1);
            float* slot = slots + stage * gemm_fp8_scale_slot_floats(BM);
            // Up to four loads in flight at once, then their stores.
            constexpr int kBatch = BM / 32 < 4 ? BM / 32 : 4;
#pragma unroll
            for (int j0 = 0; j0 < BM / 32; j0 += kBatch) {
                float v[kBatch];
#pragma unroll
                for (int j = 0; j < kBatch; ++j) {
                    const int i = lane + 32 * (j0 + j);
                    v[j] = i < rows ? a[i] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < kBatch; ++j) slot[lane + 32 * (j0 + j)] = v[j];
            }
            if (lane == 0) slot[BM] = b[kt];
            if (BN > 128 && lane == 1) slot[BM + 1] = next_block ? b[k_tiles + kt] : 0.0f;
            mbarrier_arrive(&full[stage]);
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
    }
}

// A K step's products added to the accumulators with block scales where a tile spans two blocks
// of B's (192 columns): the first FIRST_GROUPS groups of 8 columns take `first`, the rest `second`
// (scales per atom and row half). Value i of an atom is column group i / 4, row half (i / 2) % 2.
template <int FIRST_GROUPS, int ATOMS, int VALUES>
__device__ __forceinline__ void gemm_fp8_promote_two_blocks(float (&acc)[ATOMS][VALUES], const float (&part)[ATOMS][VALUES],
                                                            const float (&first)[ATOMS][2], const float (&second)[ATOMS][2]) {
#pragma unroll
    for (int atom = 0; atom < ATOMS; ++atom)
#pragma unroll
        for (int i = 0; i < VALUES; ++i)
            acc[atom][i] += part[atom][i] * (i / 4 < FIRST_GROUPS ? first[atom][(i / 2) % 2] : second[atom][(i / 2) % 2]);
}

template <typename TOut, int BM, int BN, int STAGES, int CONSUMERS, int GROUP_M, int SCALING, bool HAS_C, bool BIAS,
          int ACT, bool TMA_STORE, int GROUPS, typename Schedule>
__device__ __forceinline__ void gemm_fp8_consume(const GemmArgs& p, const GemmFp8Scales& scales, const TensorMap* map_d,
                                                 const unsigned char* ring_a, const unsigned char* ring_b,
                                                 const float* scale_slots, TOut* out_tiles, unsigned long long* full,
                                                 unsigned long long* empty, int consumer, long long first_tile,
                                                 long long tile_stride, const Schedule& schedule, int k_tiles) {
    constexpr int BK = 128;
    constexpr int kRows = BM / CONSUMERS;  // rows of a tile this warpgroup multiplies
    constexpr int kAtoms = kRows / 64;
    constexpr int kValues = BN / 2;        // accumulators per thread per atom
    const int t = static_cast<int>(threadIdx.x) % 128;
    const bool warp_leader = t % 32 == 0;
    // This thread's rows within an atom: r0 and r0 + 8 (the wgmma accumulator layout).
    const int r0 = (t / 32) * 16 + (t % 32) / 4;
    float acc[kAtoms][kValues];
    float part[kAtoms][kValues];
    int out_slot = 0;  // which of this consumer's two output buffers the next box uses
    int stage = 0;
    unsigned phase = 0;
    for (long long tile = first_tile; tile < schedule.units; tile += tile_stride) {
        const GemmTile at = schedule.tile(p, tile, 0);
        const long long batch = at.ad_batch;
        const long long row0 = at.row0 + consumer * kRows;
        const long long n0 = static_cast<long long>(at.tile_n) * BN;
        // A batch shares one pair of scales; a group has its own of B.
        const GemmFp8Scales s{scales.a, GROUPS == kGemmBatched ? scales.b
                                                                : gemm_fp8_group_scales_b<SCALING>(p, scales.b, at.b_batch, k_tiles)};
        // Stores rows [atom x 64, atom x 64 + 64) of this consumer's rows, columns [col_begin,
        // col_end) of the tile, from the accumulators (pairs of elements, guarded).
        auto store_from_registers = [&](float tensor_scale, int atom, int col_begin, int col_end) {
            TOut* D = static_cast<TOut*>(p.d) + batch * p.batch_stride_d;
            const TOut* C = HAS_C ? static_cast<const TOut*>(p.c) + batch * p.batch_stride_c : nullptr;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const long long row = row0 + atom * 64 + r0 + half * 8;
                if (row >= at.row_end) continue;
                TOut* d_row = D + row * p.ldd;
                const TOut* c_row = HAS_C ? C + row * p.ldc : nullptr;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const long long col = n0 + j * 8 + (t % 4) * 2;
                    if (j * 8 < col_begin || j * 8 >= col_end || col >= p.n) continue;
                    float v[2] = {acc[atom][4 * j + 2 * half], acc[atom][4 * j + 2 * half + 1]};
                    gemm_fp8_scale_pair<SCALING>(p, s, tensor_scale, row, col, v);
                    // The bias is in D's type (the FP8 inputs are no type for it).
                    gemm_store_pair<TOut, TOut, HAS_C, BIAS, ACT>(p, d_row, c_row, col, v[0], v[1]);
                }
            }
        };
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom)
#pragma unroll
            for (int i = 0; i < kValues; ++i) acc[atom][i] = 0.0f;
        for (int kt = 0; kt < k_tiles; ++kt) {
            mbarrier_wait(&full[stage], phase);
            // The step's block scales (copied by the producer warp with the stage): A's for this
            // thread's rows times B's for the tile's block of columns (and the next block's, for
            // the columns of a 192-wide tile that lie in it).
            float scale[kAtoms][2], next_scale[kAtoms][2];
            if constexpr (SCALING == kGemmFp8Blocks) {
                const float* slot = scale_slots + stage * gemm_fp8_scale_slot_floats(BM);
                const float b_scale = slot[BM];
#pragma unroll
                for (int atom = 0; atom < kAtoms; ++atom)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const float a_scale = slot[consumer * kRows + atom * 64 + r0 + half * 8];
                        scale[atom][half] = a_scale * b_scale;
                        if constexpr (BN > 128) next_scale[atom][half] = a_scale * slot[BM + 1];
                    }
            }
            const unsigned char* tile_a = ring_a + stage * BM * BK + consumer * kRows * BK;
            const unsigned long long desc_b = wgmma_descriptor_sw128(ring_b + stage * BN * BK);
            wgmma_fence();
            // Four k32 steps of 32 bytes along the 128-byte rows (2 descriptor units of 16 bytes).
#pragma unroll
            for (int kk = 0; kk < BK / 32; ++kk)
#pragma unroll
                for (int atom = 0; atom < kAtoms; ++atom)
                    WgmmaFp8<BN>::run(part[atom], wgmma_descriptor_sw128(tile_a + atom * 64 * BK) + 2 * kk,
                                      desc_b + 2 * kk, kk > 0 ? 1 : 0);
            wgmma_commit();
            wgmma_wait<0>();
#pragma unroll
            for (int atom = 0; atom < kAtoms; ++atom) wgmma_fence_registers(part[atom]);
            if (warp_leader) mbarrier_arrive(&empty[stage]);
            if (++stage == STAGES) stage = 0, phase ^= 1;
            if constexpr (SCALING == kGemmFp8Blocks && BN > 128) {
                // A 192-column tile starts at column 0 or 64 of a block of B's scales: its first 16
                // or 8 groups of 8 columns lie in that block, the rest in the next.
                if (n0 % 128 == 0)
                    gemm_fp8_promote_two_blocks<16>(acc, part, scale, next_scale);
                else
                    gemm_fp8_promote_two_blocks<8>(acc, part, scale, next_scale);
            } else {
#pragma unroll
                for (int atom = 0; atom < kAtoms; ++atom)
#pragma unroll
                    for (int i = 0; i < kValues; ++i) {
                        if constexpr (SCALING == kGemmFp8Blocks) {
                            acc[atom][i] += part[atom][i] * scale[atom][(i / 2) % 2];  // values 4j + 2 half + e
                        } else {
                            acc[atom][i] += part[atom][i];
                        }
                    }
            }
        }

        const float tensor_scale = SCALING == kGemmFp8PerTensor ? s.a[0] * s.b[0] : 1.0f;
        if constexpr (gemm_sm90_tma_store<TOut, BN, TMA_STORE>()) {
            // As the 16-bit kernel: this consumer's rows in boxes of 64 x 64 through two buffers
            // taken in turn (each reused once the store that read it two boxes ago is done).
            const int warp = t / 32, lane = t % 32;
            const bool interior = row0 + kRows <= at.row_end && n0 + BN <= p.n;
#pragma unroll
            for (int box = 0; box < kAtoms * (BN / 64); ++box) {
                const int atom = box / (BN / 64), col0 = (box % (BN / 64)) * 64;
                if constexpr (GROUPS != kGemmBatched) {
                    // TMA clips at the matrix's edge, not at a group's: a box reaching past the
                    // group's rows is stored from registers, one past them not at all.
                    if (row0 + atom * 64 >= at.row_end) continue;
                    if (row0 + atom * 64 + 64 > at.row_end) {
                        store_from_registers(tensor_scale, atom, col0, col0 + 64);
                        continue;
                    }
                }
                TOut* buffer = out_tiles + (consumer * 2 + out_slot) * 64 * 64;
                if (t == 0) tma_store_wait_read<1>();
                named_barrier_sync(1 + consumer, 128);
#pragma unroll
                for (int quad = 0; quad < 4; ++quad) {
                    unsigned packed[4];
#pragma unroll
                    for (int f = 0; f < 4; ++f) {
                        const int jj = 2 * quad + f / 2, half = f % 2, j = col0 / 8 + jj;
                        float v[2] = {acc[atom][4 * j + 2 * half], acc[atom][4 * j + 2 * half + 1]};
                        const long long row = row0 + atom * 64 + r0 + half * 8;
                        const long long col = n0 + col0 + jj * 8 + (lane % 4) * 2;
                        gemm_fp8_scale_pair<SCALING>(p, s, tensor_scale, row, col, v);
                        if constexpr (HAS_C || BIAS) {
                            if (interior || (row < at.row_end && col < p.n))
                                gemm_epilogue_pair<TOut, TOut, HAS_C, BIAS, ACT>(
                                    p, HAS_C ? static_cast<const TOut*>(p.c) + batch * p.batch_stride_c + row * p.ldc : nullptr,
                                    col, v);
                        } else {
                            v[0] = gemm_activation<ACT>(v[0] * p.alpha);
                            v[1] = gemm_activation<ACT>(v[1] * p.alpha);
                        }
                        packed[f] = gemm_pack_pair<TOut>(v);
                    }
                    // Lane L gives the address of row L % 8 of fragment L / 8.
                    const int f = lane / 8;
                    gemm_stmatrix_x4(buffer + gemm_out_offset(warp * 16 + (f % 2) * 8 + lane % 8, (2 * quad + f / 2) * 8),
                                     packed);
                }
                fence_proxy_async();
                named_barrier_sync(1 + consumer, 128);
                if (t == 0) {
                    tma_store_3d(map_d, buffer, static_cast<int>(n0) + col0, static_cast<int>(row0) + atom * 64,
                                 static_cast<int>(batch));
                    tma_store_commit();
                }
                out_slot ^= 1;
            }
            continue;
        }
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom) store_from_registers(tensor_scale, atom, 0, BN);
    }
}

template <typename TOut, int BM, int BN, int STAGES, int CONSUMERS, int GROUP_M, int SCALING, bool HAS_C, bool BIAS,
          int ACT, bool TMA_STORE, int GROUPS = kGemmBatched>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
    gemm_fp8_sm90_kernel(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                         const __grid_constant__ TensorMap map_d, const GemmArgs p, const GemmFp8Scales s) {
    constexpr int BK = 128;
    static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
    static_assert(BM % (64 * CONSUMERS) == 0 && BM / CONSUMERS <= 128, "a consumer owns 64 or 128 rows");
    static_assert(SCALING != kGemmFp8Blocks || 128 % BN == 0 || BN == 192,
                  "a tile's columns share one block of B's scales, or span two at 192 columns");
    // Unlike the 16-bit kernel, tiles of 96-224 columns store wholly from registers: beside the K
    // step's second accumulator set, storing their last 32 columns so after the boxes spilled
    // (128 x 224: 24-120 bytes).
    static_assert(!TMA_STORE || BN % 64 == 0, "TMA stores of FP8 tiles need whole 64-column boxes");
    constexpr int kTileA = BM * BK, kTileB = BN * BK;  // bytes
    const unsigned stage_bytes = static_cast<unsigned>(p.a_box_rows * BK + kTileB);

    // The 128-byte swizzle repeats every 1024 bytes: the ring starts on such a boundary (the host
    // adds 1024 bytes of slack).
    extern __shared__ __align__(1024) unsigned char gemm_fp8_shared[];
    unsigned char* ring_a = gemm_fp8_shared + ((1024 - (shared_address(gemm_fp8_shared) & 1023)) & 1023);
    unsigned char* ring_b = ring_a + STAGES * kTileA;
    // Two 64 x 64 output buffers per consumer (a TMA-stored D only; host: GemmFp8Config::shared_bytes), then the barriers.
    TOut* out_tiles = reinterpret_cast<TOut*>(ring_b + STAGES * kTileB);
    constexpr int kOutBuffers = gemm_sm90_tma_store<TOut, BN, TMA_STORE>() ? CONSUMERS * 2 * 64 * 64 : 0;
    // With block scales, a slot of them per stage (gemm_fp8_args.cuh).
    float* scale_slots = reinterpret_cast<float*>(out_tiles + kOutBuffers);
    constexpr int kScaleFloats = SCALING == kGemmFp8Blocks ? STAGES * gemm_fp8_scale_slot_floats(BM) : 0;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(scale_slots + kScaleFloats);
    unsigned long long* empty = full + STAGES;
    // Grouped: the schedule's table of tiles per group, after the barriers.
    GemmSchedule<BM, 1, GROUP_M, GROUPS> schedule;
    schedule.start(p, BN, reinterpret_cast<int*>(empty + STAGES));
    if (threadIdx.x == 0) {
        for (int st = 0; st < STAGES; ++st) {
            // The producer's arrive (plus the TMA bytes), and with block scales the scale warp's 32.
            mbarrier_init(&full[st], SCALING == kGemmFp8Blocks ? 1 + 32 : 1);
            mbarrier_init(&empty[st], CONSUMERS * 4);    // one arrive per consumer warp
        }
        fence_barrier_init();
    }
    __syncthreads();  // (also publishes the group table)
    schedule.finish(p);
    const int k_tiles = static_cast<int>((p.k + BK - 1) / BK);
    const int warpgroup = static_cast<int>(threadIdx.x) / 128;
    // Two consumers: move the producer's registers to them (acc and part need room). They can
    // claim only what it gives up: the launch gives every thread the launch bounds' share of the
    // register file (168 of 64K for three warpgroups), so a consumer may grow by half what the
    // producer sheds. The producer keeps 40 where one thread issues the loads (consumers 232), 56
    // where a warp copies block scales too (consumers 224: their tiles hold at most 128 values a
    // thread in acc and part).
    constexpr bool kReallocate = CONSUMERS == 2;
    constexpr int kLaunchRegisters = 65536 / (3 * 128) / 8 * 8;  // the producer and two consumers
    constexpr int kProducerRegisters = SCALING == kGemmFp8Blocks ? 56 : 40;
    constexpr int kConsumerRegisters = kLaunchRegisters + (kLaunchRegisters - kProducerRegisters) / 2;
    static_assert(kConsumerRegisters % 8 == 0, "setmaxnreg takes multiples of 8");
    if (warpgroup == 0) {
        if constexpr (kReallocate) warpgroup_registers_release<kProducerRegisters>();
        if (threadIdx.x == 0) {
            tma_prefetch_descriptor(&map_a);
            tma_prefetch_descriptor(&map_b);
            if constexpr (gemm_sm90_tma_store<TOut, BN, TMA_STORE>()) tma_prefetch_descriptor(&map_d);
            int stage = 0;
            unsigned phase = 0;
            for (long long tile = blockIdx.x; tile < schedule.units; tile += gridDim.x) {
                const GemmTile at = schedule.tile(p, tile, 0);
                for (int kt = 0; kt < k_tiles; ++kt) {
                    mbarrier_wait(&empty[stage], phase ^ 1);
                    mbarrier_arrive_expect_tx(&full[stage], stage_bytes);
                    tma_load_3d(ring_a + stage * kTileA, &map_a, &full[stage], kt * BK, static_cast<int>(at.row0), at.ad_batch);
                    tma_load_3d(ring_b + stage * kTileB, &map_b, &full[stage], kt * BK, at.tile_n * BN, at.b_batch);
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        } else if (SCALING == kGemmFp8Blocks && threadIdx.x / 32 == 1) {
            gemm_fp8_load_block_scales<BM, BN, STAGES, GROUPS>(p, s, scale_slots, full, empty, schedule, k_tiles);
        }
    } else {
        if constexpr (kReallocate) warpgroup_registers_claim<kConsumerRegisters>();
        gemm_fp8_consume<TOut, BM, BN, STAGES, CONSUMERS, GROUP_M, SCALING, HAS_C, BIAS, ACT, TMA_STORE, GROUPS>(
            p, s, &map_d, ring_a, ring_b, scale_slots, out_tiles, full, empty, warpgroup - 1, blockIdx.x, gridDim.x, schedule,
            k_tiles);
        // Shared memory must outlive the reads of the last TMA store.
        if (gemm_sm90_tma_store<TOut, BN, TMA_STORE>() && threadIdx.x % 128 == 0) tma_store_wait_all();
    }
}

}  // namespace tileops
