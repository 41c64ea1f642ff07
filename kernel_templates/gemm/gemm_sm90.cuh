// GEMM for sm_90a (H100): D = act(alpha * A * op(B) + beta * C + bias), A M x K row-major (K-major);
// B N x K row-major (B_NT: K-major) or K x N row-major (N-major: loaded as boxes of 64 columns and
// multiplied with wgmma's transposed-B form).
//
// Persistent, warp-specialized: a grid of at most one block per SM walks the output tiles (grouped
// rasterization, batch entries one after another). In each block, warpgroup 0 is the producer:
// one thread issues TMA loads of BM x 64 tiles of A and BN x 64 tiles of B into a ring of STAGES
// shared buffers (128-byte swizzled), each guarded by a "full" mbarrier (TMA bytes landed) and an
// "empty" one (every consumer warp is done with it). Warpgroups 1..CONSUMERS are consumers: each
// owns BM / CONSUMERS rows of the tile and multiplies with wgmma (m64 x BN x k16) into fp32
// registers, keeping one group of wgmmas in flight while releasing the previous buffer. The
// producer gives up registers (setmaxnreg) so the consumers can hold their accumulators.
// The epilogue (alpha, beta * C, bias, activation) runs while the producer already loads the next
// tile. A 16-bit D goes through shared memory: each consumer writes its rows there in boxes of
// 64 x 64 (swizzled like the operand tiles, so without bank conflicts) and one of its threads
// stores each box with TMA, which runs on while the consumer writes the next box or starts the
// next tile's MMAs; each of its two box buffers is reused only after the store from it has read
// it. An fp32 D is stored from registers.
//
// PINGPONG: the two consumer warpgroups take whole tiles (BM x BN each) in turn instead of
// sharing one: the ring carries one warpgroup's K steps after the other's, so while one multiplies
// the other runs its epilogue, and the tensor cores do not wait for the stores (the schedule
// CUTLASS calls ping-pong). A stage is then released by the 4 warps of the warpgroup that used it.
//
// CLUSTER_M = 2 runs the blocks in pairs (a cluster) on vertically adjacent tiles that share their
// B tile: each block loads half of B and multicasts it into both, halving B's L2 traffic. Then a
// stage is free only when the consumers of both blocks are done with it (they arrive on both
// blocks' "empty" barriers). TMA fills out-of-range rows and columns with zeros, so any
// M, N, K >= 1 works; stores are guarded.
//
// Template parameters: T (__half, __nv_bfloat16), TOut, B_NT, BM x BN x BK (BN a wgmma width: 32,
// 64, 128, 256 from hopper.cuh, 96-224 from wgmma_gemm_widths.cuh; BK = 64: one 128-byte swizzled
// row), STAGES, CONSUMERS (1 or 2), PINGPONG (needs 2 consumers, no split K), CLUSTER_M (1 or 2),
// GROUP_M, HAS_C, BIAS, ACT, TMA_STORE (D's rows are 16-byte aligned: a 16-bit D may be stored
// with TMA; else every D is stored from registers, element pairs or single elements), SPLIT_K
// (GemmArgs::split_k may be above 1: the partial-sum path is compiled in only then, as it costs a
// quarter of the compile time of a kernel without it), GROUPS (the
// tiles' schedule, gemm/gemm_groups.cuh: batch entries, or a mixture-of-experts layer's groups of
// rows counted on the device; no split K then).
//
// A and B must have 16-byte aligned rows for TMA; where they do not, the host runs
// gemm_sm90_pack_kernel first (gemm_pack.cuh), which copies them into the workspace.
#pragma once

#include "arch/hopper.cuh"
#include "arch/wgmma_gemm_widths.cuh"
#include "common/types.cuh"
#include "gemm/gemm_epilogue.cuh"
#include "gemm/gemm_groups.cuh"
#include "gemm/gemm_pack.cuh"

