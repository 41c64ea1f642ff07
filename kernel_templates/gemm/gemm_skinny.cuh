// GEMM for few rows of A (decode-time projections, M up to 64), sm_80 and newer: D = act(alpha *
// A * op(B) + beta * C + bias), B either in the weight layout (N x K row-major, "NT", B_NT) or K x
// N row-major ("NN"). Rows of A and B may start anywhere (an odd K or N, a leading dimension or
// pointer off 16 bytes): they are read in place.
//
// Such a product is bound by reading B once: at M = 1-64 a byte of B feeds 2-128 flops, far below
// what the tensor cores could use. So the design is that of a stream, not of a GEMM tile: a CTA
// owns BN columns of D (BN rows of B) for the BM rows of A, and its WARPS warps split K between
// them, each streaming its own 64-wide K steps (step t goes to warp t % WARPS, so the warps of a
// CTA read neighbouring 128-byte pieces of the same B rows) through its own cp.async ring of
// STAGES stages: loads run STAGES - 1 steps ahead and no CTA barrier is needed in the loop (a
// lane only waits for copies of its own warp, after a __syncwarp). Many small CTAs (N / BN of
// them, 128-900 for the Llama projections) keep every SM's loads in flight from the first cycle.
// The warps' partial sums meet in shared memory (fp32 atomic adds), and the epilogue (alpha,
// beta * C, bias, activation) writes D by rows, two columns per thread.
//
// Rows in place: a row's 64-element K step is copied as the nine 16-byte aligned chunks that
// cover it whatever its offset (only those that hold some of its elements: a chunk that holds
// one valid byte lies in mapped memory); the row then starts `shift` elements into its copy,
// the same shift at every K step (steps are 128 bytes). Copying such rows first into aligned ones
// (gemm_pack.cuh, what the TMA kernel does) triples the bytes a memory-bound product moves.
// The MMA is mma.sync m16n8k16, its fragments read as pairs of elements from the shifted rows
// (two 4-byte shared loads and a byte permute a pair). The chunk that holds a step's end is copied
// only up to it and zero-filled past it, so the sums never see what lies past K.
//
// Layout NN: a K step of B is its 64 rows of K, each copied as the chunks that cover the CTA's BN
// columns (BN + 8 elements, the row's own shift in front). Row k's shift repeats every 8 rows
// (8 x ldb elements are a multiple of 16 bytes), so a lane's B elements, rows 2t and 2t + 1 of each
// 8 (t = lane % 4), come at two shifts; they are read one by one (a 2-byte shared load each) and
// paired with a byte permute, as many loads as the NT fragments take.
//
// Template parameters: T (__half, __nv_bfloat16), TOut, BM (16, 32 or 64 rows of A per CTA), BN
// (16, 32 or 64), WARPS, STAGES, HAS_C, BIAS, ACT, B_NT. Dynamic shared memory: WARPS * STAGES *
// (BM * 72 + B's step: BN * 72 (NT) or 64 * (BN + 8) (NN)) elements, then BM * BN floats
// (GemmConfig::shared_bytes).
#pragma once

#include "arch/mma_sm80.cuh"
#include "common/types.cuh"
#include "gemm/gemm_block_sums.cuh"

