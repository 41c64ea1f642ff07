// The MoE routing family: the router's top-k, the permute into expert order and the weighted
// unpermute back. Kernels: kernel_templates/moe_routing/.
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/moe_routing.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kTopKShape = "tokens x experts x k";
constexpr const char* kTopKFlags =
    "softmax or sigmoid (the scoring, one of them), renorm, groupN,topk_groupM (DeepSeek-V3's grouped choice), "
    "bias (sigmoid: a correction bias input)";
constexpr const char* kPermuteShape = "tokens x hidden x experts x k";
constexpr const char* kPermuteFlags =
    "capacityN (the masked layout: N rows an expert), scalesN (fp8 rows' scales carried along: 1 a token, or one "
    "per 128 elements)";
constexpr const char* kUnpermuteShape = "tokens x hidden x k";
constexpr const char* kUnpermuteFlags = "rowsN (y's rows when not tokens x k: experts x capacity), accumulate";

[[noreturn]] void refuse_flag(const std::string& op, const std::string& flag, const char* known) {
    throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to {} ({})", flag, op, known));
}

void refuse_repeat(const std::string& op, const std::string& flag, bool seen) {
    if (seen) throw InvalidArgument(fmt::format("tileops: {} flag '{}' is given twice or contradicts another", op, flag));
}

std::unique_ptr<Op> make_topk(const ProblemSpec& spec) {
    require_rank(spec, 3, kTopKShape);
    MoeTopKProblem p;
    p.tokens = spec.shape[0];
    p.experts = spec.shape[1];
    p.k = spec.shape[2];
    p.dtype = parse_dtype(spec.dtype);
    bool scored = false, grouped = false, limited = false;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag == "softmax" || flag == "sigmoid") {
            refuse_repeat(spec.op, flag, scored);
            scored = true;
            p.scoring = flag == "softmax" ? MoeScoring::softmax : MoeScoring::sigmoid;
        } else if (flag == "renorm") {
            refuse_repeat(spec.op, flag, p.renormalize);
            p.renormalize = true;
        } else if (flag == "bias") {
            refuse_repeat(spec.op, flag, p.correction_bias);
            p.correction_bias = true;
        } else if (auto groups = flag_number(flag, "group")) {
            refuse_repeat(spec.op, flag, grouped);
            grouped = true;
            p.n_group = *groups;
        } else if (auto kept = flag_number(flag, "topk_group")) {
            refuse_repeat(spec.op, flag, limited);
            limited = true;
            p.topk_group = *kept;
        } else {
            refuse_flag(spec.op, flag, kTopKFlags);
        }
    }
    if (!scored) throw InvalidArgument(fmt::format("tileops: moe_topk needs its scoring as a flag: {}", kTopKFlags));
    if (grouped != limited)
        throw InvalidArgument("tileops: moe_topk flags groupN and topk_groupM go together");
    return std::make_unique<MoeTopK>(p);
}

std::unique_ptr<Op> make_permute(const ProblemSpec& spec) {
    require_rank(spec, 4, kPermuteShape);
    MoePermuteProblem p;
    p.tokens = spec.shape[0];
    p.hidden = spec.shape[1];
    p.experts = spec.shape[2];
    p.k = spec.shape[3];
    p.dtype = parse_dtype(spec.dtype);
    for (const std::string& flag : split_flags(spec.flags)) {
        if (const auto scales = flag_number(flag, "scales")) {
            refuse_repeat(spec.op, flag, p.scale_blocks != 0);
            p.scale_blocks = *scales;
            continue;
        }
        const auto capacity = flag_number(flag, "capacity");
        if (!capacity) refuse_flag(spec.op, flag, kPermuteFlags);
        refuse_repeat(spec.op, flag, p.layout == MoeLayout::masked);
        p.layout = MoeLayout::masked;
        p.capacity = *capacity;
    }
    return std::make_unique<MoePermute>(p);
}