namespace tileops {

// Output tiles of 16-bit types go through shared memory and TMA stores (see above), in boxes of
// 64 columns, where D's rows are 16-byte aligned (TMA_STORE). A tile of 96, 160 or 224 columns
// stores its whole boxes so and its last 32 columns from registers (all of it from registers, its
// short-K problems ran at 0.7x cuBLAS: 4097 x 1152 x 896 with 128 x 160 tiles, H200). Tiles of
// 32 columns and unaligned rows store from registers. Host: gemm_sm90_stores_with_tma.
template <typename TOut, int BN, bool TMA_STORE>
__host__ __device__ constexpr bool gemm_sm90_tma_store() {
    return TMA_STORE && sizeof(TOut) == 2 && BN >= 64;
}

// Where D[r, c] of a 64 x 64 output box lies in its shared-memory buffer: 128-byte rows, swizzled
// like the operand tiles (the 16-byte chunk index XOR the row's index mod 8), so that the pairs a
// warp writes at once fall in different banks and TMA reads the box with the same 128B swizzle.
__device__ __forceinline__ int gemm_out_offset(int r, int c) { return r * 64 + (((c / 8) ^ (r % 8)) * 8) + c % 8; }

// Rows [0, rows) of a 64 x 64 output box, from its buffer (gemm_out_offset's layout) to D[row0, col0]
// onwards, 16 bytes a thread (t < 128, the consumer's threads): a grouped GEMM's box that reaches
// past its group's last row, where TMA would store the next group's rows too. The box lies within
// D's columns and D's rows are 16-byte aligned, as for TMA. From registers in pairs of 4 bytes
// instead (half of each 32-byte sector written), skewed loads ran up to 18% slower (H100,
// `bench_problems --lengths long_tail`: 256 x 16384 x 7168 x 1024 1753 -> 1430 us).
template <typename TOut>
__device__ __forceinline__ void gemm_store_box_rows(const TOut* buffer, TOut* D, long long ldd, long long row0,
                                                    long long col0, int rows, int t) {
    static_assert(sizeof(TOut) == 2, "a box row is 128 bytes, 8 chunks of 16");
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int chunk = t + 128 * i, r = chunk / 8, c = chunk % 8;
        if (r < rows)
            *reinterpret_cast<uint4*>(D + (row0 + r) * ldd + col0 + c * 8) =
                *reinterpret_cast<const uint4*>(buffer + r * 64 + (c ^ (r % 8)) * 8);
    }
}

// Two values as one 32-bit register of two 16-bit elements (the first in the low half).
template <typename TOut>
__device__ __forceinline__ unsigned gemm_pack_pair(const float (&v)[2]) {
    const Vec<TOut, 2> pair = pack<TOut, 2>(v);
    return *reinterpret_cast<const unsigned*>(&pair);
}

// Stores four 8 x 8 matrices of 16-bit elements: register i of each thread holds its two elements
// of matrix i (row lane / 4, columns 2 (lane % 4) and the next; the mma/wgmma accumulator layout),
// and lane 8 i + r gives the shared address of row r of matrix i (16 bytes).
__device__ __forceinline__ void gemm_stmatrix_x4(void* row, const unsigned (&regs)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_address(row)),
                 "r"(regs[0]), "r"(regs[1]), "r"(regs[2]), "r"(regs[3])
                 : "memory");
}

// The first of the K tiles [0, k_tiles) that split `split` of `splits` multiplies (the last split ends at k_tiles).
__device__ __forceinline__ int gemm_split_begin(int k_tiles, int split, int splits) {
    return static_cast<int>(static_cast<long long>(k_tiles) * split / splits);
}

