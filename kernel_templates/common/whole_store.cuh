// Whole-vector stores: N elements written as one access of their size. Storing a Vec itself
// (store_raw, store_vec in common/types.cuh) compiles to a store per element or pair
// (st.global.u16 / .f32 in the PTX), which ptxas merges into 4-byte stores only where it can tell
// the address is aligned: four 4-byte stores per 16 bytes in the bf16 SASS under ncu, where torch
// makes one 16-byte store, and 2-byte stores at a ragged row's offset (common/row_frame.cuh),
// which ran bf16 softmax at a quarter of the copy bandwidth.
#pragma once

#include "common/types.cuh"

namespace tileops {

// The bits of one element, for assembling whole words.
__device__ __forceinline__ unsigned element_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned element_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned element_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// Stores kWords 4-byte words as one access. In PTX: through a uint4 / uint2 lvalue the compiler
// still split these stores.
template <int kWords>
__device__ __forceinline__ void store_words(void* ptr, const unsigned (&words)[kWords]) {
    static_assert(kWords == 1 || kWords == 2 || kWords == 4, "one, two or four words");
    if constexpr (kWords == 4)
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(words[0]), "r"(words[1]), "r"(words[2]),
                     "r"(words[3])
                     : "memory");
    else if constexpr (kWords == 2)
        asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(ptr), "r"(words[0]), "r"(words[1]) : "memory");
    else
        *reinterpret_cast<unsigned*>(ptr) = words[0];
}

// N elements of T, element(i) the i-th, packed into 4-byte words in registers and stored as one
// access (N x sizeof(T) of at least 4 bytes).
template <typename T, int N, class Element>
__device__ __forceinline__ void store_packed(T* ptr, Element&& element) {
    constexpr int kPerWord = 4 / sizeof(T), kWords = N / kPerWord;
    unsigned words[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
        words[w] = 0;
#pragma unroll
        for (int e = 0; e < kPerWord; ++e) words[w] |= element_bits(element(w * kPerWord + e)) << (8 * sizeof(T) * e);
    }
    store_words<kWords>(ptr, words);
}

// N elements (a vector, or floats rounded to T) as one access; less than a word as it is.
template <typename T, int N>
__device__ __forceinline__ void store_whole(T* ptr, const Vec<T, N>& vec) {
    if constexpr (N * sizeof(T) < 4)
        store_raw<T, N>(ptr, vec);
    else
        store_packed<T, N>(ptr, [&](int i) { return vec.v[i]; });
}

template <typename T, int N>
__device__ __forceinline__ void store_whole(T* ptr, const float (&in)[N]) {
    if constexpr (N * sizeof(T) < 4)
        store_vec<T, N>(ptr, in);
    else
        store_packed<T, N>(ptr, [&](int i) { return from_float<T>(in[i]); });
}

}  // namespace tileops
