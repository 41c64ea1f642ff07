// The argument block every GEMM kernel takes. Plain C++: the host code that fills it
// (src/ops/gemm/gemm.cpp) includes this same header, so the layout exists once.
#pragma once

namespace tileops {

// One operand copied into the workspace before the GEMM (gemm/gemm_pack.cuh): `rows` x `cols` 16-bit
// elements of each batch entry, from rows `ld_from` apart to rows `ld_to` apart (a multiple of 8).
struct GemmPackedCopy {
    const void* from;  // null: this operand is not copied
    void* to;
    long long rows, cols;
    long long ld_from, ld_to;
    long long batch_stride_from, batch_stride_to;
};

// How the GEMM kernels walk their tiles (their GROUPS template parameter; gemm/gemm_groups.cuh):
// batch entries one after another, or groups of rows given on the device.
enum : int { kGemmBatched = 0, kGemmGroupsContiguous = 1, kGemmGroupsMasked = 2 };

// Shared memory of the grouped schedule's table (groups + 1 ints, 16-byte rounded), which the
// host adds to a grouped launch's.
constexpr unsigned gemm_groups_table_bytes(int groups) { return static_cast<unsigned>((groups + 1) * 4 + 15) / 16 * 16; }

// Pointers are to the first batch entry; strides in elements.
struct GemmArgs {
    const void* a;
    const void* b;
    const void* c;     // null without C
    const void* bias;  // null without bias
    void* d;
    long long m, n, k;
    long long lda, ldb, ldc, ldd;
    long long batch_stride_a, batch_stride_b, batch_stride_c, batch_stride_d;
    long long batch;
    float alpha, beta;
    // sm_90 kernel, split K (gemm_reduce_splits): splits per tile (1: none), the fp32 partial
    // tiles and the per-tile counters (zero between launches) in the op's workspace.
    int split_k;
    float* partials;
    int* split_counters;
    // sm_90 kernel: rows of A a TMA box loads, BM or, where M < BM, M rounded up to 8 (zero-filling
    // out-of-bounds rows slows TMA down: M = 1 x 6144 x 4096 took 37 us with a 64-row box, 64 rows
    // 17 us). Rows of the tile past the box are not loaded; they only feed rows of D past M.
    int a_box_rows;
    // The copies of A and B the launch makes first where their rows are not 16-byte aligned; a,
    // b, lda, ldb and the batch strides above then describe the copies.
    GemmPackedCopy packs[2];
    // Grouped GEMMs (gemm/gemm_groups.cuh; null otherwise): A and D are one flat matrix of m rows
    // whose groups are row ranges, B has one batch entry per group. group_capacity 0: group_rows
    // holds offsets[groups + 1] (group g is rows [offsets[g], offsets[g + 1]), the contiguous
    // layout); else counts[groups] (group g is rows [g x capacity, g x capacity + counts[g]), the
    // masked layout). Read on the device: a CUDA graph replays with the values of the moment.
    const int* group_rows;
    int groups;
    long long group_capacity;
};

static_assert(sizeof(GemmArgs) == 328, "GemmArgs: the kernels' parameter block changed size");

}  // namespace tileops
