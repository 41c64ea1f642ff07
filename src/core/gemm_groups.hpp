// What the grouped GEMMs (16-bit and FP8) share about their groups: the problem's checks, the
// flat matrix the groups' rows form, the row counts' operand and the most tiles a launch can have.
// The kernels' side: kernel_templates/gemm/gemm_groups.cuh.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/op_model.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the kernels' argument block
#include "core/validation.hpp"
#include "tileops/gemm_grouped.hpp"
#include "tileops/op.hpp"

namespace tileops::detail {

constexpr int64_t kGemmMaxGroups = 4096;  // the schedule's table: 16 KB of shared memory at most

// A grouped launch's matrices as run() gives them: A and D of the groups' rows, B a batch entry
// per group (elements between groups: group_stride_b), the row counts.
struct GemmGroupsMatrices {
    const void* a;
    const void* b;
    void* d;
    const void* group_rows;
    int64_t n, k, lda, ldb, ldd, group_stride_b;
    float alpha;
};

struct GemmGroups {
    int64_t groups;
    int64_t rows;  // contiguous: all groups' rows; masked: each group's capacity
    bool masked;

    // Throws InvalidArgument naming `op` and the bad value: groups in [1, kGemmMaxGroups], rows,
    // n and k in [1, 2^31 - 1], the flat matrix within 2^31 - 1 rows, a known layout.
    static GemmGroups checked(const char* op, int64_t groups, int64_t rows, int64_t n, int64_t k, GemmGroupLayout layout);

    int64_t flat_rows() const { return masked ? groups * rows : rows; }
    int64_t rows_count() const { return masked ? groups : groups + 1; }  // group_rows' length
    // The rows a group has on average (contiguous) or room for (masked): what configs are chosen for.
    int64_t typical_rows() const;
    // The most units of `unit_rows` rows x `block_n` columns the groups' tiles can make (each group
    // wastes at most one partial unit of rows), for a grid's size and the table's int range.
    int64_t max_units(int64_t unit_rows, int64_t n, int64_t block_n) const;
    // Rows of A a TMA box loads for tiles of block_m rows: masked groups of a capacity under
    // block_m hold one tile each, whose rows past the capacity (rounded up to 8) feed only rows of
    // D past the count, never stored: a decode step reads no more of A than it has. Contiguous
    // groups start anywhere: whole tiles.
    int a_box_rows(int block_m) const;
    // The kernels' GROUPS argument (kGemmGroupsContiguous or kGemmGroupsMasked).
    int schedule() const;
    // The kernels' argument block: A and D one flat matrix of flat_rows(), B's batch entries the
    // groups, A's box rows for tiles of block_m (a_box_rows).
    GemmArgs kernel_args(const GemmGroupsMatrices& m, int block_m) const;
    // TMA tensor maps of the flat A (boxes of args.a_box_rows rows) and D (64 x 64 boxes).
    CUtensorMap a_map(const GemmArgs& args, DType dtype) const;
    CUtensorMap d_map(const GemmArgs& args, DType dtype) const;
    // group_rows as tools fill it: balanced groups (offsets i x rows / groups, or every count the capacity).
    OperandSpec rows_operand() const;
    // run()'s matrix operand of the groups' rows (A or D: [rows, cols], masked also [groups,
    // capacity, cols]) with its leading dimension, and group_rows; returns their memory.
    template <typename Arg>
    RowsSpan check_rows_operand(const char* op, const char* name, const Arg& arg, DType dtype, int64_t cols, int64_t ld) const;
    RowsSpan check_group_rows(const char* op, const TensorArg& arg) const;
};

}  // namespace tileops::detail
