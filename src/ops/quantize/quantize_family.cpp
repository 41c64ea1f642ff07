// The quantize family: activations (bf16 / fp16) to fp8 e4m3 codes and fp32 scales, per token, per
// 1x128 block or per tensor. Kernels: kernel_templates/quantize/.
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/quantize.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "rows x cols";
constexpr const char* kFlags = "per_token, block_1x128, per_tensor or per_tensor_static (exactly one: the scaling)";

// dtype "bf16" (the output fp8_e4m3 implied) or "bf16->fp8_e4m3"; one flag, the scaling.
std::unique_ptr<Op> make_quantize(const ProblemSpec& spec) {
    require_rank(spec, 2, kShape);
    QuantizeProblem p;
    p.rows = spec.shape[0];
    p.cols = spec.shape[1];
    if (spec.dtype.find("->") == std::string::npos) {
        p.dtype = parse_dtype(spec.dtype);
    } else {
        const DTypePair dtypes = parse_dtype_pair(spec.dtype);
        p.dtype = dtypes.in;
        p.out_dtype = dtypes.out;
    }
    std::string scaling;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag != "per_token" && flag != "block_1x128" && flag != "per_tensor" && flag != "per_tensor_static")
            throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to quantize ({})", flag, kFlags));
        if (!scaling.empty())
            throw InvalidArgument(
                fmt::format("tileops: quantize flags '{}' and '{}' contradict each other: one scaling", scaling, flag));
        scaling = flag;
    }
    if (scaling.empty()) throw InvalidArgument(fmt::format("tileops: quantize needs its scaling as a flag: {}", kFlags));
    if (scaling == "per_token") {
        p.scaling = QuantizeScaling::per_token;
    } else if (scaling == "block_1x128") {
        p.scaling = QuantizeScaling::block_1x128;
    } else {
        p.scaling = QuantizeScaling::per_tensor;
        p.static_scale = scaling == "per_tensor_static";
    }
    return std::make_unique<Quantize>(p);
}

// Every scaling on a Llama-3-8B prefill's activations (bf16) and DeepSeek-V3's hidden size; fp16;
// odd rows of GPT-2's vocabulary (narrow vectors); rows shorter than a block; strided rows
// (per-tensor kernels on rows, not one flat row); a decode step.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (QuantizeScaling scaling : {QuantizeScaling::per_token, QuantizeScaling::block_1x128, QuantizeScaling::per_tensor}) {
        ops.push_back(std::make_unique<Quantize>(QuantizeProblem{8192, 4096, DType::bf16, DType::fp8_e4m3, scaling}));
        ops.push_back(std::make_unique<Quantize>(QuantizeProblem{1, 7168, DType::fp16, DType::fp8_e4m3, scaling}));
        ops.push_back(std::make_unique<Quantize>(QuantizeProblem{77, 50257, DType::bf16, DType::fp8_e4m3, scaling}));
        ops.push_back(std::make_unique<Quantize>(QuantizeProblem{300, 96, DType::bf16, DType::fp8_e4m3, scaling}));
    }
    QuantizeProblem fixed{16384, 7168, DType::bf16, DType::fp8_e4m3, QuantizeScaling::per_tensor};
    fixed.static_scale = true;
    ops.push_back(std::make_unique<Quantize>(fixed));
    QuantizeProblem strided{64, 4000, DType::bf16, DType::fp8_e4m3, QuantizeScaling::per_tensor};
    strided.x_stride = 4096;
    ops.push_back(std::make_unique<Quantize>(strided));
    return ops;
}

}  // namespace

OpFamily quantize_family() {
    return {"quantize", {{"quantize", kShape, kFlags, make_quantize}}, representative_ops};
}

}  // namespace tileops::detail
