#include "tileops/tensor.hpp"

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops {

const char* dtype_name(DType dtype) noexcept {
    switch (dtype) {
        case DType::fp32: return "fp32";
        case DType::fp16: return "fp16";
        case DType::bf16: return "bf16";
        case DType::int32: return "int32";
        case DType::fp8_e4m3: return "fp8_e4m3";
    }
    return "unknown";
}

DType parse_dtype(const std::string& name) {
    if (name == "fp32" || name == "float32" || name == "float") return DType::fp32;
    if (name == "fp16" || name == "float16" || name == "half") return DType::fp16;
    if (name == "bf16" || name == "bfloat16") return DType::bf16;
    if (name == "int32") return DType::int32;
    if (name == "fp8_e4m3" || name == "float8_e4m3fn") return DType::fp8_e4m3;
    throw InvalidArgument(
        fmt::format("tileops: unknown dtype '{}' (expected fp32, fp16, bf16, int32 or fp8_e4m3)", name));
}

size_t dtype_size(DType dtype) noexcept {
    switch (dtype) {
        case DType::fp32:
        case DType::int32: return 4;
        case DType::fp16:
        case DType::bf16: return 2;
        case DType::fp8_e4m3: return 1;
    }
    return 0;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
    if (shape.size() > static_cast<size_t>(kMaxRank))
        throw InvalidArgument(fmt::format("tileops: TensorView rank {} exceeds {}", shape.size(), kMaxRank));
    TensorView view;
    view.data = data;
    view.dtype = dtype;
    view.rank = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t extent : shape) view.shape[i++] = extent;
    int64_t stride = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
        view.strides[d] = stride;
        stride *= view.shape[d];
    }
    return view;
}

TensorView TensorView::rows(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
    TensorView view = contiguous(data, dtype, {rows, cols});
    view.strides[0] = row_stride;
    return view;
}

}  // namespace tileops
