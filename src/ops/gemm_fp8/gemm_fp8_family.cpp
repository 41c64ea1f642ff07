// The FP8 GEMM family: D = act(alpha (A x scales) (B x scales)^T + beta C + bias), e4m3 in, fp32
// accumulation, batched (gemm_fp8) or grouped (gemm_fp8_grouped: a mixture-of-experts layer's
// experts, rows counted on the device). Kernel: kernel_templates/gemm_fp8/ (TMA + wgmma, sm_90a).
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/gemm_fp8.hpp"
#include "tileops/gemm_fp8_grouped.hpp"

namespace tileops::detail {
namespace {

// Whether `flag` names the scaling (tensor, row or block) and none was named yet (`scaled`):
// then it sets `scaling` and `scaled`.
bool scaling_flag(const std::string& flag, bool& scaled, GemmFp8Scaling& scaling) {
    if (scaled || (flag != "tensor" && flag != "row" && flag != "block")) return false;
    scaling = flag == "row" ? GemmFp8Scaling::per_row : flag == "block" ? GemmFp8Scaling::blocks : GemmFp8Scaling::per_tensor;
    scaled = true;
    return true;
}

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
        if (scaling_flag(flag, scaled, problem.scaling)) {
            continue;
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

// Shape GxRxNxK (groups, rows: all groups' or, masked, each group's capacity, N, K); dtype
// fp8_e4m3->OUT; flags: the scaling (tensor when none), masked, gelu or silu.
std::unique_ptr<Op> make_gemm_fp8_grouped(const ProblemSpec& spec) {
    require_rank(spec, 4, "GxRxNxK");
    const DTypePair dtypes = parse_dtype_pair(spec.dtype);
    if (dtypes.in != DType::fp8_e4m3)
        throw InvalidArgument(fmt::format("tileops: gemm_fp8_grouped reads fp8_e4m3 codes (dtype fp8_e4m3->bf16), got '{}'",
                                          spec.dtype));
    GemmFp8GroupedProblem problem;
    problem.groups = spec.shape[0], problem.rows = spec.shape[1], problem.n = spec.shape[2], problem.k = spec.shape[3];
    problem.out_dtype = dtypes.out == DType::fp8_e4m3 ? DType::bf16 : dtypes.out;
    bool scaled = false;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (scaling_flag(flag, scaled, problem.scaling)) {
            continue;
        } else if (flag == "masked") {
            problem.group_layout = GemmGroupLayout::masked;
        } else if (flag == "gelu" && problem.epilogue == GemmEpilogue::none) {
            problem.epilogue = GemmEpilogue::gelu;
        } else if (flag == "silu" && problem.epilogue == GemmEpilogue::none) {
            problem.epilogue = GemmEpilogue::silu;
        } else {
            throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to gemm_fp8_grouped (one of tensor, row or "
                                              "block; masked, gelu or silu; one activation)", flag));
        }
    }
    return std::make_unique<GemmFp8Grouped>(problem);
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
    // Grouped: DeepSeek-V3's experts with block scales (contiguous), a masked decode step with
    // per-row scales and fp32 D.
    GemmFp8GroupedProblem experts;
    experts.groups = 256, experts.rows = 32768, experts.n = 4096, experts.k = 7168, experts.scaling = GemmFp8Scaling::blocks;
    ops.push_back(std::make_unique<GemmFp8Grouped>(experts));
    GemmFp8GroupedProblem decode;
    decode.groups = 64, decode.rows = 16, decode.n = 2048, decode.k = 768, decode.scaling = GemmFp8Scaling::per_row;
    decode.group_layout = GemmGroupLayout::masked, decode.out_dtype = DType::fp32, decode.epilogue = GemmEpilogue::silu;
    ops.push_back(std::make_unique<GemmFp8Grouped>(decode));
    return ops;
}

}  // namespace

OpFamily gemm_fp8_family() {
    return {"gemm_fp8",
            {{"gemm_fp8", "MxNxK or BxMxNxK", "tensor, row or block; beta, bias, gelu or silu", make_gemm_fp8},
             {"gemm_fp8_grouped", "GxRxNxK (groups x rows x N x K)", "tensor, row or block; masked, gelu or silu",
              make_gemm_fp8_grouped}},
            representative_ops};
}

}  // namespace tileops::detail
