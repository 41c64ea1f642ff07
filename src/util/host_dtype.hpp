// Host-side encoding of device dtypes (round to nearest even), for filling and reading buffers:
// the CUDA headers' own host conversions, so the host rounds exactly as the device does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tileops/tensor.hpp"

namespace tileops::util {

// Writes `value` as `dtype` to `out` (dtype_size(dtype) bytes).
void encode_value(DType dtype, float value, uint8_t* out) noexcept;
// Reads one `dtype` value from `in`.
float decode_value(DType dtype, const uint8_t* in) noexcept;

// fp8 e4m3 (CUDA's __nv_fp8_e4m3): the value of a code, and the nearest code to a value (ties to
// the even code; beyond the largest finite value, 448, it saturates; NaN gives the NaN code 0x7f).
float fp8_e4m3_to_float(uint8_t code) noexcept;
uint8_t float_to_fp8_e4m3(float value) noexcept;

}  // namespace tileops::util