// Split K (p.split_k > 1): the splits of a tile run on different blocks at once. Each writes its
// fp32 accumulators to its slot of p.partials (in fragment order: thread t's value i at i * 128 + t,
// coalesced) and counts itself in p.split_counters[tile]; the one that arrives last adds the
// others' slots to its accumulators, puts the counter back to zero for the next launch and
// returns true (it stores the tile); the others return false. Called by every consumer thread.
template <int CONSUMERS, int VALUES>
__device__ __forceinline__ bool gemm_reduce_splits(const GemmArgs& p, float* acc, long long tile, int split, int consumer,
                                                   int t, volatile int* flag) {
    constexpr int kBlockValues = CONSUMERS * VALUES * 128;
    float* mine = p.partials + (tile * p.split_k + split) * kBlockValues + consumer * VALUES * 128 + t;
#pragma unroll
    for (int i = 0; i < VALUES; ++i) __stcg(mine + i * 128, acc[i]);
    __threadfence();
    // Barrier 1 + CONSUMERS (1..CONSUMERS are the consumers' own): every consumer thread has written.
    named_barrier_sync(1 + CONSUMERS, 128 * CONSUMERS);
    if (consumer == 0 && t == 0) {
        const int arrived = atomicAdd(&p.split_counters[tile], 1);
        const bool last = arrived == p.split_k - 1;
        if (last) p.split_counters[tile] = 0;
        *flag = last;
    }
    named_barrier_sync(1 + CONSUMERS, 128 * CONSUMERS);
    const bool last = *flag != 0;
    // Nobody may overwrite the flag before everyone has read it.
    named_barrier_sync(1 + CONSUMERS, 128 * CONSUMERS);
    if (!last) return false;
    __threadfence();
    for (int other = 0; other < p.split_k; ++other) {
        if (other == split) continue;
        const float* theirs = p.partials + (tile * p.split_k + other) * kBlockValues + consumer * VALUES * 128 + t;
#pragma unroll
        for (int i = 0; i < VALUES; ++i) acc[i] += __ldcg(theirs + i * 128);
    }
    return true;
}

// The consumer warpgroups' part: waits for stages, multiplies, frees stages, stores tiles.
template <typename T, typename TOut, bool B_NT, int BM, int BN, int BK, int STAGES, int CONSUMERS, bool PINGPONG,
          int CLUSTER_M, int GROUP_M, bool HAS_C, bool BIAS, int ACT, bool TMA_STORE, bool SPLIT_K, int GROUPS,
          typename Schedule>
