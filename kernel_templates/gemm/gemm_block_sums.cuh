// The last step of the GEMM kernels that meet their warps' partial sums in shared memory (skinny,
// gemv): the block's sums through the epilogue to D.
#pragma once

#include "gemm/gemm_epilogue.cuh"

namespace tileops {

// Writes a block's BM x BN fp32 sums (row-major, in shared memory) through the epilogue to D:
// rows m0 .. of batch entry `batch` and columns n0 .., as far as M and N; two columns a thread.
template <typename T, typename TOut, int BM, int BN, int THREADS, bool HAS_C, bool BIAS, int ACT>
__device__ __forceinline__ void gemm_store_block_sums(const GemmArgs& p, const float* sums, long long batch, long long m0,
                                                      long long n0) {
    TOut* D = static_cast<TOut*>(p.d) + batch * p.batch_stride_d;
    const TOut* C = HAS_C ? static_cast<const TOut*>(p.c) + batch * p.batch_stride_c : nullptr;
    for (int idx = static_cast<int>(threadIdx.x); idx < BM * BN / 2; idx += THREADS) {
        const int r = idx / (BN / 2), c = (idx % (BN / 2)) * 2;
        const long long row = m0 + r, col = n0 + c;
        if (row >= p.m || col >= p.n) continue;
        gemm_store_pair<T, TOut, HAS_C, BIAS, ACT>(p, D + row * p.ldd, HAS_C ? C + row * p.ldc : nullptr, col,
                                                   sums[r * BN + c], sums[r * BN + c + 1]);
    }
}

}  // namespace tileops
