#include "core/validation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/error.hpp"

namespace tileops::detail {

void check_extent(const char* op, int64_t rows, int64_t cols) {
    if (rows < 1) throw InvalidArgument(fmt::format("tileops::{}: rows must be >= 1, got {}", op, rows));
    if (cols < 1) throw InvalidArgument(fmt::format("tileops::{}: cols must be >= 1, got {}", op, cols));
    if (rows > std::numeric_limits<int64_t>::max() / cols)
        throw InvalidArgument(fmt::format("tileops::{}: rows x cols = {} x {} overflows", op, rows, cols));
    if (cols > (int64_t{1} << 40))
        throw InvalidArgument(fmt::format("tileops::{}: cols = {} is larger than supported (2^40)", op, cols));
}

int64_t check_span(const char* op, const char* tensor, int64_t row_elements, std::initializer_list<StridedDim> dims) {
    int64_t span = row_elements;
    bool fits = row_elements >= 0 && row_elements <= kMaxSpanElements;
    for (const StridedDim& dim : dims) {
        int64_t reach = 0;
        if (fits && dim.count > 1)
            fits = dim.stride >= 0 && !__builtin_mul_overflow(dim.count - 1, dim.stride, &reach) &&
                   !__builtin_add_overflow(span, reach, &span) && span <= kMaxSpanElements;
    }
    if (fits) return span;
    std::vector<std::string> given;
    for (const StridedDim& dim : dims) given.push_back(fmt::format("{} = {} over {}", dim.name, dim.stride, dim.count));
    throw InvalidArgument(fmt::format("tileops::{}: {} spans more than 2^58 elements, which overflows the offsets "
                                      "supported ({}, rows of {})", op, tensor, fmt::join(given, ", "), row_elements));
}

int64_t row_stride(const char* op, const char* argument, int64_t stride, int64_t rows, int64_t cols) {
    if (stride == 0) stride = cols;
    if (stride < cols)
        throw InvalidArgument(fmt::format("tileops::{}: {} = {} is smaller than a row (cols = {}); rows may not overlap",
                                          op, argument, stride, cols));
    check_span(op, argument, cols, {{argument, rows, stride}});
    return stride;
}

void check_count(const char* op, const char* which, size_t given, size_t expected, const char* names) {
    if (given != expected)
        throw InvalidArgument(fmt::format("tileops::{}: expected {} {} ({}), got {}", op, expected, which, names, given));
}

RowsSpan check_operand(const char* op, const char* argument, const void* data, const TensorView* view, DType dtype,
                       int64_t rows, int64_t cols, int64_t stride) {
    if (data == nullptr) throw InvalidArgument(fmt::format("tileops::{}: argument '{}' is a null pointer", op, argument));
    const size_t element = dtype_size(dtype);
    const RowsSpan span = rows == 0 ? RowsSpan{argument, data, 1, cols, cols, element}
                                    : RowsSpan{argument, data, rows, cols, stride, element};
    if (reinterpret_cast<uintptr_t>(data) % element != 0)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' ({}) is not aligned to its element size ({} bytes)",
                                          op, argument, data, element));
    if (view == nullptr) return span;
    if (view->dtype != dtype)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' has dtype {}, expected {}", op, argument,
                                          dtype_name(view->dtype), dtype_name(dtype)));
    if (rows == 0) {
        if (view->rank != 1 || view->shape[0] != cols || (cols > 1 && view->strides[0] != 1))
            throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must be a contiguous vector of {} elements",
                                              op, argument, cols));
        return span;
    }
    if (view->rank != 2 || view->shape[0] != rows || view->shape[1] != cols)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must have shape [{}, {}] (rank 2), got rank {} [{}, {}]",
                                          op, argument, rows, cols, view->rank, view->shape[0], view->shape[1]));
    if (view->strides[1] != 1 || (rows > 1 && view->strides[0] != stride))
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must have strides [{}, 1] as in the problem, got [{}, {}]",
                                          op, argument, stride, view->strides[0], view->strides[1]));
    return span;
}

void check_positive_finite(const char* op, const char* name, float value) {
    if (!(value > 0.0f) || !std::isfinite(value))
        throw InvalidArgument(fmt::format("tileops::{}: {} must be positive and finite, got {}", op, name, value));
}