namespace tileops {

// A pair of elements of a row copied in place, k elements (k even) after the lane's pair: `word` is
// the lane's word in shared memory, its pair's first element in it (an even shift) or in its upper
// half (an odd one); `select` the byte permute that takes the pair (0x3210 or 0x5432).
__device__ __forceinline__ unsigned skinny_pair(const unsigned* word, unsigned select, int k) {
    return __byte_perm(word[k / 2], word[k / 2 + 1], select);
}

template <typename T, typename TOut, int BM, int BN, int WARPS, int STAGES, bool HAS_C, bool BIAS, int ACT, bool B_NT>
__global__ void __launch_bounds__(WARPS * 32) gemm_skinny_kernel(const GemmArgs p) {
    constexpr int BK = 64;
    constexpr int PITCH = BK + 8;           // a row's K step as the nine 16-byte chunks that cover it at any shift
    constexpr int CHUNKS = PITCH / 8;
    constexpr int ROWS = BM + BN;           // NT: rows 0..BM-1 of a stage are A's, then B's
    // NN: A's BM rows, then B's BK rows of BN columns (+ 8 for the shift), B_CHUNKS copies each.
    constexpr int B_PITCH = BN + 8;
    constexpr int B_CHUNKS = B_PITCH / 8;
    constexpr int A_ELEMS = BM * PITCH;
    constexpr int STAGE_ELEMS = B_NT ? ROWS * PITCH : A_ELEMS + BK * B_PITCH;
    constexpr int M_TILES = BM / 16, N_TILES = BN / 8;
    constexpr int THREADS = WARPS * 32;
    static_assert(sizeof(T) == 2, "A and B are 16-bit");
    static_assert(BM % 16 == 0 && BN % 16 == 0, "BM and BN are multiples of 16");
    static_assert(STAGES >= 2, "at least double buffering");

    extern __shared__ __align__(128) unsigned char gemm_shared[];
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    T* ring = reinterpret_cast<T*>(gemm_shared) + warp * STAGES * STAGE_ELEMS;
    float* sums = reinterpret_cast<float*>(reinterpret_cast<T*>(gemm_shared) + WARPS * STAGES * STAGE_ELEMS);

    const long long n0 = static_cast<long long>(blockIdx.x) * BN, m0 = static_cast<long long>(blockIdx.y) * BM;
    const long long batch = blockIdx.z;
    const T* A = static_cast<const T*>(p.a) + batch * p.batch_stride_a;
    const T* B = static_cast<const T*>(p.b) + batch * p.batch_stride_b;
    const int k_tiles = static_cast<int>((p.k + BK - 1) / BK);
    const int iterations = warp < k_tiles ? (k_tiles - warp + WARPS - 1) / WARPS : 0;
    // Row r of a stage: where it starts in memory (rows past M or N are never read).
    auto row_start = [&](int r) { return r < BM ? A + (m0 + r) * p.lda : B + (n0 + r - BM) * p.ldb; };
    auto row_inside = [&](int r) { return r < BM ? m0 + r < p.m : n0 + r - BM < p.n; };
    auto shift_of = [&](int r) { return static_cast<int>(reinterpret_cast<unsigned long long>(row_start(r)) % 16) / 2; };

    // NN: the bytes of a row of B that the CTA's columns cover.
    const unsigned long long b_row_bytes = sizeof(T) * static_cast<unsigned long long>(min(static_cast<long long>(BN), p.n - n0));
    // The (unread) source of a zero-filled copy: an aligned address.
    const unsigned long long zero_source = reinterpret_cast<unsigned long long>(p.b) & ~15ull;

    // Starts the copies of this warp's iteration `it` (K step warp + it * WARPS) into its stage:
    // the chunks that hold some of the step's elements of an existing row; the others zero-filled.
    auto issue = [&](int it) {
        T* stage = ring + (it % STAGES) * STAGE_ELEMS;
        const long long k0 = static_cast<long long>(warp + it * WARPS) * BK;
        const bool live = it < iterations;
        const long long step_bytes = live ? static_cast<long long>(sizeof(T)) * min(static_cast<long long>(BK), p.k - k0) : 0;
        // Not unrolled: unrolled, the compiler keeps every copy's source address live across the
        // main loop, and the accumulators spill. (The NT loop does not call NN's copy_chunk below:
        // through it, the 64 x 32 NT kernels spill 16 bytes on sm_90a.)
        if constexpr (B_NT) {
#pragma unroll 1
            for (int idx = lane; idx < ROWS * CHUNKS; idx += 32) {
                const int row = idx / CHUNKS, chunk = idx % CHUNKS;
                const unsigned long long first = reinterpret_cast<unsigned long long>(row_start(row) + k0);
                const unsigned long long src = (first & ~15ull) + 16ull * chunk;
                const unsigned long long end = first + step_bytes;
                const bool valid = live && row_inside(row) && src < end;
                // A chunk that holds the step's end copies only the bytes before it: past K the copy is
                // zeros (what the MMAs need there), and nothing past the matrix is read.
                cp_async<16>(stage + row * PITCH + chunk * 8, reinterpret_cast<const void*>(valid ? src : zero_source),
                             valid ? static_cast<int>(min(16ull, end - src)) : 0);
            }
        } else {
            // The K step of A's rows, then B's rows k0 .. k0 + 63 (as far as K), columns n0 .. n0 +
            // BN - 1 (as far as N), each copy as above.
            auto copy_chunk = [&](T* dst, unsigned long long first, int chunk, unsigned long long bytes, bool inside) {
                const unsigned long long src = (first & ~15ull) + 16ull * chunk;
                const unsigned long long end = first + bytes;
                const bool valid = live && inside && src < end;
                cp_async<16>(dst, reinterpret_cast<const void*>(valid ? src : zero_source),
                             valid ? static_cast<int>(min(16ull, end - src)) : 0);
            };
#pragma unroll 1
            for (int idx = lane; idx < BM * CHUNKS; idx += 32) {
                const int row = idx / CHUNKS, chunk = idx % CHUNKS;
                copy_chunk(stage + row * PITCH + chunk * 8, reinterpret_cast<unsigned long long>(row_start(row) + k0),
                           chunk, step_bytes, row_inside(row));
            }
#pragma unroll 1
            for (int idx = lane; idx < BK * B_CHUNKS; idx += 32) {
                const int row = idx / B_CHUNKS, chunk = idx % B_CHUNKS;
                copy_chunk(stage + A_ELEMS + row * B_PITCH + chunk * 8,
                           reinterpret_cast<unsigned long long>(B + (k0 + row) * p.ldb + n0), chunk, b_row_bytes,
                           k0 + row < p.k);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int it = 0; it < STAGES - 1; ++it) issue(it);

    for (int i = static_cast<int>(threadIdx.x); i < BM * BN; i += THREADS) sums[i] = 0.0f;

    // This lane's fragment rows: A's rows g and g + 8 of each m-tile, B's row g of each n-tile (g =
    // lane / 4). Rows 8 apart start 8 x ld elements apart, a multiple of 16 bytes: every A row of
    // the lane has one shift, every B row another, so a row is a fixed word offset from the lane's
    // first.
    const int g = lane / 4, t = lane % 4;
    const int a_shift = shift_of(g), b_shift = B_NT ? shift_of(BM + g) : 0;
    // Word offsets of the lane's first pair (elements 2t and 2t + 1 of a K step, t = lane % 4).
    const int a_word = (g * PITCH + a_shift) / 2 + t, b_word = ((BM + g) * PITCH + b_shift) / 2 + t;
    const unsigned a_select = a_shift % 2 ? 0x5432u : 0x3210u, b_select = b_shift % 2 ? 0x5432u : 0x3210u;
    constexpr int kRowWords = PITCH / 2;
    // NN: the lane's B elements (k 2t and 2t + 1 of each 8, column g of each n-tile) as element
    // offsets into a stage, each row at its own shift.
    auto nn_shift = [&](int k) { return static_cast<int>(reinterpret_cast<unsigned long long>(B + k * p.ldb + n0) % 16) / 2; };
    const int b_even = A_ELEMS + 2 * t * B_PITCH + (B_NT ? 0 : nn_shift(2 * t)) + g;
    const int b_odd = A_ELEMS + (2 * t + 1) * B_PITCH + (B_NT ? 0 : nn_shift(2 * t + 1)) + g;

    float acc[M_TILES][N_TILES][4];
#pragma unroll
    for (int i = 0; i < M_TILES; ++i)
#pragma unroll
        for (int j = 0; j < N_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // One K step's MMAs from a landed stage.
    auto multiply = [&](const T* stage_elems) {
        const unsigned* stage = reinterpret_cast<const unsigned*>(stage_elems);
        const unsigned short* halves = reinterpret_cast<const unsigned short*>(stage_elems);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[M_TILES][4];
#pragma unroll
            for (int i = 0; i < M_TILES; ++i) {
                // a0: (g, kk + 2t), a1: (g + 8, kk + 2t), a2: (g, kk + 8 + 2t), a3: (g + 8, kk + 8 + 2t).
                const unsigned* row = stage + a_word + i * 16 * kRowWords;
                a[i][0] = skinny_pair(row, a_select, kk);
                a[i][1] = skinny_pair(row + 8 * kRowWords, a_select, kk);
                a[i][2] = skinny_pair(row, a_select, kk + 8);
                a[i][3] = skinny_pair(row + 8 * kRowWords, a_select, kk + 8);
            }
#pragma unroll
            for (int j = 0; j < N_TILES; ++j) {
                // b0: (k kk + 2t, n g), b1: (k kk + 8 + 2t, n g).
                unsigned b[2];
                if constexpr (B_NT) {
                    const unsigned* row = stage + b_word + j * 8 * kRowWords;
                    b[0] = skinny_pair(row, b_select, kk), b[1] = skinny_pair(row, b_select, kk + 8);
                } else {
                    // Pairs along K: rows kk + 2t and kk + 2t + 1 (then 8 rows on) of column g.
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int k = (kk + 8 * h) * B_PITCH + j * 8;
                        b[h] = __byte_perm(halves[b_even + k], halves[b_odd + k], 0x5410u);
                    }
                }
#pragma unroll
                for (int i = 0; i < M_TILES; ++i) mma_16816<T>(acc[i][j], a[i], b);
            }
        }
    };

    for (int it = 0; it < iterations; ++it) {
        __syncwarp();  // every lane is done with the stage the next copies overwrite
        issue(it + STAGES - 1);
        cp_async_wait<STAGES - 1>();
        __syncwarp();  // the other lanes' copies of this step are visible
        multiply(ring + (it % STAGES) * STAGE_ELEMS);
    }
    cp_async_wait<0>();
    __syncthreads();  // `sums` is zeroed

    // The warps' K parts meet in shared memory. Accumulator (i, j): rows g and g + 8 of m-tile i,
    // columns 2 * t and the next of n-tile j.
#pragma unroll
    for (int i = 0; i < M_TILES; ++i)
#pragma unroll
        for (int j = 0; j < N_TILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = i * 16 + g + (e / 2) * 8, col = j * 8 + t * 2 + e % 2;
                atomicAdd(&sums[row * BN + col], acc[i][j][e]);
            }
    __syncthreads();

    gemm_store_block_sums<T, TOut, BM, BN, THREADS, HAS_C, BIAS, ACT>(p, sums, batch, m0, n0);
}

}  // namespace tileops
