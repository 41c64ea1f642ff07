// GEMM: D = act(alpha * A * op(B) + beta * C + bias), batched, fp16/bf16 inputs, fp32 accumulation.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

// How B is stored. A is always M x K row-major.
enum class GemmLayout : int {
    nn = 0,  // B is K x N row-major (D = A * B)
    nt = 1,  // B is N x K row-major (D = A * B^T: the weight layout of a linear layer)
};

// Applied last, after alpha, beta * C and bias.
enum class GemmEpilogue : int {
    none = 0,
    gelu = 1,  // x * Phi(x), exact (erf) form
    silu = 2,  // x * sigmoid(x)
};

TILEOPS_EXPORT const char* gemm_layout_name(GemmLayout layout) noexcept;      // "nn", "nt"
TILEOPS_EXPORT const char* gemm_epilogue_name(GemmEpilogue epilogue) noexcept;  // "none", "gelu", "silu"

struct GemmProblem {
    int64_t m = 0;
    int64_t n = 0;
    int64_t k = 0;
    DType dtype = DType::bf16;       // A, B and bias: fp16 or bf16
    std::optional<DType> out_dtype = std::nullopt;  // C and D: fp32, fp16 or bf16; default: dtype
    GemmLayout layout = GemmLayout::nn;
    float alpha = 1.0f;
    float beta = 0.0f;               // needs has_c when not 0
    bool has_c = false;              // C (M x N, out_dtype) is an input; it may alias D
    bool bias = false;               // a row vector of N elements (dtype) added to every row
    GemmEpilogue epilogue = GemmEpilogue::none;
    int64_t batch = 1;               // independent GEMMs, 1..65535
    // Leading dimensions (elements between rows); 0: packed (k for A, n or k for B, n for C and D).
    int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
    // Elements between consecutive batch entries; 0: packed (rows x leading dimension). The bias is
    // shared by every batch entry.
    int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0, batch_stride_d = 0;
};

// Operands of run(): inputs: {A, B}, then C when has_c, then bias when bias; outputs: {D}.
// Pointers must be aligned to their element size. A and B rows that are not 16 bytes apart or
// aligned (an odd K, a padded leading dimension, a shifted pointer) are first copied into the op's
// workspace with aligned rows, so every problem runs on the fast kernels (TMA on sm_90); that copy
// costs one extra pass over A and B, which matters where reading B is the whole cost (small M).
// A 16-bit D with unaligned rows is stored from registers instead of with TMA.
class TILEOPS_EXPORT Gemm : public Op {
public:
    explicit Gemm(const GemmProblem& problem);
    // The problem as normalized (defaults filled in).
    const GemmProblem& problem() const noexcept { return *problem_; }

private:
    const GemmProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