DType kv_cache_dtype(const char* op, DType dtype, const std::optional<DType>& kv_dtype, float k_scale, float v_scale) {
    const DType kv = kv_dtype.value_or(dtype);
    if (kv != dtype && kv != DType::fp8_e4m3)
        throw InvalidArgument(fmt::format("tileops::{}: kv_dtype must be dtype ({}) or fp8_e4m3, got {}", op,
                                          dtype_name(dtype), dtype_name(kv)));
    if (kv == DType::fp8_e4m3) {
        for (auto [name, scale] : {std::pair{"k_scale", k_scale}, {"v_scale", v_scale}}) {
            check_positive_finite(op, name, scale);
            // A subnormal scale times the softmax scale underflows to zero (uniform attention).
            if (scale < std::numeric_limits<float>::min())
                throw InvalidArgument(fmt::format("tileops::{}: {} = {} is subnormal; scales must be at least {}", op, name,
                                                  scale, std::numeric_limits<float>::min()));
        }
    } else if (k_scale != 1.0f || v_scale != 1.0f) {
        throw InvalidArgument(fmt::format("tileops::{}: k_scale and v_scale apply to an fp8_e4m3 cache (kv_dtype) only, "
                                          "got {} and {}", op, k_scale, v_scale));
    }
    return kv;
}

void check_float_dtype(const char* op, const char* argument, DType dtype) {
    if (dtype != DType::fp32 && dtype != DType::fp16 && dtype != DType::bf16)
        throw InvalidArgument(fmt::format("tileops::{}: {} must be fp32, fp16 or bf16, got {}", op, argument,
                                          dtype_name(dtype)));
}

RowsSpan check_tensor(const char* op, const char* argument, const void* data, const TensorView* view, DType dtype,
                      std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides, size_t alignment,
                      const char* dims) {
    if (data == nullptr) throw InvalidArgument(fmt::format("tileops::{}: argument '{}' is a null pointer", op, argument));
    if (reinterpret_cast<uintptr_t>(data) % alignment != 0)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' ({}) must be aligned to {} bytes", op, argument,
                                          data, alignment));
    int64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d) elements += (shape.begin()[d] - 1) * strides.begin()[d];
    const RowsSpan span{argument, data, 1, elements, elements, dtype_size(dtype)};
    if (view == nullptr) return span;
    if (view->dtype != dtype)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' has dtype {}, expected {}", op, argument,
                                          dtype_name(view->dtype), dtype_name(dtype)));
    // No copies: run() checks operands on the hot path, which must not allocate.
    const int64_t* want_shape = shape.begin();
    const int64_t* want_strides = strides.begin();
    const int rank = static_cast<int>(shape.size());
    if (view->rank < 0 || view->rank > TensorView::kMaxRank)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' has rank {}, expected {} ({})", op, argument,
                                          view->rank, rank, dims));
    bool same = view->rank == rank;
    for (int d = 0; same && d < rank; ++d) same = view->shape[d] == want_shape[d];
    if (!same)
        throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must have shape {} = [{}], got rank {} [{}]", op,
                                          argument, dims, fmt::join(shape, ", "), view->rank,
                                          fmt::join(view->shape.begin(), view->shape.begin() + view->rank, ", ")));
    for (int d = 0; d < rank; ++d)
        if (want_shape[d] > 1 && view->strides[d] != want_strides[d])
            throw InvalidArgument(fmt::format("tileops::{}: argument '{}' must have strides [{}] as in the problem, got [{}]",
                                              op, argument, fmt::join(strides, ", "),
                                              fmt::join(view->strides.begin(), view->strides.begin() + rank, ", ")));
    return span;
}

