// The sampling family: the next token from each row of logits (greedy, temperature, top-k, top-p,
// min-p). Kernels: kernel_templates/sampling/.
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/sampling.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "batch x vocab";

// Flag greedy: argmax only.
std::unique_ptr<Op> make_sampling(const ProblemSpec& spec) {
    require_rank(spec, 2, kShape);
    SamplingProblem p;
    p.batch = spec.shape[0];
    p.vocab_size = spec.shape[1];
    p.dtype = parse_dtype(spec.dtype);
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag != "greedy") throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to sampling (greedy)", flag));
        p.greedy = true;
    }
    return std::make_unique<Sampling>(p);
}

// Llama 3's vocabulary at a decode batch of 1 and 64 (fp32 and bf16 logits), greedy, and GPT-2's
// odd vocabulary in fp16 (rows that alternate alignment).
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (int64_t batch : {1, 64}) ops.push_back(std::make_unique<Sampling>(SamplingProblem{batch, 128256, DType::fp32}));
    ops.push_back(std::make_unique<Sampling>(SamplingProblem{8, 128256, DType::bf16, 0, true}));
    ops.push_back(std::make_unique<Sampling>(SamplingProblem{3, 50257, DType::fp16}));
    return ops;
}

}  // namespace

OpFamily sampling_family() {
    return {"sampling", {{"sampling", kShape, "greedy (argmax only)", make_sampling}}, representative_ops};
}

}  // namespace tileops::detail
