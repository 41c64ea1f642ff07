// The FP8 GEMM's scales, passed beside GemmArgs (gemm/gemm_args.cuh). Plain C++: the host code
// that fills it (src/ops/gemm_fp8/gemm_fp8.cpp) includes this same header.
#pragma once

namespace tileops {

// SCALING of gemm_fp8_sm90_kernel: how the fp32 scales dequantize A and B (real = code x scale).
enum GemmFp8ScalingIndex : int {
    kGemmFp8PerTensor = 0,  // a[0], b[0]
    kGemmFp8PerRow = 1,     // a[M] per row of A, b[N] per row of B (per column of D)
    kGemmFp8Blocks = 2,     // a[ceil(K/128)][M]: 1 x 128 blocks of A, K-block-major;
                            // b[ceil(N/128)][ceil(K/128)]: 128 x 128 blocks of B
};

struct GemmFp8Scales {
    const float* a;
    const float* b;
};

// With block scales, the kernel keeps a slot of them per stage in shared memory: the tile's
// block_m scales of A, then B's block's and, for 192-column tiles, the next block's (padded to 16
// bytes, so what follows stays aligned).
constexpr int gemm_fp8_scale_slot_floats(int block_m) { return block_m + 4; }

}  // namespace tileops
