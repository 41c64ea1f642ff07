// Host-side encoding of device dtypes (round to nearest even), for filling and reading buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tileops/tensor.hpp"

namespace tileops::util {

// Writes `value` as `dtype` to `out` (dtype_size(dtype) bytes).
void encode_value(DType dtype, float value, uint8_t* out) noexcept;
// Reads one `dtype` value from `in`.
float decode_value(DType dtype, const uint8_t* in) noexcept;

}  // namespace tileops::util
