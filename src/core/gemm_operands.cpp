#include "core/gemm_operands.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cuda/driver.hpp"
#include "tileops/error.hpp"

namespace tileops::detail {

void check_tma_operands_aligned(const char* op, const void* a, const void* b) {
    for (auto [name, data] : {std::pair{"A", a}, {"B", b}})
        if (reinterpret_cast<uintptr_t>(data) % 16 != 0)
            throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must start on 16 bytes (TMA reads it)", op, name));
}

int64_t gemm_leading_dimension(const char* op, const char* name, int64_t ld, int64_t cols) {
    if (ld == 0) return cols;
    if (ld < cols)
        throw InvalidArgument(fmt::format("tileops::{}: {} = {} is smaller than a row ({} elements); rows may not overlap",
                                          op, name, ld, cols));
    return ld;
}

int64_t gemm_batch_stride(const char* op, const char* name, int64_t stride, int64_t batch, int64_t rows, int64_t cols,
                          int64_t ld, bool output) {
    const int64_t packed = rows * ld;
    if (stride == 0) return packed;
    if (stride < 0) throw InvalidArgument(fmt::format("tileops::{}: {} = {} is negative", op, name, stride));
    if (output && batch > 1 && stride < gemm_matrix_extent(rows, cols, ld))
        throw InvalidArgument(fmt::format("tileops::{}: {} = {} makes batch entries of D overlap (need >= {})", op, name,
                                          stride, gemm_matrix_extent(rows, cols, ld)));
    return stride;
}

void check_gemm_offsets(const char* op, int64_t count, std::initializer_list<std::pair<const char*, int64_t>> values) {
    const int64_t limit = int64_t{1} << 50;
    for (const auto& [name, value] : values)
        if (value > limit / count)
            throw InvalidArgument(fmt::format("tileops::{}: {} = {} is larger than supported", op, name, value));
}

template <typename Arg>
RowsSpan check_gemm_operand(const char* op, int64_t batch, const char* name, const Arg& arg, DType dtype, int64_t rows,
                            int64_t cols, int64_t ld, int64_t stride) {
    const TensorView* view = arg.view();
    // A batch of one may come as a [1, rows, cols] view too (what a batched caller passes when
    // its batch happens to be 1); its stride between entries means nothing then.
    const bool batched_view = view != nullptr && view->rank == 3 && (batch > 1 || view->shape[0] == 1);
    if (batch > 1 && view != nullptr && !batched_view)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must be a rank-3 view [{}, {}, {}] (batch {}), got rank {}",
                                          op, name, batch, rows, cols, batch, view->rank));
    RowsSpan span = check_operand(op, name, arg.data(), batched_view ? nullptr : view, dtype, rows, cols, ld);
    span.batch = batch;
    span.batch_stride = stride;
    if (batched_view && (view->dtype != dtype || view->shape[0] != batch || view->shape[1] != rows ||
                         view->shape[2] != cols || (batch > 1 && view->strides[0] != stride) || view->strides[1] != ld ||
                         view->strides[2] != 1))
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must be a {} view of shape [{}, {}, {}] and strides "
                                          "[{}, {}, 1] as in the problem", op, name, dtype_name(dtype), batch, rows, cols,
                                          stride, ld));
    return span;
}

template RowsSpan check_gemm_operand<TensorArg>(const char*, int64_t, const char*, const TensorArg&, DType, int64_t,
                                                int64_t, int64_t, int64_t);
template RowsSpan check_gemm_operand<OutputArg>(const char*, int64_t, const char*, const OutputArg&, DType, int64_t,
                                                int64_t, int64_t, int64_t);

CUtensorMap gemm_tensor_map(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                            int64_t stride, unsigned box_rows) {
    CUtensorMap map;
    const size_t element = dtype_size(dtype);
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(batch)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * element,
                                   static_cast<cuuint64_t>(batch > 1 ? stride : rows * ld) * element};
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / element), box_rows, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUtensorMapDataType type = dtype == DType::bf16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                     : dtype == DType::fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_UINT8;  // fp8 codes
    TILEOPS_CU_CHECK(cuda::driver().cuTensorMapEncodeTiled(
        &map, type, 3, const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

int gemm_a_box_rows(int64_t m, int block_m) {
    const int64_t rows = (m + 7) / 8 * 8;
    return m < block_m ? static_cast<int>(std::min<int64_t>(rows, block_m)) : block_m;
}

}  // namespace tileops::detail
