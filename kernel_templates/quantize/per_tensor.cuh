// Per-tensor quantization: one scale for the whole tensor.
//
// quantize_per_tensor_kernel quantizes with a scale it reads from the device: the caller's
// (static) or the one quantize_tensor_amax_kernel wrote just before it on the same stream
// (computed). Each thread takes ITEMS vectors of VEC elements of a chunk of THREADS x ITEMS x VEC
// columns; the grid is (column chunks, rows), both walked in steps of the grid. Contiguous rows
// come as one row of rows x cols elements.
//
// quantize_tensor_amax_kernel, launched first for a computed scale, reads x once: each CTA reduces
// its part's amax and folds it into the workspace (atomicMax on the bits of a non-negative float,
// which order as unsigned integers); the last CTA to finish (a counter) takes the total, resets
// both words to zero for the next launch and writes the scale. No host sync anywhere, so the pair
// can be captured in a CUDA graph. The cost is a second read of x: 5 bytes an element of 16-bit x
// against the 3 of a static scale (the read of the second pass comes partly from L2 when x is
// small enough to stay there).
//
// The host picks VEC so that it divides cols and both row strides and both pointers are aligned to
// a vector.
#pragma once

#include "quantize/e4m3.cuh"
#include "quantize/quantize_args.cuh"

namespace tileops {

template <typename T, int VEC, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS, 1) quantize_tensor_amax_kernel(QuantizeArgs args) {
    using namespace quantize_detail;
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
    constexpr int kStep = THREADS * VEC;  // columns between a thread's vectors
    constexpr long long kChunk = static_cast<long long>(kStep) * ITEMS;
    __shared__ float warp_max[THREADS / 32];
    const T* __restrict__ x = static_cast<const T*>(args.x);
    const long long cols = args.cols;

    // This thread's vector i of a chunk lies kStep x i past its first column, inside the row while
    // that offset is below `left`.
    const long long left = cols - static_cast<long long>(threadIdx.x) * VEC;
    float amax = 0.0f;
    for (long long row = blockIdx.y; row < args.rows; row += gridDim.y) {
        const T* x_lane = x + row * args.x_stride + threadIdx.x * VEC;
        for (long long base = static_cast<long long>(blockIdx.x) * kChunk; base < cols;
             base += static_cast<long long>(gridDim.x) * kChunk) {
            Vec<T, VEC> v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) v[i] = load_raw<T, VEC>(x_lane + base + i * kStep);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) amax = abs_max(v[i], amax);
        }
    }
    amax = lanes_max<32>(amax);
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
    __syncthreads();
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    unsigned* const max_bits = args.workspace;
    unsigned* const done = args.workspace + 1;
    atomicMax(max_bits, __float_as_uint(amax));
    __threadfence();  // the maximum lands before this CTA counts itself done
    const unsigned ctas = gridDim.x * gridDim.y;
    if (atomicAdd(done, 1u) == ctas - 1) {
        __threadfence();
        const float total = __uint_as_float(atomicExch(max_bits, 0u));
        atomicExch(done, 0u);
        args.scales[0] = scale_of(total);
    }
}

template <typename T, int VEC, int THREADS, int ITEMS, bool COMPUTED>
__global__ void __launch_bounds__(THREADS, 1) quantize_per_tensor_kernel(QuantizeArgs args) {
    using namespace quantize_detail;
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
    constexpr int kStep = THREADS * VEC;  // columns between a thread's vectors
    constexpr long long kChunk = static_cast<long long>(kStep) * ITEMS;
    const T* __restrict__ x = static_cast<const T*>(args.x);
    __nv_fp8_e4m3* __restrict__ q = static_cast<__nv_fp8_e4m3*>(args.q);
    const long long cols = args.cols;
    const float inv = inverse_of(COMPUTED ? args.scales[0] : args.scale_in[0]);
    const long long left = cols - static_cast<long long>(threadIdx.x) * VEC;

    for (long long row = blockIdx.y; row < args.rows; row += gridDim.y) {
        const T* x_lane = x + row * args.x_stride + threadIdx.x * VEC;
        __nv_fp8_e4m3* q_lane = q + row * args.q_stride + threadIdx.x * VEC;
        for (long long base = static_cast<long long>(blockIdx.x) * kChunk; base < cols;
             base += static_cast<long long>(gridDim.x) * kChunk) {
            Vec<T, VEC> v[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) v[i] = load_raw<T, VEC>(x_lane + base + i * kStep);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) store_e4m3<T, VEC>(q_lane + base + i * kStep, v[i], inv);
        }
    }
}

}  // namespace tileops
