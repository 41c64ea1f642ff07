// Argument checks shared by the ops. Every failure is an InvalidArgument whose message names the
// op, the argument and what was expected.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tileops/tensor.hpp"

namespace tileops::detail {

// rows >= 1, cols >= 1, and rows * cols representable.
void check_extent(const char* op, int64_t rows, int64_t cols);

// A dimension of a tensor: its stride's name, its extent and its stride (in elements).
struct StridedDim {
    const char* name;
    int64_t count;
    int64_t stride;
};

// The most elements a tensor may span from its first element to its last: 2^58, so that byte
// offsets of any element type stay far inside int64_t (no device holds a thousandth of it).
constexpr int64_t kMaxSpanElements = int64_t{1} << 58;

// Elements from a tensor's first element to one past its last: `row_elements` contiguous, plus
// (count - 1) x stride for each dim (strides >= 0). Throws, naming the strides, when that exceeds
// kMaxSpanElements, before anything multiplies them: "tileops::<op>: <tensor> spans more than
// 2^58 elements (x_stride = s over n, ...)".
int64_t check_span(const char* op, const char* tensor, int64_t row_elements, std::initializer_list<StridedDim> dims);

// The row stride to use: `stride`, or `cols` when it is 0. Rejects strides shorter than a row and
// rows that together span more than kMaxSpanElements.
int64_t row_stride(const char* op, const char* argument, int64_t stride, int64_t rows, int64_t cols);

// A problem field in [low, high]: "tileops::<op>: <name> must be in [low, high], got v".
void check_in_range(const char* op, const char* name, int64_t value, int64_t low, int64_t high);

// A stride given in a problem: `packed` when it is 0 (the packed layout's), else the stride itself,
// which must not be negative. Either must be at most kMaxSpanElements.
int64_t stride_or_packed(const char* op, const char* name, int64_t stride, int64_t packed);

// a x b for sizes and strides (>= 0), or INT64_MAX where it would overflow: packed strides are
// products of what the caller gave, and stride_or_packed refuses what is too large to address.
inline int64_t saturating_product(int64_t a, int64_t b) noexcept {
    int64_t product = 0;
    return __builtin_mul_overflow(a, b, &product) ? INT64_MAX : product;
}

// Throws when the argument list does not have `expected` entries; `names` lists them for the message.
void check_count(const char* op, const char* which, size_t given, size_t expected, const char* names);

// A row-major operand's memory: `batch` matrices `batch_stride` elements apart, each `rows` rows
// of `cols` elements of `element` bytes, `stride` elements apart (a row every block reads, such as
// a weight: rows = 1).
struct RowsSpan {
    const char* name;
    const void* data;
    int64_t rows, cols, stride;
    size_t element;
    int64_t batch = 1, batch_stride = 0;
};

// A device operand of `rows` x `cols` with `stride`: non-null, aligned to its element size and,
// when given as a TensorView, of the expected dtype, shape and strides (rows == 0: a 1-D vector).
// Returns the memory it checked, for the overlap checks below (a vector: one row).
RowsSpan check_operand(const char* op, const char* argument, const void* data, const TensorView* view, DType dtype,
                       int64_t rows, int64_t cols, int64_t stride);

// A dtype the op computes in (fp32, fp16, bf16); int32 is for indices only.
void check_float_dtype(const char* op, const char* argument, DType dtype);

// A factor that must be > 0 and finite (softmax scales, a quantized cache's scales).
void check_positive_finite(const char* op, const char* name, float value);

// A KV cache's dtype: `kv_dtype` when given, else `dtype`; it must be `dtype` or fp8_e4m3. An fp8
// cache's k_scale and v_scale must be finite normal floats > 0 (so their reciprocals are finite
// too); any other cache's must stay 1.
DType kv_cache_dtype(const char* op, DType dtype, const std::optional<DType>& kv_dtype, float k_scale, float v_scale);

// A device operand of the given shape and strides (in elements): non-null, aligned to
// `alignment` bytes and, when given as a TensorView, of the expected dtype, rank, shape and
// strides (strides of dimensions of extent 1 are not compared). `dims` names the dimensions for
// the message, e.g. "[batch, q_len, heads, head_dim]". Returns the memory from its first element
// to one past its last as one row, for check_outputs_apart (the problem's strides were checked
// with check_span).
RowsSpan check_tensor(const char* op, const char* argument, const void* data, const TensorView* view, DType dtype,
                  std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides, size_t alignment,
                  const char* dims);

// Output rows of `row_elements` placed at every combination of the dims' offsets must be disjoint
// (rows that overlap would be written by racing blocks): "tileops::<op>: a = x, b = y and c = z
// make output rows overlap" otherwise.
void check_rows_disjoint(const char* op, int64_t row_elements, std::vector<StridedDim> dims);

// Whether blocks writing `output` race with those reading (or writing) `other`: they share an
// element, except exactly in place (`in_place_ok`: the same pointer, row strides, batch strides
// and element size, so that each element is read, then written, by one thread). Rows of the same
// pitch interleaved in one buffer ([x | y]) share none.
bool outputs_conflict(const RowsSpan& output, const RowsSpan& other, bool in_place_ok);

// Throws unless outputs_conflict is false: "tileops::<op>: output 'y' overlaps 'x' ...". Pass
// in_place_ok = false for an operand every row reads (weights, a broadcast row) and for another
// output.
void check_output_overlap(const char* op, const RowsSpan& output, const RowsSpan& other, bool in_place_ok);

// Each output apart from every input and every other output (nothing in place); spans whose data
// is null stand for operands the problem does not have and are skipped.
void check_outputs_apart(const char* op, std::initializer_list<RowsSpan> outputs, std::initializer_list<RowsSpan> inputs);

// The widest vector width <= `max_vec` (a power of two) that divides every value in `counts`.
int widest_dividing_vector(int max_vec, std::initializer_list<int64_t> counts);

// The widest vector width <= `max_vec` for which `address` is aligned to vec * `element_bytes`.
inline int widest_aligned_vector(int max_vec, const void* address, size_t element_bytes) noexcept {
    auto bits = reinterpret_cast<uintptr_t>(address);
    int vec = max_vec;
    while (vec > 1 && (bits & (static_cast<uintptr_t>(vec) * element_bytes - 1)) != 0) vec >>= 1;
    return vec;
}

}  // namespace tileops::detail
