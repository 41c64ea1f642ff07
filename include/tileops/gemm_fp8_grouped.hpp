// Grouped FP8 GEMM: one FP8 GEMM per group (a mixture-of-experts layer's experts, FP8 weights) in
// one launch, the groups' row counts read on the device. D_g = act(alpha * (A_g x scales_a) *
// (B_g x scales_b_g)^T), e4m3 codes, fp32 accumulation. sm_90 (H100, H200) only.
#pragma once

#include "tileops/export.hpp"
#include "tileops/gemm_fp8.hpp"
#include "tileops/gemm_grouped.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct GemmFp8GroupedProblem {
    int64_t groups = 0;  // 1..4096
    // contiguous: rows of A and D (every group's together); masked: each group's capacity.
    int64_t rows = 0;
    int64_t n = 0;
    int64_t k = 0;                  // a multiple of 16
    DType out_dtype = DType::bf16;  // D: fp32, fp16 or bf16
    GemmFp8Scaling scaling = GemmFp8Scaling::per_tensor;
    GemmGroupLayout group_layout = GemmGroupLayout::contiguous;  // as GemmGrouped
    float alpha = 1.0f;
    GemmEpilogue epilogue = GemmEpilogue::none;
    // Elements (bytes) between rows of A, B and D; 0: packed. A's and B's: multiples of 16.
    int64_t lda = 0, ldb = 0, ldd = 0;
    // Elements between consecutive groups' B ([groups, N, K]); 0: packed. A multiple of 16.
    int64_t group_stride_b = 0;
};

// Operands of run(): inputs {A, B, scales_a, scales_b, group_rows}; outputs {D}.
//   A: e4m3 codes [rows, K] (contiguous) or [groups, capacity, K] (masked), one flat matrix of R
//      rows (R = rows, or groups x capacity); B: e4m3 [groups, N, K] (each group's weights in a
//      linear layer's layout); group_rows: int32 offsets [groups + 1] or counts [groups], as
//      GemmGrouped reads them (on the device, clamped, graph-safe); D: like A with N for K.
//   Scales (fp32): per_tensor: scales_a [1], scales_b [groups] (a scale per group's weights);
//      per_row: scales_a [R] (a row of A each), scales_b [groups, N]; blocks (DeepSeek-V3's):
//      scales_a [ceil(K/128)][R] (1 x 128, K-block-major: tileops::Quantize's layout over the flat
//      A), scales_b [groups][ceil(N/128)][ceil(K/128)] (128 x 128).
// A and B start on 16 bytes; D may have any alignment. Each 128-element K step is promoted into
// the fp32 accumulators as GemmFp8 does (the same kernel, with GemmGrouped's schedule).
class TILEOPS_EXPORT GemmFp8Grouped : public Op {
public:
    explicit GemmFp8Grouped(const GemmFp8GroupedProblem& problem);
    // The problem as normalized (defaults filled in).
    const GemmFp8GroupedProblem& problem() const noexcept { return *problem_; }

private:
    const GemmFp8GroupedProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
