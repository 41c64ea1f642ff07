// What the quantize kernels share: a group's scale from its amax, |x| maxima, and rows of floats
// stored as e4m3 codes. Kept in this family (not common/fp8.cuh) so that the decode kernels' hashes,
// and their tuned entries, do not move with it.
#pragma once

#include <cuda_fp8.h>

#include "common/types.cuh"

namespace tileops {
namespace quantize_detail {

constexpr float kE4m3Max = 448.0f;
// The smallest scale: 2^-126, the smallest normal fp32, so that 1 / scale is finite (2^126) and a
// group of zeros (amax 0) quantizes to zeros that dequantize to zeros.
constexpr float kMinScale = 1.17549435082228750797e-38f;

// The scale of a group whose largest |x| is amax: amax / 448 (as amax x fp32(1 / 448), within an
// ulp of the quotient: a division would call the IEEE slow path, whose saved registers spill), at
// least kMinScale.
__device__ __forceinline__ float scale_of(float amax) { return fmaxf(amax * (1.0f / kE4m3Max), kMinScale); }

// 1 / scale, rounded to nearest (IEEE, as the host's 1.0f / scale): what x is multiplied by.
__device__ __forceinline__ float inverse_of(float scale) { return __frcp_rn(scale); }

// max(m, |v| for each element of the vector). fmaxf leaves NaNs out.
template <typename T, int N>
__device__ __forceinline__ float abs_max(const Vec<T, N>& raw, float m) {
    float v[N];
    unpack(raw, v);
#pragma unroll
    for (int i = 0; i < N; ++i) m = fmaxf(m, fabsf(v[i]));
    return m;
}

// The maximum over aligned groups of WIDTH lanes (a power of two <= 32), in every lane of the
// group. Every lane of the warp must take part.
template <int WIDTH>
__device__ __forceinline__ float lanes_max(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The N elements of `raw` times `inv` as e4m3 codes (round to nearest, ties to even, saturated to
// +-448: cvt.rn.satfinite.e4m3x2.f32 on sm_89 and newer, CUDA's software path before), stored with
// one access of N bytes at p.
template <typename T, int N>
__device__ __forceinline__ void store_e4m3(__nv_fp8_e4m3* p, const Vec<T, N>& raw, float inv) {
    float v[N];
    unpack(raw, v);
    Vec<__nv_fp8_e4m3, N> codes;
    if constexpr (N == 1) {
        codes.v[0].__x = __nv_cvt_float_to_fp8(v[0] * inv, __NV_SATFINITE, __NV_E4M3);
    } else {
        static_assert(N % 2 == 0, "e4m3 codes are converted in pairs");
#pragma unroll
        for (int i = 0; i < N; i += 2) {
            // The pair's first element is the low byte.
            const __nv_fp8x2_storage_t pair =
                __nv_cvt_float2_to_fp8x2(make_float2(v[i] * inv, v[i + 1] * inv), __NV_SATFINITE, __NV_E4M3);
            codes.v[i].__x = static_cast<__nv_fp8_storage_t>(pair & 0xffu);
            codes.v[i + 1].__x = static_cast<__nv_fp8_storage_t>(pair >> 8);
        }
    }
    store_raw<__nv_fp8_e4m3, N>(p, codes);
}

}  // namespace quantize_detail
}  // namespace tileops