__device__ __forceinline__ void gemm_sm90_consume(const GemmArgs& p, const TensorMap* map_d, const T* ring_a,
                                                  const T* ring_b, TOut* out_tiles, unsigned long long* full,
                                                  unsigned long long* empty, volatile int* split_flag, int consumer, unsigned rank,
                                                  long long first_unit, long long unit_stride, const Schedule& schedule,
                                                  int k_tiles) {
    constexpr int kRows = PINGPONG ? BM : BM / CONSUMERS;  // rows of a tile this warpgroup multiplies
    constexpr int kAtoms = kRows / 64;
    constexpr int kTileA = BM * BK, kTileB = BN * BK;
    // Where this warpgroup's rows start in a tile, and which of the block's units it takes: all
    // of them (its share of each tile), or every other one (whole tiles, in turn).
    constexpr int kUnitsPerTurn = PINGPONG ? CONSUMERS : 1;
    const int row_offset = PINGPONG ? 0 : consumer * kRows;
    // Ping-pong hand-over: warpgroup c waits at named barrier kTurnBarrier + c (ids 1..CONSUMERS
    // are the consumers' own, 1 + CONSUMERS the split-K reduction's).
    constexpr int kTurnBarrier = 2 + CONSUMERS;
    // Frees a stage: in this block and, in a pair, in the partner (whose producer writes here too).
    auto release = [&](int s) {
        if constexpr (CLUSTER_M == 2) {
            mbarrier_arrive_cluster(&empty[s], 0);
            mbarrier_arrive_cluster(&empty[s], 1);
        } else {
            mbarrier_arrive(&empty[s]);
        }
    };
    const int t = static_cast<int>(threadIdx.x) % 128;
    const bool warp_leader = t % 32 == 0;
    float acc[kAtoms][BN / 2];
    int out_slot = 0;  // which of this consumer's two output buffers the next box uses
    int stage = 0;
    unsigned phase = 0;
    const long long tiles = schedule.units;
    const int splits = SPLIT_K ? p.split_k : 1;  // a constant 1 compiles the split path out
    for (long long unit = first_unit + (PINGPONG ? consumer * unit_stride : 0); unit < tiles * splits;
         unit += unit_stride * kUnitsPerTurn) {
        const long long tile = unit % tiles;
        const int split = static_cast<int>(unit / tiles);
        if constexpr (PINGPONG) {
            // The ring holds the block's units one after another (k_tiles stages each, no split K):
            // this unit's first stage is at position (its index in the block's sequence) x k_tiles.
            const long long position = (unit - first_unit) / unit_stride * k_tiles;
            stage = static_cast<int>(position % STAGES);
            phase = static_cast<unsigned>(position / STAGES) & 1u;
            // Wait for the other warpgroup to have waited for its unit's last stage: a parity wait
            // is only sound within one lap of the ring, and this unit may start more than a lap
            // ahead of where the producer is. It also keeps the turns in order.
            if (unit != first_unit) named_barrier_sync(kTurnBarrier + consumer, 256);
        }
        const GemmTile at = schedule.tile(p, tile, static_cast<int>(rank));
        const int kt_begin = gemm_split_begin(k_tiles, split, splits), kt_end = gemm_split_begin(k_tiles, split + 1, splits);
        int previous = -1;
        for (int kt = kt_begin; kt < kt_end; ++kt) {
            mbarrier_wait(&full[stage], phase);
            const T* tile_a = ring_a + stage * kTileA + row_offset * BK;
            const unsigned long long desc_b =
                B_NT ? wgmma_descriptor_sw128(ring_b + stage * kTileB)
                     : wgmma_descriptor_sw128_mn(ring_b + stage * kTileB, 64 * BK * sizeof(T));
            // A K step of 16 is 32 bytes along a K-major row, or 16 rows of 128 bytes of an N-major
            // tile (in the descriptor's 16-byte address units).
            constexpr unsigned kStepB = B_NT ? 2 : 128;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
                for (int atom = 0; atom < kAtoms; ++atom) {
                    const unsigned long long desc_a = wgmma_descriptor_sw128(tile_a + atom * 64 * BK);
                    wgmma_m64k16<T, BN, B_NT ? 0 : 1>(acc[atom], desc_a + 2 * kk, desc_b + kStepB * kk,
                                                      kt > kt_begin || kk > 0 ? 1 : 0);
                }
            }
            wgmma_commit();
            // The group just issued may still run; the one before has finished: free its buffer.
            wgmma_wait<1>();
            if (previous >= 0 && warp_leader) release(previous);
            previous = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
        // Ping-pong: the next unit (the other warpgroup's) may start.
        if (PINGPONG && unit + unit_stride < tiles * splits) named_barrier_arrive(kTurnBarrier + 1 - consumer, 256);
        wgmma_wait<0>();
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom) wgmma_fence_registers(acc[atom]);
        if (warp_leader) release(previous);
        // Split K: only the last split of a tile to finish stores it, adding the others' partial sums.
        if constexpr (SPLIT_K) {
            if (!gemm_reduce_splits<CONSUMERS, kAtoms * (BN / 2)>(p, &acc[0][0], tile, split, consumer, t, split_flag))
                continue;
        }

        TOut* D = static_cast<TOut*>(p.d) + at.ad_batch * p.batch_stride_d;
        const TOut* C = HAS_C ? static_cast<const TOut*>(p.c) + at.ad_batch * p.batch_stride_c : nullptr;
        const long long n0 = static_cast<long long>(at.tile_n) * BN;
        // Stores rows [atom x 64, atom x 64 + 64) of this consumer's rows, columns [col_begin,
        // col_end) of the tile, from the accumulators (pairs of elements, guarded).
        auto store_from_registers = [&](int atom, int col_begin, int col_end) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const long long row = at.row0 + row_offset + atom * 64 + (t / 32) * 16 + (t % 32) / 4 + half * 8;
                if (row >= at.row_end) continue;
                TOut* d_row = D + row * p.ldd;
                const TOut* c_row = HAS_C ? C + row * p.ldc : nullptr;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    if (j * 8 < col_begin || j * 8 >= col_end) continue;
                    const long long col = n0 + j * 8 + (t % 4) * 2;
                    if (col < p.n)
                        gemm_store_pair<T, TOut, HAS_C, BIAS, ACT>(p, d_row, c_row, col, acc[atom][4 * j + 2 * half],
                                                                   acc[atom][4 * j + 2 * half + 1]);
                }
            }
        };
        if constexpr (gemm_sm90_tma_store<TOut, BN, TMA_STORE>()) {
            // This consumer's rows in boxes of 64 x 64, through two buffers taken in turn: wait
            // until the store that used this one (two boxes ago) has read it, fill it, make the
            // writes visible to TMA, store (what lies past M or N is clipped).
            const long long row0 = at.row0 + row_offset;
            const int warp = t / 32, lane = t % 32;
            // Only C and bias are read, and only inside the matrix: a tile wholly inside needs no
            // checks (measured on H100: the per-pair checks and 4-byte stores cost 5% at 4096^3).
            const bool interior = row0 + kRows <= at.row_end && n0 + BN <= p.n;
            const float alpha = p.alpha;
#pragma unroll
            for (int box = 0; box < kAtoms * (BN / 64); ++box) {
                const int atom = box / (BN / 64), col0 = (box % (BN / 64)) * 64;
                // TMA clips at the matrix's edge, not at a group's: a box reaching past the group's
                // rows (into the next group's) stores its group's rows itself, one past them nothing.
                int group_rows = 64;
                if constexpr (GROUPS != kGemmBatched) {
                    if (row0 + atom * 64 >= at.row_end) continue;
                    if (row0 + atom * 64 + 64 > at.row_end) {
                        if (n0 + col0 + 64 > p.n) {  // past D's last column too: guarded stores
                            store_from_registers(atom, col0, col0 + 64);
                            continue;
                        }
                        group_rows = static_cast<int>(at.row_end - row0 - atom * 64);
                    }
                }
                TOut* buffer = out_tiles + (consumer * 2 + out_slot) * 64 * 64;
                if (t == 0) tma_store_wait_read<1>();
                named_barrier_sync(1 + consumer, 128);
                // The box's 16 8 x 8 fragments of this warp (8 column groups x 2 row halves), four
                // per stmatrix: the accumulator layout is stmatrix's fragment layout.
#pragma unroll
                for (int quad = 0; quad < 4; ++quad) {
                    unsigned packed[4];
#pragma unroll
                    for (int f = 0; f < 4; ++f) {
                        const int jj = 2 * quad + f / 2, half = f % 2, j = col0 / 8 + jj;
                        float v[2] = {acc[atom][4 * j + 2 * half], acc[atom][4 * j + 2 * half + 1]};
                        if constexpr (HAS_C || BIAS) {
                            const long long row = row0 + atom * 64 + warp * 16 + lane / 4 + half * 8;
                            const long long col = n0 + col0 + jj * 8 + (lane % 4) * 2;
                            if (interior || (row < at.row_end && col < p.n))
                                gemm_epilogue_pair<T, TOut, HAS_C, BIAS, ACT>(p, HAS_C ? C + row * p.ldc : nullptr,
                                                                              col, v);
                        } else {
                            v[0] = gemm_activation<ACT>(v[0] * alpha);
                            v[1] = gemm_activation<ACT>(v[1] * alpha);
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
                if (group_rows < 64) {
                    // No TMA store reads this buffer: the next box may take it again.
                    gemm_store_box_rows(buffer, D, p.ldd, row0 + atom * 64, n0 + col0, group_rows, t);
                    continue;
                }
                if (t == 0) {
                    tma_store_3d(map_d, buffer, static_cast<int>(n0) + col0, static_cast<int>(row0) + atom * 64, at.ad_batch);
                    tma_store_commit();
                }
                out_slot ^= 1;
            }
            if constexpr (BN % 64 != 0) {
#pragma unroll
                for (int atom = 0; atom < kAtoms; ++atom) store_from_registers(atom, BN / 64 * 64, BN);
            }
            continue;
        }
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom) store_from_registers(atom, 0, BN);
    }
}

