// FP8 GEMM: D = act(alpha * (A x scales_a) * (B x scales_b)^T + beta * C + bias), A and B of
// fp8 e4m3 codes, fp32 accumulation, D in fp32, fp16 or bf16. sm_90 (H100, H200) only.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/gemm.hpp"
#include "tileops/op.hpp"

namespace tileops {

// How the fp32 scales turn the codes into values (value = code x scale).
enum class GemmFp8Scaling : int {
    per_tensor = 0,  // scales_a[1], scales_b[1]
    per_row = 1,     // scales_a[M] (a row of A each), scales_b[N] (a row of B, a column of D each)
    // DeepSeek-V3's blocks: scales_a[ceil(K/128)][M], one per row and 128 elements of K, stored
    // K-block-major (consecutive rows adjacent: the layout of tileops::Quantize's 1x128 scales);
    // scales_b[ceil(N/128)][ceil(K/128)], one per 128 x 128 block of B, row-major.
    blocks = 2,
};

TILEOPS_EXPORT const char* gemm_fp8_scaling_name(GemmFp8Scaling scaling) noexcept;  // "tensor", "row", "block"

struct GemmFp8Problem {
    int64_t m = 0;
    int64_t n = 0;
    int64_t k = 0;                    // a multiple of 16 (16-byte rows of codes)
    DType out_dtype = DType::bf16;    // C, D and the bias: fp32, fp16 or bf16
    GemmFp8Scaling scaling = GemmFp8Scaling::per_tensor;
    float alpha = 1.0f;
    float beta = 0.0f;                // needs has_c when not 0
    bool has_c = false;               // C (M x N, out_dtype) is an input; it may alias D
    bool bias = false;                // a row vector of N elements (out_dtype) added to every row
    GemmEpilogue epilogue = GemmEpilogue::none;
    int64_t batch = 1;                // per-tensor scaling only: one pair of scales for every entry
    // Leading dimensions (elements between rows); 0: packed (k for A and B, n for C and D).
    // A's and B's must be multiples of 16.
    int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
    // Elements between consecutive batch entries; 0: packed (rows x leading dimension).
    int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0, batch_stride_d = 0;
};

// Operands of run(): inputs: {A (M x K codes), B (N x K codes: the weight layout of a linear
// layer), scales_a, scales_b (fp32, as GemmFp8Scaling says)}, then C when has_c, then the bias;
// outputs: {D}. A and B must start on 16 bytes; any other pointer on its element size.
class TILEOPS_EXPORT GemmFp8 : public Op {
public:
    explicit GemmFp8(const GemmFp8Problem& problem);
    const GemmFp8Problem& problem() const noexcept { return *problem_; }

private:
    const GemmFp8Problem* problem_ = nullptr;
};

}  // namespace tileops
