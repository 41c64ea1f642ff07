// Rotary position embedding of q and k, and (APPEND) the rotated keys and the values written to a
// KV cache. Memory bound: every element is read once and written once or twice, in vectors of VEC.
//
// A token's work is cut into units, one per thread, walked in steps of the grid:
//   rotation units: VEC pairs (neox) or VEC / 2 pairs (gptj) of HG consecutive heads (q heads, then
//                   k heads); the unit's cos and sin are computed once and used for its HG heads;
//   copy units:     VEC elements past rotary_dim of one head (nothing to do in place without APPEND);
//   value units:    VEC elements of one value head, appended to the cache (APPEND).
// Consecutive threads take consecutive vectors of a head, so a warp's accesses are contiguous.
//
// Slots come from the caller's device memory, which the host cannot check: a slot outside
// [0, num_slots) is not written.
#pragma once

#include <cuda_fp8.h>

#include "common/types.cuh"
#include "rope/rope_args.cuh"

namespace tileops {

namespace rope_detail {

// N values into a cache row: rounded to TC, or (fp8) quantized as value x scale_inv, saturated.
template <typename TC, int N>
__device__ __forceinline__ void store_cache(TC* ptr, const float (&in)[N], float scale_inv) {
    if constexpr (sizeof(TC) == 1) {
        Vec<TC, N> codes;
#pragma unroll
        for (int i = 0; i < N; ++i) codes.v[i] = TC(in[i] * scale_inv);
        store_raw<TC, N>(ptr, codes);
    } else {
        store_vec<TC, N>(ptr, in);
    }
}

// N elements as floats, in loads of VEC.
template <typename T, int N, int VEC>
__device__ __forceinline__ void load_span(const T* ptr, float (&out)[N]) {
#pragma unroll
    for (int i = 0; i < N; i += VEC) {
        float part[VEC];
        load_vec<T, VEC>(ptr + i, part);
#pragma unroll
        for (int j = 0; j < VEC; ++j) out[i + j] = part[j];
    }
}

template <typename T, int N, int VEC>
__device__ __forceinline__ void store_span(T* ptr, const float (&in)[N]) {
#pragma unroll
    for (int i = 0; i < N; i += VEC) {
        float part[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) part[j] = in[i + j];
        store_vec<T, VEC>(ptr + i, part);
    }
}

template <typename TC, int N, int VEC>
__device__ __forceinline__ void store_cache_span(TC* ptr, const float (&in)[N], float scale_inv) {
#pragma unroll
    for (int i = 0; i < N; i += VEC) {
        float part[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) part[j] = in[i + j];
        store_cache<TC, VEC>(ptr + i, part, scale_inv);
    }
}

}  // namespace rope_detail

template <typename T, typename TC, int HEADS, int KV_HEADS, int HEAD_DIM, int ROT, bool GPTJ, bool APPEND, int VEC,
          int HG, int THREADS>
__global__ void __launch_bounds__(THREADS) rope_kernel(const RopeArgs args) {
    using namespace rope_detail;
    constexpr int kHeads = HEADS + KV_HEADS;
    constexpr int kGroups = (kHeads + HG - 1) / HG;
    // gptj rotates adjacent pairs, so a span holds at least one pair even when VEC is 1.
    constexpr int kSpan = GPTJ ? (VEC < 2 ? 2 : VEC) : VEC;
    constexpr int kPairs = GPTJ ? kSpan / 2 : VEC;          // frequencies a rotation unit uses
    constexpr int kRotChunks = GPTJ ? ROT / kSpan : ROT / 2 / VEC;
    constexpr int kPassChunks = (HEAD_DIM - ROT) / VEC;
    constexpr int kRotUnits = kGroups * kRotChunks;
    constexpr int kPassUnits = kHeads * kPassChunks;
    constexpr int kValueUnits = APPEND ? KV_HEADS * (HEAD_DIM / VEC) : 0;
    constexpr long long kUnits = kRotUnits + kPassUnits + kValueUnits;
    static_assert(ROT % 2 == 0 && ROT <= HEAD_DIM && ROT / 2 <= kRopeMaxFrequencies, "rotary_dim");
    static_assert((GPTJ ? ROT % kSpan : (ROT / 2) % VEC) == 0 && (HEAD_DIM - ROT) % VEC == 0, "VEC divides the dims");

    const T* q = static_cast<const T*>(args.q);
    const T* k = static_cast<const T*>(args.k);
    T* q_out = static_cast<T*>(args.q_out);
    T* k_out = static_cast<T*>(args.k_out);
    TC* k_cache = static_cast<TC*>(args.k_cache);

    const long long total = args.num_tokens * kUnits;
    for (long long i = static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * THREADS) {
        const long long t = i / kUnits;
        int u = static_cast<int>(i - t * kUnits);

        // The cache row of this token's keys and values, or null when it is not appended.
        long long cache_row = -1;
        if constexpr (APPEND) {
            const int slot = args.slots[t];
            if (slot >= 0 && slot < args.num_slots) {
                const int page = slot / args.page_size;
                cache_row = page * args.cache_page_stride + (slot - page * args.page_size) * args.cache_token_stride;
            }
        }

        if (u < kRotUnits) {
            const int group = u / kRotChunks, chunk = u - group * kRotChunks;
            const float position = static_cast<float>(args.positions[t]);
            float cos_a[kPairs], sin_a[kPairs];
#pragma unroll
            for (int e = 0; e < kPairs; ++e) sincosf(position * args.inv_freq[chunk * kPairs + e], &sin_a[e], &cos_a[e]);
#pragma unroll
            for (int hh = 0; hh < HG; ++hh) {
                const int h = group * HG + hh;
                if (h >= kHeads) break;
                const bool is_q = h < HEADS;
                const int kv_head = h - HEADS;
                const T* src = is_q ? q + t * args.q_stride + h * HEAD_DIM : k + t * args.k_stride + kv_head * HEAD_DIM;
                T* dst = is_q ? q_out + t * args.q_out_stride + h * HEAD_DIM
                              : k_out + t * args.k_out_stride + kv_head * HEAD_DIM;
                TC* cache = !is_q && cache_row >= 0 ? k_cache + cache_row + kv_head * args.cache_head_stride : nullptr;
                if constexpr (GPTJ) {
                    const int offset = chunk * kSpan;
                    float x[kSpan];
                    load_span<T, kSpan, VEC>(src + offset, x);
#pragma unroll
                    for (int e = 0; e < kPairs; ++e) {
                        const float a = x[2 * e], b = x[2 * e + 1];
                        x[2 * e] = a * cos_a[e] - b * sin_a[e];
                        x[2 * e + 1] = b * cos_a[e] + a * sin_a[e];
                    }
                    store_span<T, kSpan, VEC>(dst + offset, x);
                    if (cache != nullptr) store_cache_span<TC, kSpan, VEC>(cache + offset, x, args.k_scale_inv);
                } else {
                    const int lo = chunk * VEC, hi = lo + ROT / 2;
                    float a[VEC], b[VEC];
                    load_vec<T, VEC>(src + lo, a);
                    load_vec<T, VEC>(src + hi, b);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        const float ae = a[e];
                        a[e] = ae * cos_a[e] - b[e] * sin_a[e];
                        b[e] = b[e] * cos_a[e] + ae * sin_a[e];
                    }
                    store_vec<T, VEC>(dst + lo, a);
                    store_vec<T, VEC>(dst + hi, b);
                    if (cache != nullptr) {
                        store_cache<TC, VEC>(cache + lo, a, args.k_scale_inv);
                        store_cache<TC, VEC>(cache + hi, b, args.k_scale_inv);
                    }
                }
            }
            continue;
        }
        u -= kRotUnits;

        if (u < kPassUnits) {
            // Elements past rotary_dim: copied to the output unless in place, and to the cache.
            const int h = u / kPassChunks;
            const int offset = ROT + (u - h * kPassChunks) * VEC;
            const bool is_q = h < HEADS;
            const int kv_head = h - HEADS;
            const T* src = is_q ? q + t * args.q_stride + h * HEAD_DIM : k + t * args.k_stride + kv_head * HEAD_DIM;
            T* dst = is_q ? q_out + t * args.q_out_stride + h * HEAD_DIM : k_out + t * args.k_out_stride + kv_head * HEAD_DIM;
            const bool to_cache = !is_q && cache_row >= 0;
            if (dst == src && !to_cache) continue;
            float x[VEC];
            load_vec<T, VEC>(src + offset, x);
            if (dst != src) store_vec<T, VEC>(dst + offset, x);
            if (to_cache) store_cache<TC, VEC>(k_cache + cache_row + kv_head * args.cache_head_stride + offset, x,
                                               args.k_scale_inv);
            continue;
        }
        u -= kPassUnits;

        if constexpr (APPEND) {
            if (cache_row < 0) continue;
            constexpr int kChunks = HEAD_DIM / VEC;
            const int kv_head = u / kChunks;
            const int offset = (u - kv_head * kChunks) * VEC;
            float x[VEC];
            load_vec<T, VEC>(static_cast<const T*>(args.v) + t * args.v_stride + kv_head * HEAD_DIM + offset, x);
            store_cache<TC, VEC>(static_cast<TC*>(args.v_cache) + cache_row + kv_head * args.cache_head_stride + offset, x,
                                 args.v_scale_inv);
        }
    }
}

}  // namespace tileops
