// Warp-level tensor-core building blocks of sm_80 and newer: asynchronous global -> shared copies
// (cp.async), shared -> register fragment loads (ldmatrix) and the m16n8k16 MMA with fp32
// accumulators. Shared by the GEMM and attention templates.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/async_copy.cuh"  // cp_async_commit, cp_async_wait
#include "arch/shared_address.cuh"

namespace tileops {

// Copies BYTES (4, 8 or 16) from global to shared memory without passing through registers;
// only the first `valid_bytes` are read, the rest of the destination is zero-filled (so a tile
// that hangs over the matrix edge reads zeros). 16-byte copies bypass L1 (.cg): operand tiles
// are reused from shared memory, not L1.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* shared, const void* global, int valid_bytes) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)), "l"(global),
                     "r"(valid_bytes));
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_address(shared)), "l"(global),
                     "n"(BYTES), "r"(valid_bytes));
    }
}

// Four 8x8 matrices of 16-bit elements; lane i supplies the address of row i % 8 of matrix i / 8,
// and register j receives matrix j (row lane / 4, elements 2 * (lane % 4) and the next).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* shared) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(shared)));
}

// The same, each matrix transposed: register j receives column lane / 4, rows 2 * (lane % 4) and
// the next (B fragments from a K x N row-major tile).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* shared) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(shared)));
}

// acc (16x8, fp32) += a (16x16, row-major fragment) * b (16x8, column fragment).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Element offset of (row, col) in a shared tile of rows of ROW_ELEMS 16-bit elements, with the
// 16-byte chunks of each row permuted (XOR) so that the 8 rows one ldmatrix reads at the same
// column fall into 8 different bank groups: no bank conflicts, and no padding.
template <int ROW_ELEMS>
__device__ __forceinline__ int swizzled_offset(int row, int col) {
    constexpr int kChunks = ROW_ELEMS / 8;  // 16-byte chunks per row
    static_assert(kChunks >= 4 && (kChunks & (kChunks - 1)) == 0, "rows of 32, 64, 128... elements");
    // Rows shorter than 128 bytes share a 128-byte bank line: change the phase every 8 / kChunks rows.
    const int phase = kChunks >= 8 ? (row & 7) : ((row / (8 / kChunks)) & (kChunks - 1));
    return row * ROW_ELEMS + ((((col >> 3) ^ phase)) << 3) + (col & 7);
}

}  // namespace tileops