template <typename T, typename TOut, bool B_NT, int BM, int BN, int BK, int STAGES, int CONSUMERS, bool PINGPONG,
          int CLUSTER_M, int GROUP_M, bool HAS_C, bool BIAS, int ACT, bool TMA_STORE, bool SPLIT_K,
          int GROUPS = kGemmBatched>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
    gemm_sm90_kernel(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
                     const __grid_constant__ TensorMap map_d, const GemmArgs p) {
    static_assert(B_NT || BN % 64 == 0, "an N-major B tile is loaded in boxes of 64 columns");
    static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "blocks run alone or in pairs");
    static_assert(CLUSTER_M == 1 || (B_NT ? BN % 16 == 0 : BN % 128 == 0), "B splits in two halves");
    static_assert(BK == 64, "a K step is one 128-byte swizzled row of 16-bit elements");
    static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong takes turns between two consumers");
    static_assert(!PINGPONG || !SPLIT_K, "ping-pong's ring order assumes whole tiles (no split K)");
    constexpr int kRows = PINGPONG ? BM : BM / CONSUMERS;  // rows of a tile each consumer warpgroup multiplies
    constexpr int kAtoms = kRows / 64;     // wgmma m64 atoms per consumer
    static_assert(kRows % 64 == 0 && kAtoms >= 1 && kAtoms <= 2, "a consumer owns 64 or 128 rows");
    constexpr int kTileA = BM * BK, kTileB = BN * BK;
    // Bytes a stage receives: A's box (p.a_box_rows of its BM rows; GemmArgs) and B's tile.
    const unsigned stage_bytes = static_cast<unsigned>((p.a_box_rows * BK + kTileB) * sizeof(T));

    // The swizzle pattern repeats every 1024 bytes: the ring starts on such a boundary (the host
    // adds 1024 bytes of slack).
    extern __shared__ __align__(1024) unsigned char gemm_shared[];
    unsigned char* base = gemm_shared + ((1024 - (shared_address(gemm_shared) & 1023)) & 1023);
    T* ring_a = reinterpret_cast<T*>(base);
    T* ring_b = ring_a + STAGES * kTileA;
    // Two 64 x 64 output buffers per consumer (16-bit D only; host: GemmConfig::shared_bytes), then the barriers.
    TOut* out_tiles = reinterpret_cast<TOut*>(ring_b + STAGES * kTileB);
    constexpr int kOutBuffers = gemm_sm90_tma_store<TOut, BN, TMA_STORE>() ? CONSUMERS * 2 * 64 * 64 : 0;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(out_tiles + kOutBuffers);
    unsigned long long* empty = full + STAGES;
    volatile int* split_flag = reinterpret_cast<volatile int*>(empty + STAGES);  // gemm_reduce_splits' broadcast
    // Grouped: the schedule's table of units per group, after the flag's 16 bytes.
    int* group_table = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(empty + STAGES) + 16);
    GemmSchedule<BM, CLUSTER_M, (GROUP_M + CLUSTER_M - 1) / CLUSTER_M, GROUPS> schedule;
    schedule.start(p, BN, group_table);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);                              // the producer's arrive (plus the TMA bytes)
            // One arrive per warp of the cluster's warpgroups that multiply from the stage.
            mbarrier_init(&empty[s], CLUSTER_M * (PINGPONG ? 1 : CONSUMERS) * 4);
        }
        fence_barrier_init();
    }
    // The partner block's barriers must be initialised before anyone multicasts or arrives on them.
    // (This also publishes the group table.)
    if constexpr (CLUSTER_M == 2) cluster_sync(); else __syncthreads();
    const unsigned rank = CLUSTER_M == 2 ? cluster_rank() : 0;

    // Work is handed out in units of CLUSTER_M vertically adjacent tiles (one per block of a
    // cluster); a tile past the last row of tiles (or of its group) just computes what its rows
    // hold and stores nothing.
    schedule.finish(p);
    const long long tiles = schedule.units;
    const long long first_unit = blockIdx.x / CLUSTER_M, unit_stride = gridDim.x / CLUSTER_M;
    const int k_tiles = static_cast<int>((p.k + BK - 1) / BK);
    const int warpgroup = static_cast<int>(threadIdx.x) / 128;

    // With two consumers the launch bound caps every thread at 168 registers: move the producer's
    // to the consumers. With one, 256 threads may already use up to 255 each; nothing to move.
    constexpr bool kReallocate = CONSUMERS == 2;
    if (warpgroup == 0) {
        if constexpr (kReallocate) warpgroup_registers_release<40>();
        if (threadIdx.x == 0) {
            tma_prefetch_descriptor(&map_a);
            tma_prefetch_descriptor(&map_b);
            if constexpr (gemm_sm90_tma_store<TOut, BN, TMA_STORE>()) tma_prefetch_descriptor(&map_d);
            int stage = 0;
            unsigned phase = 0;
            const int splits = SPLIT_K ? p.split_k : 1;
            for (long long unit = first_unit; unit < tiles * splits; unit += unit_stride) {
                const long long tile = unit % tiles;
                const int split = static_cast<int>(unit / tiles);
                const GemmTile at = schedule.tile(p, tile, static_cast<int>(rank));
                const int a_row = static_cast<int>(at.row0), a_batch = at.ad_batch, batch = at.b_batch;
                const int tile_n = at.tile_n;
                const int kt_end = gemm_split_begin(k_tiles, split + 1, splits);
                for (int kt = gemm_split_begin(k_tiles, split, splits); kt < kt_end; ++kt) {
                    mbarrier_wait(&empty[stage], phase ^ 1);
                    mbarrier_arrive_expect_tx(&full[stage], stage_bytes);
                    tma_load_3d(ring_a + stage * kTileA, &map_a, &full[stage], kt * BK, a_row, a_batch);
                    if constexpr (CLUSTER_M == 2) {
                        // This block's half of B, into both blocks of the pair.
                        if constexpr (B_NT) {
                            tma_load_3d_multicast(ring_b + stage * kTileB + rank * (BN / 2) * BK, &map_b, &full[stage],
                                                  kt * BK, tile_n * BN + static_cast<int>(rank) * (BN / 2), batch, 0x3);
                        } else {
#pragma unroll
                            for (int box = 0; box < BN / 128; ++box) {
                                const int column = static_cast<int>(rank) * (BN / 2) + box * 64;
                                tma_load_3d_multicast(ring_b + stage * kTileB + column * BK, &map_b, &full[stage],
                                                      tile_n * BN + column, kt * BK, batch, 0x3);
                            }
                        }
                    } else if constexpr (B_NT) {
                        tma_load_3d(ring_b + stage * kTileB, &map_b, &full[stage], kt * BK, tile_n * BN, batch);
                    } else {
                        // BK rows of K, BN columns of N: BN / 64 boxes of 64 columns, one after another.
#pragma unroll
                        for (int box = 0; box < BN / 64; ++box)
                            tma_load_3d(ring_b + stage * kTileB + box * 64 * BK, &map_b, &full[stage],
                                        tile_n * BN + box * 64, kt * BK, batch);
                    }
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        }
    } else {
        if constexpr (kReallocate) warpgroup_registers_claim<232>();
        gemm_sm90_consume<T, TOut, B_NT, BM, BN, BK, STAGES, CONSUMERS, PINGPONG, CLUSTER_M, GROUP_M, HAS_C, BIAS, ACT,
                          TMA_STORE, SPLIT_K, GROUPS>(p, &map_d, ring_a, ring_b, out_tiles, full, empty, split_flag, warpgroup - 1,
                                             rank, first_unit, unit_stride, schedule, k_tiles);
        // Shared memory must outlive the reads of the last TMA store.
        if (gemm_sm90_tma_store<TOut, BN, TMA_STORE>() && threadIdx.x % 128 == 0) tma_store_wait_all();
    }
    // Neither block of a pair may leave while the other can still write into its shared memory.
    if constexpr (CLUSTER_M == 2) {
        __syncwarp();
        cluster_sync();
    }
}

// The copies of misaligned operands before a launch of gemm_sm90_kernel, with its arguments.
template <typename T>
__global__ void __launch_bounds__(256) gemm_sm90_pack_kernel(const __grid_constant__ TensorMap, const __grid_constant__ TensorMap,
                                                             const __grid_constant__ TensorMap, const GemmArgs p) {
    static_assert(sizeof(T) == 2, "A and B are 16-bit");
    gemm_pack_operand(p);
}

}  // namespace tileops
