// The router's top-k: problem checks, tuning key and kernel choice (MoeTopKModel), and
// MoeTopK::run. Kernel: kernel_templates/moe_routing/topk.cuh.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "moe_routing/moe_routing_args.cuh"  // kernel_templates/: the kernels' argument block
#include "ops/moe_routing/moe_routing_common.hpp"
#include "tileops/error.hpp"
#include "tileops/moe_routing.hpp"

namespace tileops {

const char* moe_scoring_name(MoeScoring scoring) noexcept {
    switch (scoring) {
        case MoeScoring::softmax: return "softmax";
        case MoeScoring::sigmoid: return "sigmoid";
    }
    return "unknown";
}

namespace detail {
namespace {

constexpr const char* kOp = "MoeTopK";
constexpr long long kMaxItems = 16;  // logits a lane holds (32 spilled)
constexpr long long kMaxGrid = std::numeric_limits<int32_t>::max();

bool is_pow2(long long n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

// Config: lanes (a team a token: 4, 8, 16 or 32, at least k and, grouped, n_group) and threads
// (a block: threads / lanes tokens).
class MoeTopKModel final : public OpModel {
public:
    explicit MoeTopKModel(const MoeTopKProblem& p) : p_(p) {}
    const MoeTopKProblem& problem() const noexcept { return p_; }

    std::string op_name() const override { return "moe_topk"; }
    std::vector<long long> shape() const override { return {p_.tokens, p_.experts, p_.k}; }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    // "softmax" or "sigmoid", then renorm, groupN,topk_groupM and bias where they apply.
    std::string flags() const override {
        std::string text = moe_scoring_name(p_.scoring);
        if (p_.renormalize) text += ",renorm";
        if (grouped()) text += fmt::format(",group{},topk_group{}", p_.n_group, p_.topk_group);
        if (p_.correction_bias) text += ",bias";
        return text;
    }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{{"logits", p_.dtype, p_.tokens, p_.experts, p_.logits_stride, false}};
        if (p_.correction_bias) list.push_back({"correction_bias", DType::fp32, 0, p_.experts, p_.experts, false});
        list.push_back({"topk_weights", DType::fp32, p_.tokens, p_.k, p_.k, true});
        list.push_back({"topk_ids", DType::int32, p_.tokens, p_.k, p_.k, true});
        return list;
    }

    // The smallest team that holds at most 8 logits a lane (and k, and the groups).
    Config heuristic(const DeviceInfo&) const override {
        const long long lanes = std::clamp<long long>(moe::next_pow2(std::max<long long>(smallest_team(), moe::ceil_div(p_.experts, 8))), 4, 32);
        return {{"lanes", lanes}, {"threads", 128}};
    }

    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> candidates;
        for (long long lanes : {4, 8, 16, 32})
            for (long long threads : {64, 128, 256, 512}) candidates.push_back({{"lanes", lanes}, {"threads", threads}});
        return valid_configs(candidates, device);
    }

    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        long long lanes = 0, threads = 0;
        if (auto why = read_tunables(config, op_name(), {{"lanes", &lanes}, {"threads", &threads}})) return why;
        if (!is_pow2(lanes) || lanes < 4 || lanes > 32) return fmt::format("lanes = {} is not 4, 8, 16 or 32", lanes);
        if (lanes < p_.k) return fmt::format("lanes = {} is fewer than k = {} (a lane keeps a chosen expert)", lanes, p_.k);
        if (grouped() && lanes < p_.n_group)
            return fmt::format("lanes = {} is fewer than n_group = {} (a lane keeps a group's score)", lanes, p_.n_group);
        if (moe::ceil_div(p_.experts, lanes) > kMaxItems)
            return fmt::format("{} experts over {} lanes hold more than {} logits a lane", p_.experts, lanes, kMaxItems);
        if (auto why = block_threads_reason(threads, device)) return why;
        if (moe::ceil_div(p_.tokens, threads / lanes) > kMaxGrid) return "too many blocks";
        return std::nullopt;
    }

    std::vector<int> vector_widths(const Config&) const override { return {1}; }

    LaunchPlan plan(const Config& config, int, const DeviceInfo&) const override {
        const long long lanes = config.at("lanes"), threads = config.at("threads");
        const long long tokens_per_block = threads / lanes;
        LaunchPlan plan;
        plan.template_file = "moe_routing/topk.cuh";
        plan.name_expression = fmt::format("tileops::moe_topk_kernel<{}, {}, {}, {}, {}, {}, {}>", device_type_name(p_.dtype),
                                           lanes, tokens_per_block, moe::ceil_div(p_.experts, lanes),
                                           p_.scoring == MoeScoring::sigmoid, grouped(), p_.correction_bias);
        plan.grid[0] = static_cast<unsigned>(moe::ceil_div(p_.tokens, tokens_per_block));
        plan.block[0] = static_cast<unsigned>(threads);
        return plan;
    }

    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;

private:
    bool grouped() const { return p_.n_group > 1; }
    long long smallest_team() const { return std::max(p_.k, grouped() ? p_.n_group : 1); }

