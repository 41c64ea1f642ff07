// What the GEMM families (16-bit and FP8) share about their matrices: leading dimensions and batch
// strides normalized and checked, run()'s matrix operands checked (batched views included), and
// the TMA tensor maps their sm_90 kernels load through. `op` names the op in messages ("Gemm").
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "tileops/tensor.hpp"

namespace tileops::detail {

// Elements from one matrix's first element to one past its last.
inline int64_t gemm_matrix_extent(int64_t rows, int64_t cols, int64_t ld) { return (rows - 1) * ld + cols; }

// The leading dimension to use: `ld`, or `cols` when it is 0; never shorter than a row.
int64_t gemm_leading_dimension(const char* op, const char* name, int64_t ld, int64_t cols);

// The batch stride to use: `stride`, or rows x ld when it is 0. Outputs of different batch
// entries must not overlap (their blocks would race); inputs may.
int64_t gemm_batch_stride(const char* op, const char* name, int64_t stride, int64_t batch, int64_t rows, int64_t cols,
                          int64_t ld, bool output);

// Every offset the kernels form must fit in 64 bits, with headroom: each value (a leading
// dimension, a batch stride) times `count` (the largest dimension, the batch) within 2^50.
void check_gemm_offsets(const char* op, int64_t count, std::initializer_list<std::pair<const char*, int64_t>> values);

// One matrix operand of `batch` entries: a pointer, or a 3-D [batch, rows, cols] view (for batch
// 1 also a 2-D one). Returns its memory, for the overlap checks.
template <typename Arg>
RowsSpan check_gemm_operand(const char* op, int64_t batch, const char* name, const Arg& arg, DType dtype, int64_t rows,
                            int64_t cols, int64_t ld, int64_t stride);

// Whether the rows of a D with `out_bytes` elements suit TMA stores: `extents` (N, ld, and the
// batch or group stride where there is one) are all multiples of 8 elements, so that each row
// starts 16 bytes after the last and its N elements end on a 16-byte boundary. A TMA store writes
// whole 16-byte chunks: past an N that is not a multiple of 8 it would overwrite what lies beyond
// D's last column up to the next boundary (a padded row's gap, or another tensor's columns). A D
// of any other element size is stored from registers anyway.
inline bool gemm_d_rows_aligned(size_t out_bytes, std::initializer_list<int64_t> extents) {
    return out_bytes != 2 || widest_dividing_vector(8, extents) == 8;
}

// Whether a D at this pointer, whose rows are `rows_aligned` (gemm_d_rows_aligned), may be stored with
// TMA: a 16-bit D also starting on 16 bytes; a D of any other size stores from registers anyway,
// so only its rows count.
inline bool gemm_d_aligned(bool rows_aligned, size_t out_bytes, const void* d) {
    return rows_aligned && (out_bytes != 2 || widest_aligned_vector(8, d, out_bytes) == 8);
}

// How a TMA GEMM's D is stored, as its launch widths say (OpModel::vector_widths): `aligned_width`
// where D may be stored with TMA (its rows and pointer 16-byte aligned, gemm_d_aligned),
// ragged_width(aligned_width) where it is stored from registers.
class GemmDStore {
public:
    GemmDStore(size_t out_bytes, std::initializer_list<int64_t> extents, int aligned_width)
        : out_bytes_(out_bytes), rows_aligned_(gemm_d_rows_aligned(out_bytes, extents)), aligned_width_(aligned_width) {}
    std::vector<int> widths() const {
        if (rows_aligned_) return {aligned_width_, ragged_width(aligned_width_)};
        return {ragged_width(aligned_width_)};
    }
    bool aligned(const void* d) const { return gemm_d_aligned(rows_aligned_, out_bytes_, d); }
    int width(const void* d) const { return aligned(d) ? aligned_width_ : ragged_width(aligned_width_); }
    bool rows_aligned() const { return rows_aligned_; }

private:
    size_t out_bytes_;
    bool rows_aligned_;  // a 16-bit D may be stored with TMA (gemm_d_rows_aligned), or D is not 16-bit
    int aligned_width_;
};

// A and B as TMA reads them: each must start on 16 bytes ("tileops::<op>: argument 'A' must
// start on 16 bytes (TMA reads it)" otherwise).
void check_tma_operands_aligned(const char* op, const void* a, const void* b);

// A 3-D (cols, rows, batch) tensor map in boxes of 128 bytes of a row (swizzled 128B, wgmma's
// shared-memory layout) x box_rows rows. Elements outside the matrix read as zeros (what ragged
// tiles need) and are not written by stores.
CUtensorMap gemm_tensor_map(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                            int64_t stride, unsigned box_rows);

// Rows of A in a TMA kernel's box: block_m, or M rounded up to 8 where M is shorter (TMA is slow
// to zero-fill rows past the matrix; the tile rows past the box feed only rows of D past M).
int gemm_a_box_rows(int64_t m, int block_m);

}  // namespace tileops::detail
