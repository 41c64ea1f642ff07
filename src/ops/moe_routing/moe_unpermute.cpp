// MoE unpermute: problem checks, tuning key and kernel choice (MoeUnpermuteModel), and
// MoeUnpermute::run. Kernel: kernel_templates/moe_routing/unpermute.cuh.
#include <algorithm>
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
namespace detail {
namespace {

constexpr const char* kOp = "MoeUnpermute";
constexpr long long kMaxHeld = 32;  // elements a thread accumulates: items x vec fp32 sums

}  // namespace

// Config: the row team (moe_routing_common.hpp).
class MoeUnpermuteModel final : public moe::RowTeamModel {
public:
    explicit MoeUnpermuteModel(const MoeUnpermuteProblem& p)
        : RowTeamModel({p.hidden, static_cast<long long>(dtype_size(p.dtype)), kMaxHeld},
                       widest_dividing_vector(8, {p.hidden, p.y_stride, p.out_stride}), p.tokens),
          p_(p) {}
    const MoeUnpermuteProblem& problem() const noexcept { return p_; }

    std::string op_name() const override { return "moe_unpermute"; }
    std::vector<long long> shape() const override { return {p_.tokens, p_.hidden, p_.k}; }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    // "rowsN" where y holds other than tokens x k rows (the masked layout), and accumulate.
    std::string flags() const override {
        std::string text = p_.y_rows != p_.tokens * p_.k ? fmt::format("rows{}", p_.y_rows) : "";
        if (p_.accumulate) text += text.empty() ? "accumulate" : ",accumulate";
        return text;
    }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{
            {"y", p_.dtype, p_.y_rows, p_.hidden, p_.y_stride, false},
            {"row_map", DType::int32, p_.tokens, p_.k, p_.k, false, OperandFill::scrambled_index, p_.y_rows},
            {"topk_weights", DType::fp32, p_.tokens, p_.k, p_.k, false}};
        list.front().rows_read = std::min<long long>(p_.y_rows, p_.tokens * p_.k);
        // With accumulate, out is read and written: an input's bytes are not counted twice here.
        list.push_back({"out", p_.dtype, p_.tokens, p_.hidden, p_.out_stride, true});
        list.back().partial = p_.accumulate;
        return list;
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo&) const override {
        const Launch team = team_launch(config);
        LaunchPlan plan;
        plan.template_file = "moe_routing/unpermute.cuh";
        plan.name_expression = fmt::format("tileops::moe_unpermute_kernel<{}, {}, {}, {}, {}, {}>",
                                           device_type_name(p_.dtype), vec, team.threads_per_row, team.rows_per_block,
                                           team.items, p_.accumulate);
        plan.grid[0] = team.grid;
        plan.block[0] = team.block;
        return plan;
    }

    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;

private:
    MoeUnpermuteProblem p_;
};

namespace {

MoeUnpermuteProblem normalized(MoeUnpermuteProblem p) {
    moe::check_tokens(kOp, p.tokens);
    moe::check_hidden(kOp, p.hidden);
    moe::check_k(kOp, p.k);
    moe::check_entries(kOp, p.tokens, p.k);
    if (p.dtype != DType::bf16 && p.dtype != DType::fp16)
        throw InvalidArgument(fmt::format("tileops::{}: dtype must be bf16 or fp16, got {}", kOp, dtype_name(p.dtype)));
    if (p.y_rows == 0) p.y_rows = p.tokens * p.k;
    check_in_range(kOp, "y_rows", p.y_rows, 1, std::numeric_limits<int32_t>::max());
    p.y_stride = row_stride(kOp, "y_stride", p.y_stride, p.y_rows, p.hidden);
    p.out_stride = row_stride(kOp, "out_stride", p.out_stride, p.tokens, p.hidden);
    return p;
}

// Checks run()'s operands; returns the widest vector width the shape and both row pointers allow.
int bind(const MoeUnpermuteProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), 3, "y, row_map, topk_weights");
    check_count(kOp, "outputs", outputs.size(), 1, "out");
    const TensorArg& y = inputs.begin()[0];
    const TensorArg& row_map = inputs.begin()[1];
    const TensorArg& weights = inputs.begin()[2];
    const OutputArg& out = outputs.begin()[0];
    const RowsSpan y_span = check_operand(kOp, "y", y.data(), y.view(), p.dtype, p.y_rows, p.hidden, p.y_stride);
    const RowsSpan map_span = check_operand(kOp, "row_map", row_map.data(), row_map.view(), DType::int32, p.tokens, p.k, p.k);
    const RowsSpan weights_span =
        check_operand(kOp, "topk_weights", weights.data(), weights.view(), DType::fp32, p.tokens, p.k, p.k);
    const RowsSpan out_span = check_operand(kOp, "out", out.data(), out.view(), p.dtype, p.tokens, p.hidden, p.out_stride);
    for (const RowsSpan* input : {&y_span, &map_span, &weights_span}) check_output_overlap(kOp, out_span, *input, false);
    const int vec = widest_aligned_vector(shape_vec, y.data(), dtype_size(p.dtype));
    return widest_aligned_vector(vec, out.data(), dtype_size(p.dtype));
}

}  // namespace
}  // namespace detail

MoeUnpermute::MoeUnpermute(const MoeUnpermuteProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::MoeUnpermuteModel>(detail::normalized(problem)));
}

namespace detail {

int MoeUnpermuteModel::vector_width(Inputs inputs, Outputs outputs) const {
    return detail::bind(p_, shape_vec(), inputs, outputs);
}

void MoeUnpermuteModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    MoeUnpermuteArgs args{};
    args.y = inputs.begin()[0].data();
    args.row_map = static_cast<const int*>(inputs.begin()[1].data());
    args.weights = static_cast<const float*>(inputs.begin()[2].data());
    args.out = outputs.begin()[0].data();
    args.tokens = p_.tokens;
    args.hidden = p_.hidden;
    args.y_rows = p_.y_rows;
    args.y_stride = p_.y_stride;
    args.out_stride = p_.out_stride;
    args.k = static_cast<int>(p_.k);
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