    MoeTopKProblem p_;
};

namespace {

MoeTopKProblem normalized(MoeTopKProblem p) {
    moe::check_tokens(kOp, p.tokens);
    moe::check_experts(kOp, p.experts);
    moe::check_k(kOp, p.k);
    if (p.k > p.experts)
        throw InvalidArgument(fmt::format("tileops::{}: k = {} is more than experts = {}", kOp, p.k, p.experts));
    check_float_dtype(kOp, "dtype", p.dtype);
    if (p.scoring != MoeScoring::softmax && p.scoring != MoeScoring::sigmoid)
        throw InvalidArgument(
            fmt::format("tileops::{}: scoring must be softmax or sigmoid, got {}", kOp, static_cast<int>(p.scoring)));
    if (!std::isfinite(p.routed_scaling_factor))
        throw InvalidArgument(
            fmt::format("tileops::{}: routed_scaling_factor must be finite, got {}", kOp, p.routed_scaling_factor));
    check_in_range(kOp, "n_group", p.n_group, 1, 32);
    if (p.n_group > 1) {
        if (p.experts % p.n_group != 0 || p.experts / p.n_group < 2)
            throw InvalidArgument(fmt::format("tileops::{}: experts = {} must split into n_group = {} groups of at least "
                                              "2 experts",
                                              kOp, p.experts, p.n_group));
        check_in_range(kOp, "topk_group", p.topk_group, 1, p.n_group);
        if (p.k > p.topk_group * (p.experts / p.n_group))
            throw InvalidArgument(fmt::format("tileops::{}: k = {} is more than the {} experts of topk_group = {} groups",
                                              kOp, p.k, p.topk_group * (p.experts / p.n_group), p.topk_group));
    } else {
        p.topk_group = 1;  // unused: a leftover value must not key or refuse anything
    }
    if (p.correction_bias && p.scoring != MoeScoring::sigmoid)
        throw InvalidArgument(fmt::format("tileops::{}: correction_bias applies to sigmoid scoring only", kOp));
    p.logits_stride = row_stride(kOp, "logits_stride", p.logits_stride, p.tokens, p.experts);
    return p;
}

// Checks run()'s operands; the kernel reads single elements (width 1).
int bind(const MoeTopKProblem& p, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), p.correction_bias ? 2 : 1, p.correction_bias ? "logits, correction_bias" : "logits");
    check_count(kOp, "outputs", outputs.size(), 2, "topk_weights, topk_ids");
    const TensorArg& logits = inputs.begin()[0];
    const OutputArg& weights = outputs.begin()[0];
    const OutputArg& ids = outputs.begin()[1];
    const RowsSpan logits_span =
        check_operand(kOp, "logits", logits.data(), logits.view(), p.dtype, p.tokens, p.experts, p.logits_stride);
    const RowsSpan weights_span = check_operand(kOp, "topk_weights", weights.data(), weights.view(), DType::fp32, p.tokens, p.k, p.k);
    const RowsSpan ids_span = check_operand(kOp, "topk_ids", ids.data(), ids.view(), DType::int32, p.tokens, p.k, p.k);
    check_output_overlap(kOp, weights_span, logits_span, false);
    check_output_overlap(kOp, ids_span, logits_span, false);
    check_output_overlap(kOp, ids_span, weights_span, false);
    if (p.correction_bias) {
        const TensorArg& bias = inputs.begin()[1];
        const RowsSpan bias_span = check_operand(kOp, "correction_bias", bias.data(), bias.view(), DType::fp32, 0, p.experts, 1);
        check_output_overlap(kOp, weights_span, bias_span, false);
        check_output_overlap(kOp, ids_span, bias_span, false);
    }
    return 1;
}

}  // namespace
}  // namespace detail

MoeTopK::MoeTopK(const MoeTopKProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::MoeTopKModel>(detail::normalized(problem)));
}

namespace detail {

int MoeTopKModel::vector_width(Inputs inputs, Outputs outputs) const { return detail::bind(p_, inputs, outputs); }

void MoeTopKModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    MoeTopKArgs args{};
    args.logits = inputs.begin()[0].data();
    args.bias = p_.correction_bias ? static_cast<const float*>(inputs.begin()[1].data()) : nullptr;
    args.weights = static_cast<float*>(outputs.begin()[0].data());
    args.ids = static_cast<int*>(outputs.begin()[1].data());
    args.tokens = p_.tokens;
    args.logits_stride = p_.logits_stride;
    args.experts = static_cast<int>(p_.experts);
    args.k = static_cast<int>(p_.k);
    args.n_group = static_cast<int>(p_.n_group);
    args.topk_group = static_cast<int>(p_.topk_group);
    args.group_size = static_cast<int>(p_.experts / p_.n_group);
    args.renormalize = p_.renormalize ? 1 : 0;
    args.scaling = p_.routed_scaling_factor;
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