bool outputs_conflict(const RowsSpan& output, const RowsSpan& other, bool in_place_ok) {
    auto bytes = [](const RowsSpan& x, int64_t elements) { return elements * static_cast<int64_t>(x.element); };
    auto extent = [&](const RowsSpan& x) {  // from the first element to one past the last
        return static_cast<uint64_t>(bytes(x, (x.batch - 1) * x.batch_stride + (x.rows - 1) * x.stride + x.cols));
    };
    const auto out0 = reinterpret_cast<uintptr_t>(output.data), other0 = reinterpret_cast<uintptr_t>(other.data);
    if (out0 >= other0 + extent(other) || other0 >= out0 + extent(output)) return false;
    if (in_place_ok && output.data == other.data && output.stride == other.stride && output.element == other.element &&
        (output.batch == 1 || output.batch_stride == other.batch_stride))
        return false;
    // Both spans' rows on one lattice of the same pitch: their column ranges within a pitch decide.
    const int64_t pitch = bytes(output, output.stride);
    auto on_lattice = [&](const RowsSpan& x) {
        return bytes(x, x.stride) == pitch && (x.batch == 1 || bytes(x, x.batch_stride) % pitch == 0);
    };
    if (pitch <= 0 || !on_lattice(output) || !on_lattice(other)) return true;
    const int64_t delta = static_cast<int64_t>(out0 - other0);
    const int64_t column = ((delta % pitch) + pitch) % pitch;  // where output's rows start within other's pitch
    return !(column >= bytes(other, other.cols) && column + bytes(output, output.cols) <= pitch);
}

void check_output_overlap(const char* op, const RowsSpan& output, const RowsSpan& other, bool in_place_ok) {
    if (outputs_conflict(output, other, in_place_ok))
        throw InvalidArgument(fmt::format("tileops::{}: output '{}' overlaps '{}' ({})", op, output.name, other.name,
                                          in_place_ok ? "in place needs the same pointer, row stride and dtype size"
                                                      : "it must be apart"));
}

void check_outputs_apart(const char* op, std::initializer_list<RowsSpan> outputs, std::initializer_list<RowsSpan> inputs) {
    for (const RowsSpan* out = outputs.begin(); out != outputs.end(); ++out) {
        if (out->data == nullptr) continue;
        for (const RowsSpan& in : inputs)
            if (in.data != nullptr) check_output_overlap(op, *out, in, false);
        for (const RowsSpan* other = out + 1; other != outputs.end(); ++other)
            if (other->data != nullptr) check_output_overlap(op, *out, *other, false);
    }
}

int widest_dividing_vector(int max_vec, std::initializer_list<int64_t> counts) {
    int vec = max_vec;
    for (int64_t count : counts)
        while (vec > 1 && count % vec != 0) vec >>= 1;
    return vec;
}

void check_in_range(const char* op, const char* name, int64_t value, int64_t low, int64_t high) {
    if (value < low || value > high)
        throw InvalidArgument(fmt::format("tileops::{}: {} must be in [{}, {}], got {}", op, name, low, high, value));
}

int64_t stride_or_packed(const char* op, const char* name, int64_t stride, int64_t packed) {
    if (stride < 0) throw InvalidArgument(fmt::format("tileops::{}: {} must be >= 0, got {}", op, name, stride));
    if (stride > kMaxSpanElements)
        throw InvalidArgument(fmt::format("tileops::{}: {} = {} is larger than supported (2^58 elements)", op, name, stride));
    if (stride == 0 && packed > kMaxSpanElements)
        throw InvalidArgument(fmt::format("tileops::{}: {} packed around the dimensions inside it would be {} elements, "
                                          "more than supported (2^58)", op, name, packed));
    return stride == 0 ? packed : stride;
}

void check_rows_disjoint(const char* op, int64_t row_elements, std::vector<StridedDim> dims) {
    std::vector<std::string> given;
    for (const StridedDim& dim : dims) given.push_back(fmt::format("{} = {}", dim.name, dim.stride));
    // From the smallest stride up, each stride must clear everything the smaller ones span.
    std::sort(dims.begin(), dims.end(), [](const StridedDim& a, const StridedDim& b) { return a.stride < b.stride; });
    int64_t extent = row_elements;
    for (const StridedDim& dim : dims) {
        if (dim.count <= 1) continue;
        if (dim.stride < extent) {
            const std::string last = given.back();
            given.pop_back();
            throw InvalidArgument(fmt::format("tileops::{}: {} and {} make output rows overlap", op,
                                              fmt::join(given, ", "), last));
        }
        extent = check_span(op, "the output", extent, {dim});
    }
}

}  // namespace tileops::detail
