// fp8 e4m3 (CUDA's __nv_fp8_e4m3) as a storage type: conversion to float for the kernels that
// read quantized caches. Kept out of types.cuh so that kernels without fp8 keep their template
// hashes (and tuned entries).
#pragma once

#include <cuda_fp8.h>

#include "common/types.cuh"

namespace tileops {

// N e4m3 codes as floats, two at a time (one cvt.rn.f16x2.e4m3x2 per pair on sm_89 and newer; a
// short software path before). Picked over types.cuh's generic unpack for fp8 vectors; there is
// deliberately no to_float for one code, so a kernel that reached the generic per-element path
// with fp8 would not compile.
template <int N>
__device__ __forceinline__ void unpack(const Vec<__nv_fp8_e4m3, N>& vec, float (&out)[N]) {
    static_assert(N % 2 == 0, "fp8 vectors convert in pairs");
#pragma unroll
    for (int i = 0; i < N; i += 2) {
        const __nv_fp8x2_storage_t pair =
            static_cast<__nv_fp8x2_storage_t>(vec.v[i].__x | (static_cast<unsigned>(vec.v[i + 1].__x) << 8));
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
        out[i] = f.x;
        out[i + 1] = f.y;
    }
}

}  // namespace tileops
