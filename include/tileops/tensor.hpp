// Data types and non-owning tensor views.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tileops/export.hpp"

namespace tileops {

// int32 is for indices (sequence lengths, page tables); the ops compute in fp32/fp16/bf16.
// fp8_e4m3 (1 sign, 4 exponent, 3 mantissa bits, no infinities, largest 448: CUDA's
// __nv_fp8_e4m3) is a storage type for quantized KV caches (DecodeAttentionProblem::kv_dtype).
enum class DType : uint8_t { fp32, fp16, bf16, int32, fp8_e4m3 };

// "fp32", "fp16", "bf16", "int32", "fp8_e4m3".
TILEOPS_EXPORT const char* dtype_name(DType dtype) noexcept;
// Parses a name (also "float32", "float16", "bfloat16", "float8_e4m3fn"); throws InvalidArgument otherwise.
TILEOPS_EXPORT DType parse_dtype(const std::string& name);
TILEOPS_EXPORT size_t dtype_size(DType dtype) noexcept;

// A non-owning view of device memory: pointer, dtype, shape and strides (in elements).
struct TILEOPS_EXPORT TensorView {
    static constexpr int kMaxRank = 4;

    void* data = nullptr;
    DType dtype = DType::fp32;
    int rank = 0;
    std::array<int64_t, kMaxRank> shape{};
    std::array<int64_t, kMaxRank> strides{};

    // A view with row-major contiguous strides.
    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
    // A 2-D view whose rows are `row_stride` elements apart.
    static TensorView rows(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride);
};

// An operand of Op::run: a raw device pointer (its shape is the op's problem) or a TensorView,
// which run() checks against the problem.
class TensorArg {
public:
    TensorArg(const void* pointer) noexcept : data_(pointer) {}  // NOLINT: implicit by design
    TensorArg(const TensorView& view) noexcept : data_(view.data), view_(view), has_view_(true) {}  // NOLINT

    const void* data() const noexcept { return data_; }
    const TensorView* view() const noexcept { return has_view_ ? &view_ : nullptr; }

private:
    const void* data_;
    TensorView view_{};
    bool has_view_ = false;
};

// A result operand of Op::run: like TensorArg, but writable.
class OutputArg {
public:
    OutputArg(void* pointer) noexcept : data_(pointer) {}  // NOLINT: implicit by design
    OutputArg(const TensorView& view) noexcept : data_(view.data), view_(view), has_view_(true) {}  // NOLINT

    void* data() const noexcept { return data_; }
    const TensorView* view() const noexcept { return has_view_ ? &view_ : nullptr; }

private:
    void* data_;
    TensorView view_{};
    bool has_view_ = false;
};

// A list of operands, as written at the call site ({x, weight}) or built by a program
// (pointer + count). Holds no copy: the operands must outlive the call.
template <typename Arg>
class ArgList {
public:
// The list refers to the braced list's array, which lives until the end of the call's full
// expression: exactly as long as run() needs it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
    ArgList(std::initializer_list<Arg> list) noexcept : data_(list.begin()), size_(list.size()) {}  // NOLINT
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    ArgList(const Arg* data, size_t size) noexcept : data_(data), size_(size) {}

    const Arg* begin() const noexcept { return data_; }
    const Arg* end() const noexcept { return data_ + size_; }
    size_t size() const noexcept { return size_; }
    const Arg& operator[](size_t i) const noexcept { return data_[i]; }

private:
    const Arg* data_;
    size_t size_;
};

using Inputs = ArgList<TensorArg>;
using Outputs = ArgList<OutputArg>;

}  // namespace tileops
