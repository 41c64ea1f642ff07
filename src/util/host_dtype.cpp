#include "util/host_dtype.hpp"

#include <cmath>
#include <cstring>

namespace tileops::util {

void encode_value(DType dtype, float value, uint8_t* out) noexcept {
    switch (dtype) {
        case DType::fp32: std::memcpy(out, &value, 4); return;
        case DType::fp16: {
            _Float16 h = static_cast<_Float16>(value);
            std::memcpy(out, &h, 2);
            return;
        }
        case DType::bf16: {
            uint32_t bits;
            std::memcpy(&bits, &value, 4);
            uint16_t h = std::isnan(value) ? uint16_t{0x7fc0} : static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
            std::memcpy(out, &h, 2);
            return;
        }
        case DType::int32: {
            const int32_t i = static_cast<int32_t>(value);
            std::memcpy(out, &i, 4);
            return;
        }
        case DType::fp8_e4m3: *out = float_to_fp8_e4m3(value); return;
    }
}

float decode_value(DType dtype, const uint8_t* in) noexcept {
    switch (dtype) {
        case DType::fp32: {
            float f;
            std::memcpy(&f, in, 4);
            return f;
        }
        case DType::fp16: {
            _Float16 h;
            std::memcpy(&h, in, 2);
            return static_cast<float>(h);
        }
        case DType::bf16: {
            uint16_t h;
            std::memcpy(&h, in, 2);
            uint32_t bits = static_cast<uint32_t>(h) << 16;
            float f;
            std::memcpy(&f, &bits, 4);
            return f;
        }
        case DType::int32: {
            int32_t i;
            std::memcpy(&i, in, 4);
            return static_cast<float>(i);
        }
        case DType::fp8_e4m3: return fp8_e4m3_to_float(*in);
    }
    return 0;
}

float fp8_e4m3_to_float(uint8_t code) noexcept {
    const int exponent = (code >> 3) & 0xf, mantissa = code & 0x7;
    if (exponent == 0xf && mantissa == 0x7) return std::nanf("");  // e4m3fn has no infinities
    // Exponent bias 7; exponent 0 holds the subnormals (mantissa / 8 x 2^-6).
    const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                          : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
    return (code & 0x80) ? -magnitude : magnitude;
}

uint8_t float_to_fp8_e4m3(float value) noexcept {
    if (std::isnan(value)) return 0x7f;
    const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
    const float magnitude = std::fabs(value);
    // The positive codes 0x00 .. 0x7e are increasing in value: take the nearest, ties to even.
    uint8_t low = 0, high = 0x7e;
    if (magnitude >= fp8_e4m3_to_float(high)) return static_cast<uint8_t>(sign | high);
    while (high - low > 1) {  // invariant: value(low) <= magnitude < value(high)
        const uint8_t mid = static_cast<uint8_t>((low + high) / 2);
        if (fp8_e4m3_to_float(mid) <= magnitude) low = mid;
        else high = mid;
    }
    const float below = magnitude - fp8_e4m3_to_float(low), above = fp8_e4m3_to_float(high) - magnitude;
    const uint8_t nearest = below < above ? low : above < below ? high : (low % 2 == 0 ? low : high);
    return static_cast<uint8_t>(sign | nearest);
}

}  // namespace tileops::util
