// The FP8 GEMM family: D = act(alpha (A x scales) (B x scales)^T + beta C + bias), e4m3 in, fp32
// accumulation. Kernel: kernel_templates/gemm_fp8/ (TMA + wgmma, sm_90a).
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/gemm_fp8.hpp"

namespace tileops::detail {
namespace {

// Shape MxNxK or BxMxNxK; dtype fp8_e4m3->OUT; flags: the scaling (tensor, row or block; tensor
// when none is given), beta (C is read, beta = 1), bias, gelu or silu.
std::unique_ptr<Op> make_gemm_fp8(const ProblemSpec& spec) {
    if (spec.shape.size() != 3 && spec.shape.size() != 4)
        throw InvalidArgument(fmt::format("tileops: gemm_fp8 needs a shape MxNxK or BxMxNxK, got {} dimension(s)",
                                          spec.shape.size()));
    const DTypePair dtypes = parse_dtype_pair(spec.dtype);
    if (dtypes.in != DType::fp8_e4m3)
        throw InvalidArgument(fmt::format("tileops: gemm_fp8 reads fp8_e4m3 codes (dtype fp8_e4m3->bf16), got '{}'", spec.dtype));
    const size_t first = spec.shape.size() - 3;
    GemmFp8Problem problem;
    problem.batch = first == 1 ? spec.shape[0] : 1;
    problem.m = spec.shape[first];
    problem.n = spec.shape[first + 1];
    problem.k = spec.shape[first + 2];
    problem.out_dtype = dtypes.out == DType::fp8_e4m3 ? DType::bf16 : dtypes.out;
    bool scaled = false;
    for (const std::string& flag : split_flags(spec.flags)) {
        const bool scaling = flag == "tensor" || flag == "row" || flag == "block";
        if (scaling && !scaled) {
            problem.scaling = flag == "row" ? GemmFp8Scaling::per_row : flag == "block" ? GemmFp8Scaling::blocks
                                                                                         : GemmFp8Scaling::per_tensor;
            scaled = true;
        } else if (flag == "beta") {
            problem.has_c = true, problem.beta = 1.0f;
        } else if (flag == "bias") {
            problem.bias = true;
        } else if (flag == "gelu" && problem.epilogue == GemmEpilogue::none) {
            problem.epilogue = GemmEpilogue::gelu;
        } else if (flag == "silu" && problem.epilogue == GemmEpilogue::none) {
            problem.epilogue = GemmEpilogue::silu;
        } else {
            throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to gemm_fp8 (one of tensor, row or block; "
                                              "beta, bias, gelu or silu; one activation)", flag));
        }
    }
    return std::make_unique<GemmFp8>(problem);
}

GemmFp8Problem fp8_problem(int64_t m, int64_t n, int64_t k, GemmFp8Scaling scaling) {
    GemmFp8Problem p;
    p.m = m, p.n = n, p.k = k, p.scaling = scaling;
    return p;
}

// Each kernel takes about a second to compile: a few problems, every scaling, small and large M,
// the epilogue options, fp32 output.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    ops.push_back(std::make_unique<GemmFp8>(fp8_problem(4096, 4096, 4096, GemmFp8Scaling::per_tensor)));
    ops.push_back(std::make_unique<GemmFp8>(fp8_problem(1, 7168, 2048, GemmFp8Scaling::blocks)));
    GemmFp8Problem fused = fp8_problem(512, 1000, 256, GemmFp8Scaling::per_row);
    fused.out_dtype = DType::fp32, fused.has_c = true, fused.beta = 0.5f, fused.bias = true;
    fused.epilogue = GemmEpilogue::silu;
    ops.push_back(std::make_unique<GemmFp8>(fused));
    return ops;
}

}  // namespace

OpFamily gemm_fp8_family() {
    return {"gemm_fp8", {{"gemm_fp8", "MxNxK or BxMxNxK", "tensor, row or block; beta, bias, gelu or silu", make_gemm_fp8}},
            representative_ops};
}

}  // namespace tileops::detail
