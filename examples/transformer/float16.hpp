// 16-bit floats on the host: bf16 and IEEE half codes to and from float, rounded to nearest even.
#pragma once

#include <cstdint>

#include "tileops/tensor.hpp"

namespace transformer {

uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t bits);
uint16_t float_to_half(float value);  // overflow to infinity
float half_to_float(uint16_t bits);

// The code of `value` in `dtype` (bf16 or fp16), and back.
uint16_t float_to_code(float value, tileops::DType dtype);
float code_to_float(uint16_t code, tileops::DType dtype);

}  // namespace transformer
