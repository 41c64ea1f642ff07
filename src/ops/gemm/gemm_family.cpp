// The GEMM family: D = act(alpha A op(B) + beta C + bias), fp16/bf16 in, fp32 accumulation, batched
// (gemm) or grouped (gemm_grouped: a mixture-of-experts layer's experts, rows counted on the
// device). Kernels: kernel_templates/gemm/ (TMA + wgmma on sm_90a, mma.sync elsewhere).
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/gemm.hpp"
#include "tileops/gemm_grouped.hpp"

namespace tileops::detail {
namespace {

// Shape MxNxK or BxMxNxK; flags nt (B is N x K), beta (C is read, beta = 1), bias, gelu or silu.
std::unique_ptr<Op> make_gemm(const ProblemSpec& spec) {
    if (spec.shape.size() != 3 && spec.shape.size() != 4)
        throw InvalidArgument(fmt::format("tileops: gemm needs a shape MxNxK or BxMxNxK, got {} dimension(s)",
                                          spec.shape.size()));
    const DTypePair dtypes = parse_dtype_pair(spec.dtype);
    const size_t first = spec.shape.size() - 3;
    GemmProblem problem;
    problem.batch = first == 1 ? spec.shape[0] : 1;
    problem.m = spec.shape[first];
    problem.n = spec.shape[first + 1];
    problem.k = spec.shape[first + 2];
    problem.dtype = dtypes.in;
    problem.out_dtype = dtypes.out;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag == "nt") problem.layout = GemmLayout::nt;
        else if (flag == "beta") problem.has_c = true, problem.beta = 1.0f;
        else if (flag == "bias") problem.bias = true;
        else if (flag == "gelu" && problem.epilogue == GemmEpilogue::none) problem.epilogue = GemmEpilogue::gelu;
        else if (flag == "silu" && problem.epilogue == GemmEpilogue::none) problem.epilogue = GemmEpilogue::silu;
        else throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to gemm (nt, beta, bias, gelu or silu; one activation)", flag));
    }
    return std::make_unique<Gemm>(problem);
}

// Shape GxRxNxK: groups, rows (contiguous: all groups' rows; masked: each group's capacity), N, K;
// flags masked (else contiguous), nt (B as [groups, N, K]), gelu or silu.
std::unique_ptr<Op> make_gemm_grouped(const ProblemSpec& spec) {
    require_rank(spec, 4, "GxRxNxK");
    const DTypePair dtypes = parse_dtype_pair(spec.dtype);
    GemmGroupedProblem problem;
    problem.groups = spec.shape[0], problem.rows = spec.shape[1], problem.n = spec.shape[2], problem.k = spec.shape[3];
    problem.dtype = dtypes.in;
    problem.out_dtype = dtypes.out;
    problem.layout = GemmLayout::nn;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag == "masked") problem.group_layout = GemmGroupLayout::masked;
        else if (flag == "nt") problem.layout = GemmLayout::nt;
        else if (flag == "gelu" && problem.epilogue == GemmEpilogue::none) problem.epilogue = GemmEpilogue::gelu;
        else if (flag == "silu" && problem.epilogue == GemmEpilogue::none) problem.epilogue = GemmEpilogue::silu;
        else throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to gemm_grouped (masked, nt, gelu or silu; one activation)", flag));
    }
    return std::make_unique<GemmGrouped>(problem);
}

GemmProblem gemm_problem(int64_t m, int64_t n, int64_t k, DType dtype, GemmLayout layout) {
    GemmProblem p;
    p.m = m, p.n = n, p.k = k, p.dtype = dtype, p.layout = layout;
    return p;
}

// Each kernel takes seconds to compile, so few problems (the whole search space has its own
// compile test): both layouts, tiny and large M, a ragged shape (narrow copies), every epilogue
// option, fp32 output, a batch.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    ops.push_back(std::make_unique<Gemm>(gemm_problem(4096, 4096, 4096, DType::bf16, GemmLayout::nn)));
    ops.push_back(std::make_unique<Gemm>(gemm_problem(1, 4096, 4096, DType::fp16, GemmLayout::nt)));
    ops.push_back(std::make_unique<Gemm>(gemm_problem(1000, 127, 129, DType::fp16, GemmLayout::nn)));
    GemmProblem fused = gemm_problem(512, 1024, 256, DType::bf16, GemmLayout::nt);
    fused.out_dtype = DType::fp32, fused.has_c = true, fused.beta = 0.5f, fused.bias = true;
    fused.epilogue = GemmEpilogue::gelu;
    ops.push_back(std::make_unique<Gemm>(fused));
    GemmProblem batched = gemm_problem(256, 256, 64, DType::bf16, GemmLayout::nn);
    batched.batch = 8, batched.epilogue = GemmEpilogue::silu;
    ops.push_back(std::make_unique<Gemm>(batched));
    // Grouped: Mixtral's up projection over 8 experts (contiguous, B as weights), Qwen3-MoE's
    // down projection in a decode step (masked), fp16 with B as K x N and an fp32 D.
    GemmGroupedProblem experts;
    experts.groups = 8, experts.rows = 1024, experts.n = 14336, experts.k = 4096;
    experts.epilogue = GemmEpilogue::silu;
    ops.push_back(std::make_unique<GemmGrouped>(experts));
    GemmGroupedProblem decode;
    decode.groups = 128, decode.rows = 16, decode.n = 2048, decode.k = 768;
    decode.group_layout = GemmGroupLayout::masked;
    ops.push_back(std::make_unique<GemmGrouped>(decode));
    GemmGroupedProblem nn;
    nn.groups = 3, nn.rows = 300, nn.n = 200, nn.k = 136, nn.dtype = DType::fp16, nn.out_dtype = DType::fp32;
    nn.layout = GemmLayout::nn;
    ops.push_back(std::make_unique<GemmGrouped>(nn));
    return ops;
}

}  // namespace

OpFamily gemm_family() {
    return {"gemm",
            {{"gemm", "MxNxK or BxMxNxK", "nt, beta, bias, gelu or silu", make_gemm},
             {"gemm_grouped", "GxRxNxK (groups x rows x N x K)", "masked, nt, gelu or silu", make_gemm_grouped}},
            representative_ops};
}

}  // namespace tileops::detail
