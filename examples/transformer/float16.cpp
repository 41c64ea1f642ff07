#include "float16.hpp"

#include <cmath>
#include <cstring>

namespace transformer {

uint16_t float_to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
    return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

float bf16_to_float(uint16_t bits) {
    const uint32_t word = uint32_t{bits} << 16;
    float value;
    std::memcpy(&value, &word, 4);
    return value;
}

// IEEE half, rounded to nearest even; overflow to infinity.
uint16_t float_to_half(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
    const uint32_t magnitude = bits & 0x7FFFFFFF;
    if (magnitude > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);  // NaN
    if (magnitude >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds past 65504
    if (magnitude < 0x38800000) {  // below the smallest normal half: a subnormal (or zero)
        const float scaled = std::ldexp(std::fabs(value), 24);  // units of 2^-24
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
    }
    const uint32_t rounded = magnitude + 0xFFF + ((magnitude >> 13) & 1);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

float half_to_float(uint16_t bits) {
    const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
    const uint32_t exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
    float magnitude;
    if (exponent == 0) {
        magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    } else if (exponent == 31) {
        magnitude = mantissa != 0 ? std::nanf("") : INFINITY;
    } else {
        magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
    }
    uint32_t word;
    std::memcpy(&word, &magnitude, 4);
    word |= sign;
    std::memcpy(&magnitude, &word, 4);
    return magnitude;
}

float code_to_float(uint16_t code, tileops::DType dtype) {
    return dtype == tileops::DType::bf16 ? bf16_to_float(code) : half_to_float(code);
}

uint16_t float_to_code(float value, tileops::DType dtype) {
    return dtype == tileops::DType::bf16 ? float_to_bf16(value) : float_to_half(value);
}

}  // namespace transformer
