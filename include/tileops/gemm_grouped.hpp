// Grouped GEMM: one GEMM per group (a mixture-of-experts layer's experts) in one launch, the
// groups' row counts read on the device. D_g = act(alpha * A_g * op(B_g)), fp16/bf16 inputs, fp32
// accumulation.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/gemm.hpp"
#include "tileops/op.hpp"

namespace tileops {

// Where each group's rows of A and D lie.
enum class GemmGroupLayout : int {
    // A [rows, K] and D [rows, N] hold the groups one after another (tokens sorted by expert: a
    // prefill): group g is rows [offsets[g], offsets[g + 1]), offsets int32 [groups + 1] on the
    // device, non-decreasing, offsets[0] >= 0, offsets[groups] <= rows (what MoePermute writes;
    // rows past offsets[groups] are left alone).
    contiguous = 0,
    // A [groups, capacity, K] and D [groups, capacity, N]: group g is its first counts[g] rows
    // (counts int32 [groups] on the device, each in [0, capacity]; a decode step under a CUDA
    // graph, whose shapes cannot follow the routing). D's rows past counts[g] are left alone.
    masked = 1,
};

TILEOPS_EXPORT const char* gemm_group_layout_name(GemmGroupLayout layout) noexcept;  // "contiguous", "masked"

struct GemmGroupedProblem {
    int64_t groups = 0;  // 1..4096
    // contiguous: rows of A and D (every group's together, e.g. tokens x top-k); masked: the
    // capacity, rows each group has room for.
    int64_t rows = 0;
    int64_t n = 0;
    int64_t k = 0;
    DType dtype = DType::bf16;       // A and B: fp16 or bf16
    std::optional<DType> out_dtype = std::nullopt;  // D: fp32, fp16 or bf16; default: dtype
    GemmGroupLayout group_layout = GemmGroupLayout::contiguous;
    // How each group's B is stored: nt, [groups, N, K] (a linear layer's weight per expert), or
    // nn, [groups, K, N].
    GemmLayout layout = GemmLayout::nt;
    float alpha = 1.0f;
    GemmEpilogue epilogue = GemmEpilogue::none;
    // Elements between rows of A, B and D; 0: packed (k for A, k or n for B, n for D). A's and
    // B's rows must be 16 bytes apart (multiples of 8 elements): they are read with TMA.
    int64_t lda = 0, ldb = 0, ldd = 0;
    // Elements between consecutive groups' B; 0: packed (its rows x ldb). A multiple of 8.
    int64_t group_stride_b = 0;
};

// Operands of run(): inputs {A, B, group_rows}; outputs {D}. group_rows is int32: offsets
// [groups + 1] (contiguous) or counts [groups] (masked), read by the kernel on the device (no host
// sync: the launch may be captured in a CUDA graph and replayed with new values). Values out of
// range are clamped into the matrix (never read or written out of bounds); offsets that
// decrease make groups overlap, whose rows of D then hold unspecified values.
// A and B must start on 16 bytes and have rows 16 bytes apart; D may have any alignment (a 16-bit
// D with aligned rows is stored with TMA, others from registers).
//
// Kernels: the 16-bit GEMM's (TMA + wgmma on sm_90a, mma.sync on sm_80 and newer) with a
// schedule over the groups' tiles: each block turns the row counts into a table of tiles per
// group, then walks tiles of every group as one list (kernel_templates/gemm/gemm_groups.cuh).
class TILEOPS_EXPORT GemmGrouped : public Op {
public:
    explicit GemmGrouped(const GemmGroupedProblem& problem);
    // The problem as normalized (defaults filled in).
    const GemmGroupedProblem& problem() const noexcept { return *problem_; }

private:
    const GemmGroupedProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
