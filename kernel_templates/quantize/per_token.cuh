// Per-token quantization: one scale a row. A group of THREADS_PER_ROW threads takes a row (a
// block holds ROWS_PER_BLOCK of them); each thread holds ITEMS vectors of VEC elements of the
// row's first chunk (THREADS_PER_ROW x ITEMS x VEC columns) in registers, the group reduces the
// row's amax (shuffles, then shared memory across warps), and the held vectors are quantized
// and stored: x is read once. A row longer than a chunk is read twice: its later chunks are
// streamed for the amax, then read again (mostly from L2) to be quantized.
//
// Blocks walk the rows in steps of the grid. The host picks VEC so that it divides cols and both
// row strides and both pointers are aligned to a vector: a vector is all inside a row or all out.
#pragma once

#include "quantize/e4m3.cuh"
#include "quantize/quantize_args.cuh"

namespace tileops {

template <typename T, int VEC, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int ITEMS>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK, 1) quantize_per_token_kernel(QuantizeArgs args) {
    using namespace quantize_detail;
    static_assert((THREADS_PER_ROW & (THREADS_PER_ROW - 1)) == 0 && THREADS_PER_ROW <= 1024, "a power of two");
    static_assert((THREADS_PER_ROW * ROWS_PER_BLOCK) % 32 == 0, "whole warps");
    constexpr int kWarpsPerRow = THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1;
    constexpr int kStep = THREADS_PER_ROW * VEC;  // columns between a thread's vectors
    constexpr long long kChunk = static_cast<long long>(kStep) * ITEMS;
    __shared__ float warp_max[ROWS_PER_BLOCK][kWarpsPerRow];

    const T* __restrict__ x = static_cast<const T*>(args.x);
    __nv_fp8_e4m3* __restrict__ q = static_cast<__nv_fp8_e4m3*>(args.q);
    const long long rows = args.rows, cols = args.cols;
    const int lane = static_cast<int>(threadIdx.x) % THREADS_PER_ROW;
    const int slot = static_cast<int>(threadIdx.x) / THREADS_PER_ROW;

    // Every thread of the block runs the same iterations (the __syncthreads below).
    for (long long first = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK; first < rows;
         first += static_cast<long long>(gridDim.x) * ROWS_PER_BLOCK) {
        const long long row = first + slot;
        const bool live = row < rows;
        // This thread's first column of the row; its vector i of a chunk lies kStep x i further,
        // inside the row while that offset is below `left` (none of a row past the end).
        const T* x_lane = x + (live ? row * args.x_stride : 0) + lane * VEC;
        __nv_fp8_e4m3* q_lane = q + (live ? row * args.q_stride : 0) + lane * VEC;
        const long long left = live ? cols - lane * VEC : 0;

        Vec<T, VEC> held[ITEMS];
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (i * kStep < left) {
                held[i] = load_raw<T, VEC>(x_lane + i * kStep);
                amax = abs_max(held[i], amax);
            }
        }
        for (long long base = kChunk; base < cols; base += kChunk) {  // rows longer than a chunk
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) amax = abs_max(load_raw<T, VEC>(x_lane + base + i * kStep), amax);
        }

        amax = lanes_max<(THREADS_PER_ROW < 32 ? THREADS_PER_ROW : 32)>(amax);
        if constexpr (kWarpsPerRow > 1) {
            if (lane % 32 == 0) warp_max[slot][lane / 32] = amax;
            __syncthreads();
#pragma unroll
            for (int w = 0; w < kWarpsPerRow; ++w) amax = fmaxf(amax, warp_max[slot][w]);
            __syncthreads();  // read before the next row group writes
        }
        const float scale = scale_of(amax);
        const float inv = inverse_of(scale);
        if (live && lane == 0) args.scales[row] = scale;

#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (i * kStep < left) store_e4m3<T, VEC>(q_lane + i * kStep, held[i], inv);
        for (long long base = kChunk; base < cols; base += kChunk) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left)
                    store_e4m3<T, VEC>(q_lane + base + i * kStep, load_raw<T, VEC>(x_lane + base + i * kStep), inv);
        }
    }
}

}  // namespace tileops
