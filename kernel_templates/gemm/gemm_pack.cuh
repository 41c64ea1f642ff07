// Copies the operands of a GEMM whose rows are not 16-byte aligned (an odd K, a leading dimension
// or pointer off 16 bytes) into the op's workspace with rows padded to a multiple of 8 elements,
// so that the GEMM kernel itself always loads whole 16-byte vectors (TMA on sm_90a, 16-byte
// cp.async on sm_80). Launched right before the GEMM (LaunchPlan::before) with the GEMM's own
// arguments; blockIdx.y picks the copy (p.packs[0]: A, [1]: B), a null source means none.
//
// Each thread writes one 16-byte chunk of a packed row from eight 2-byte loads of the source (any
// alignment); the lanes of a warp cover consecutive chunks, so every load instruction reads one
// contiguous 512-byte span and the eight of a chunk hit the same lines. The padding past a row's
// last element is written as zeros (the GEMM kernels never read it as data: TMA boxes stop at the
// matrix's columns and the sm_80 copies zero-fill past K).
#pragma once

#include "gemm/gemm_args.cuh"

namespace tileops {

__device__ __forceinline__ void gemm_pack_operand(const GemmArgs& p) {
    const GemmPackedCopy& copy = p.packs[blockIdx.y];
    if (copy.from == nullptr) return;
    const unsigned short* from = static_cast<const unsigned short*>(copy.from);
    unsigned short* to = static_cast<unsigned short*>(copy.to);
    const long long chunks_per_row = copy.ld_to / 8;
    const long long chunks = chunks_per_row * copy.rows * p.batch;
    for (long long chunk = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; chunk < chunks;
         chunk += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row_of_all = chunk / chunks_per_row;  // rows of every batch entry, one after another
        const long long batch = row_of_all / copy.rows, row = row_of_all % copy.rows;
        const long long col = (chunk % chunks_per_row) * 8;
        const unsigned short* source = from + batch * copy.batch_stride_from + row * copy.ld_from + col;
        unsigned short values[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) values[i] = col + i < copy.cols ? source[i] : 0;
        uint4 word;
        word.x = values[0] | static_cast<unsigned>(values[1]) << 16;
        word.y = values[2] | static_cast<unsigned>(values[3]) << 16;
        word.z = values[4] | static_cast<unsigned>(values[5]) << 16;
        word.w = values[6] | static_cast<unsigned>(values[7]) << 16;
        *reinterpret_cast<uint4*>(to + batch * copy.batch_stride_to + row * copy.ld_to + col) = word;
    }
}

}  // namespace tileops
