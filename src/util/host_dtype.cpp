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
    }
    return 0;
}

}  // namespace tileops::util