std::unique_ptr<Op> make_unpermute(const ProblemSpec& spec) {
    require_rank(spec, 3, kUnpermuteShape);
    MoeUnpermuteProblem p;
    p.tokens = spec.shape[0];
    p.hidden = spec.shape[1];
    p.k = spec.shape[2];
    p.dtype = parse_dtype(spec.dtype);
    bool rows = false;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag == "accumulate") {
            refuse_repeat(spec.op, flag, p.accumulate);
            p.accumulate = true;
        } else if (auto y_rows = flag_number(flag, "rows")) {
            refuse_repeat(spec.op, flag, rows);
            rows = true;
            p.y_rows = *y_rows;
        } else {
            refuse_flag(spec.op, flag, kUnpermuteFlags);
        }
    }
    return std::make_unique<MoeUnpermute>(p);
}

MoeTopKProblem topk(int64_t tokens, int64_t experts, int64_t k, DType dtype, MoeScoring scoring, bool renormalize) {
    MoeTopKProblem p;
    p.tokens = tokens, p.experts = experts, p.k = k, p.dtype = dtype, p.scoring = scoring, p.renormalize = renormalize;
    return p;
}

// Mixtral, Qwen3-30B-A3B and DeepSeek-V3's routers (grouped, biased), odd expert counts, fp32 and
// fp16 logits, a decode step; the permute of a serving batch (contiguous and masked, fp8 codes
// with their 1 x 128 block or per-token scales, a row of odd length, 512 experts) and the
// unpermute of the same.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    ops.push_back(std::make_unique<MoeTopK>(topk(4096, 8, 2, DType::bf16, MoeScoring::softmax, true)));
    ops.push_back(std::make_unique<MoeTopK>(topk(4096, 128, 8, DType::bf16, MoeScoring::softmax, true)));
    MoeTopKProblem deepseek = topk(4096, 256, 8, DType::bf16, MoeScoring::sigmoid, true);
    deepseek.n_group = 8, deepseek.topk_group = 4, deepseek.correction_bias = true, deepseek.routed_scaling_factor = 2.5f;
    ops.push_back(std::make_unique<MoeTopK>(deepseek));
    ops.push_back(std::make_unique<MoeTopK>(topk(1, 97, 5, DType::fp32, MoeScoring::softmax, false)));
    ops.push_back(std::make_unique<MoeTopK>(topk(77, 60, 4, DType::fp16, MoeScoring::sigmoid, false)));
    ops.push_back(std::make_unique<MoeTopK>(topk(64, 512, 32, DType::bf16, MoeScoring::softmax, true)));

    ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{4096, 7168, 256, 8, DType::bf16}));
    ops.push_back(std::make_unique<MoePermute>(
        MoePermuteProblem{64, 7168, 256, 8, DType::fp8_e4m3, MoeLayout::masked, 128}));
    MoePermuteProblem blocks{4096, 7168, 256, 8, DType::fp8_e4m3};
    blocks.scale_blocks = 56;
    ops.push_back(std::make_unique<MoePermute>(blocks));
    MoePermuteProblem per_token{64, 7168, 256, 8, DType::fp8_e4m3, MoeLayout::masked, 128};
    per_token.scale_blocks = 1;
    ops.push_back(std::make_unique<MoePermute>(per_token));
    ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{100, 2050, 8, 2, DType::fp16}));
    ops.push_back(std::make_unique<MoePermute>(MoePermuteProblem{16384, 2048, 512, 8, DType::bf16}));

    ops.push_back(std::make_unique<MoeUnpermute>(MoeUnpermuteProblem{4096, 7168, 8, DType::bf16}));
    ops.push_back(std::make_unique<MoeUnpermute>(MoeUnpermuteProblem{64, 7168, 8, DType::bf16, 256 * 128}));
    MoeUnpermuteProblem residual{100, 2050, 2, DType::fp16};
    residual.accumulate = true;
    ops.push_back(std::make_unique<MoeUnpermute>(residual));
    return ops;
}

}  // namespace

OpFamily moe_routing_family() {
    return {"moe_routing",
            {{"moe_topk", kTopKShape, kTopKFlags, make_topk},
             {"moe_permute", kPermuteShape, kPermuteFlags, make_permute},
             {"moe_unpermute", kUnpermuteShape, kUnpermuteFlags, make_unpermute}},
            representative_ops};
}

}  // namespace tileops::detail
