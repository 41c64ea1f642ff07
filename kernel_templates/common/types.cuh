// dtype conversions and 16-byte vector access for the kernel templates.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tileops {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// N elements of T moved as one access (16 bytes at most).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    static_assert(sizeof(T) * N <= 16, "a vector is at most 16 bytes");
    T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_raw(const T* ptr) {
    return *reinterpret_cast<const Vec<T, N>*>(ptr);
}

template <typename T, int N>
__device__ __forceinline__ void unpack(const Vec<T, N>& vec, float (&out)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_float(vec.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> pack(const float (&in)[N]) {
    Vec<T, N> vec;
#pragma unroll
    for (int i = 0; i < N; ++i) vec.v[i] = from_float<T>(in[i]);
    return vec;
}

// Loads N elements as floats.
template <typename T, int N>
__device__ __forceinline__ void load_vec(const T* ptr, float (&out)[N]) {
    unpack(load_raw<T, N>(ptr), out);
}

template <typename T, int N>
__device__ __forceinline__ void store_raw(T* ptr, const Vec<T, N>& vec) {
    *reinterpret_cast<Vec<T, N>*>(ptr) = vec;
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* ptr, const float (&in)[N]) {
    store_raw<T, N>(ptr, pack<T, N>(in));
}

}  // namespace tileops
