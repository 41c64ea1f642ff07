#include "util/host_dtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>

namespace tileops::util {

void encode_value(DType dtype, float value, uint8_t* out) noexcept {
    switch (dtype) {
        case DType::fp32: std::memcpy(out, &value, 4); return;
        case DType::fp16: {
            const __half h = __float2half_rn(value);
            std::memcpy(out, &h, 2);
            return;
        }
        case DType::bf16: {
            const __nv_bfloat16 b = __float2bfloat16_rn(value);
            std::memcpy(out, &b, 2);
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
            __half h;
            std::memcpy(&h, in, 2);
            return __half2float(h);
        }
        case DType::bf16: {
            __nv_bfloat16 b;
            std::memcpy(&b, in, 2);
            return __bfloat162float(b);
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
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}

uint8_t float_to_fp8_e4m3(float value) noexcept {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace tileops::util
