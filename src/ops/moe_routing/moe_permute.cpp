// MoE permute: problem checks, tuning key and kernel choice (MoePermuteModel), and MoePermute::run.
// Kernels: kernel_templates/moe_routing/permute.cuh (the routing kernel, then the gather).
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

const char* moe_layout_name(MoeLayout layout) noexcept {
    switch (layout) {
        case MoeLayout::contiguous: return "contiguous";
        case MoeLayout::masked: return "masked";
    }
    return "unknown";
}

namespace detail {
namespace {

constexpr const char* kOp = "MoePermute";
constexpr long long kMaxHeld = 64;  // bytes of x a thread holds: items x vec x element size

// The rows of a scales operand: one scale a row is a vector (rows 0), as Quantize writes it.
long long scale_rows(long long scale_blocks) { return scale_blocks == 1 ? 0 : scale_blocks; }

// Elements of x a thread may hold; elements of x a 16-byte vector.
long long held_elements(DType dtype) { return kMaxHeld / static_cast<long long>(dtype_size(dtype)); }
int max_vec(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

}  // namespace

// Config: the gather kernel's row team (moe_routing_common.hpp). The routing kernel's geometry
// follows from the problem: runs of kMoeRouteThreads entries or more, at most kMoeRouteMaxGroups.
class MoePermuteModel final : public moe::RowTeamModel {
public:
    explicit MoePermuteModel(const MoePermuteProblem& p)
        : RowTeamModel({p.hidden, static_cast<long long>(dtype_size(p.dtype)), held_elements(p.dtype)},
                       widest_dividing_vector(max_vec(p.dtype), {p.hidden, p.x_stride, p.out_stride}), p.tokens),
          p_(p) {}
    const MoePermuteProblem& problem() const noexcept { return p_; }

    std::string op_name() const override { return "moe_permute"; }
    std::vector<long long> shape() const override { return {p_.tokens, p_.hidden, p_.experts, p_.k}; }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    // "capacityN" (masked) and "scalesN" (scale_blocks), comma-separated; "" for neither.
    std::string flags() const override {
        std::string f = masked() ? fmt::format("capacity{}", p_.capacity) : "";
        if (p_.scale_blocks > 0) f += fmt::format("{}scales{}", f.empty() ? "" : ",", p_.scale_blocks);
        return f;
    }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{
            {"x", p_.dtype, p_.tokens, p_.hidden, p_.x_stride, false},
            {"topk_ids", DType::int32, p_.tokens, p_.k, p_.k, false, OperandFill::scrambled_index, p_.experts}};
        if (p_.scale_blocks > 0)
            list.push_back({"x_scales", DType::fp32, scale_rows(p_.scale_blocks), p_.tokens, p_.scales_stride, false});
        if (masked()) {
            list.push_back({"x_masked", p_.dtype, p_.experts * p_.capacity, p_.hidden, p_.out_stride, true});
            list.back().rows_read = std::min<long long>(entries(), p_.experts * p_.capacity);  // the rows written
            list.back().partial = true;
            list.push_back({"expert_counts", DType::int32, 0, p_.experts, p_.experts, true});
        } else {
            list.push_back({"x_perm", p_.dtype, entries(), p_.hidden, p_.out_stride, true});
            list.push_back({"expert_offsets", DType::int32, 0, p_.experts + 1, p_.experts + 1, true});
        }
        list.push_back({"row_map", DType::int32, p_.tokens, p_.k, p_.k, true});
        if (p_.scale_blocks > 0) {
            list.push_back({"perm_scales", DType::fp32, scale_rows(p_.scale_blocks), out_rows(), out_rows(), true});
            list.back().partial = masked();
        }
        return list;
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo&) const override {
        const Launch team = team_launch(config);
        LaunchPlan plan;
        plan.template_file = "moe_routing/permute.cuh";
        plan.name_expression = fmt::format("tileops::moe_permute_gather_kernel<{}, {}, {}, {}, {}>", bits_type(), vec,
                                           team.threads_per_row, team.rows_per_block, team.items);
        plan.grid[0] = team.grid;
        plan.block[0] = team.block;
        plan.before.name_expression = fmt::format("tileops::moe_permute_route_kernel<{}>", route_experts());
        plan.before.grid[0] = static_cast<unsigned>(groups());
        plan.before.block[0] = kMoeRouteThreads;
        return plan;
    }

    // The CTA counter and padding, then each run's counts per expert.
    size_t workspace_bytes(const Config&, int) const override {
        return static_cast<size_t>(kMoeWorkspaceHeader + groups() * p_.experts) * sizeof(int);
    }

    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;

private:
    bool masked() const { return p_.layout == MoeLayout::masked; }
    long long entries() const { return p_.tokens * p_.k; }
    long long out_rows() const { return masked() ? p_.experts * p_.capacity : entries(); }
    // Elements are copied as raw bits.
    const char* bits_type() const { return dtype_size(p_.dtype) == 1 ? "unsigned char" : "unsigned short"; }
    // Entries a routing CTA ranks: whole rounds of its block, enough that at most
    // kMoeRouteMaxGroups CTAs cover them all (the last CTA scans groups x experts counts).
    long long group_entries() const {
        const long long rounds = moe::ceil_div(entries(), kMoeRouteThreads);
        return kMoeRouteThreads * moe::ceil_div(rounds, kMoeRouteMaxGroups);
    }
    long long groups() const { return moe::ceil_div(entries(), group_entries()); }
    // The routing kernel's shared arrays: a power of two of experts, at least a warp's.
    long long route_experts() const { return std::max<long long>(32, moe::next_pow2(p_.experts)); }

    MoePermuteProblem p_;
};

namespace {

MoePermuteProblem normalized(MoePermuteProblem p) {
    moe::check_tokens(kOp, p.tokens);
    moe::check_hidden(kOp, p.hidden);
    moe::check_experts(kOp, p.experts);
    moe::check_k(kOp, p.k);
    moe::check_entries(kOp, p.tokens, p.k);
    if (p.dtype != DType::bf16 && p.dtype != DType::fp16 && p.dtype != DType::fp8_e4m3)
        throw InvalidArgument(
            fmt::format("tileops::{}: dtype must be bf16, fp16 or fp8_e4m3, got {}", kOp, dtype_name(p.dtype)));
    if (p.layout == MoeLayout::masked) {
        check_in_range(kOp, "capacity", p.capacity, 1, std::numeric_limits<int32_t>::max() / p.experts);
    } else if (p.layout == MoeLayout::contiguous) {
        p.capacity = 0;  // unused: a leftover value must not key or refuse anything
    } else {
        throw InvalidArgument(
            fmt::format("tileops::{}: layout must be contiguous or masked, got {}", kOp, static_cast<int>(p.layout)));
    }
    const int64_t blocks_1x128 = (p.hidden + 127) / 128;
    if (p.scale_blocks != 0 && p.scale_blocks != 1 && p.scale_blocks != blocks_1x128)
        throw InvalidArgument(fmt::format(
            "tileops::{}: scale_blocks must be 0 (no scales), 1 (a scale a token) or {} (one per 128 of the "
            "hidden size {}), got {}",
            kOp, blocks_1x128, p.hidden, p.scale_blocks));
    if (p.scale_blocks > 0 && p.dtype != DType::fp8_e4m3)
        throw InvalidArgument(fmt::format("tileops::{}: scale_blocks needs fp8_e4m3 rows, x is {}", kOp, dtype_name(p.dtype)));
    p.x_stride = row_stride(kOp, "x_stride", p.x_stride, p.tokens, p.hidden);
    p.scales_stride = p.scale_blocks > 1 ? row_stride(kOp, "scales_stride", p.scales_stride, p.scale_blocks, p.tokens) : p.tokens;
    p.out_stride = row_stride(kOp, "out_stride", p.out_stride,
                              p.layout == MoeLayout::masked ? p.experts * p.capacity : p.tokens * p.k, p.hidden);
    return p;
}

// Checks run()'s operands; returns the widest vector width the shape and both row pointers allow.
int bind(const MoePermuteProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const bool masked = p.layout == MoeLayout::masked, scaled = p.scale_blocks > 0;
    check_count(kOp, "inputs", inputs.size(), scaled ? 3 : 2, scaled ? "x, topk_ids, x_scales" : "x, topk_ids");
    check_count(kOp, "outputs", outputs.size(), scaled ? 4 : 3,
                masked ? (scaled ? "x_masked, expert_counts, row_map, perm_scales" : "x_masked, expert_counts, row_map")
                       : (scaled ? "x_perm, expert_offsets, row_map, perm_scales" : "x_perm, expert_offsets, row_map"));
    const TensorArg& x = inputs.begin()[0];
    const TensorArg& ids = inputs.begin()[1];
    const OutputArg& out = outputs.begin()[0];
    const OutputArg& info = outputs.begin()[1];
    const OutputArg& row_map = outputs.begin()[2];
    const RowsSpan x_span = check_operand(kOp, "x", x.data(), x.view(), p.dtype, p.tokens, p.hidden, p.x_stride);
    const RowsSpan ids_span = check_operand(kOp, "topk_ids", ids.data(), ids.view(), DType::int32, p.tokens, p.k, p.k);
    const RowsSpan out_span = masked ? check_operand(kOp, "x_masked", out.data(), nullptr, p.dtype,
                                                     p.experts * p.capacity, p.hidden, p.out_stride)
                                     : check_operand(kOp, "x_perm", out.data(), out.view(), p.dtype, p.tokens * p.k,
                                                     p.hidden, p.out_stride);
    if (masked && out.view() != nullptr)
        check_tensor(kOp, "x_masked", out.data(), out.view(), p.dtype, {p.experts, p.capacity, p.hidden},
                     {p.capacity * p.out_stride, p.out_stride, 1}, dtype_size(p.dtype), "[experts, capacity, hidden]");
    const RowsSpan info_span = check_operand(kOp, masked ? "expert_counts" : "expert_offsets", info.data(), info.view(),
                                             DType::int32, 0, masked ? p.experts : p.experts + 1, 1);
    const RowsSpan map_span = check_operand(kOp, "row_map", row_map.data(), row_map.view(), DType::int32, p.tokens, p.k, p.k);
    for (const RowsSpan* output : {&out_span, &info_span, &map_span}) {
        check_output_overlap(kOp, *output, x_span, false);
        check_output_overlap(kOp, *output, ids_span, false);
    }
    check_output_overlap(kOp, info_span, out_span, false);
    check_output_overlap(kOp, map_span, out_span, false);
    check_output_overlap(kOp, map_span, info_span, false);
    if (scaled) {
        const TensorArg& scales = inputs.begin()[2];
        const OutputArg& perm_scales = outputs.begin()[3];
        const long long rows = masked ? p.experts * p.capacity : p.tokens * p.k;
        const RowsSpan scales_span = check_operand(kOp, "x_scales", scales.data(), scales.view(), DType::fp32,
                                                   scale_rows(p.scale_blocks), p.tokens, p.scales_stride);
        const RowsSpan perm_span = check_operand(kOp, "perm_scales", perm_scales.data(), perm_scales.view(), DType::fp32,
                                                 scale_rows(p.scale_blocks), rows, rows);
        for (const RowsSpan* input : {&x_span, &ids_span, &scales_span})
            check_output_overlap(kOp, perm_span, *input, false);
        for (const RowsSpan* output : {&out_span, &info_span, &map_span}) {
            check_output_overlap(kOp, *output, scales_span, false);
            check_output_overlap(kOp, perm_span, *output, false);
        }
    }
    const int vec = widest_aligned_vector(shape_vec, x.data(), dtype_size(p.dtype));
    return widest_aligned_vector(vec, out.data(), dtype_size(p.dtype));
}

}  // namespace
}  // namespace detail

MoePermute::MoePermute(const MoePermuteProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::MoePermuteModel>(detail::normalized(problem)));
}

namespace detail {

int MoePermuteModel::vector_width(Inputs inputs, Outputs outputs) const {
    return detail::bind(p_, shape_vec(), inputs, outputs);
}

void MoePermuteModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    MoePermuteArgs args{};
    args.x = inputs.begin()[0].data();
    args.ids = static_cast<const int*>(inputs.begin()[1].data());
    args.out = outputs.begin()[0].data();
    args.expert_info = static_cast<int*>(outputs.begin()[1].data());
    args.row_map = static_cast<int*>(outputs.begin()[2].data());
    args.workspace = static_cast<int*>(launch.workspace_data());
    args.tokens = p_.tokens;
    args.hidden = p_.hidden;
    args.x_stride = p_.x_stride;
    args.out_stride = p_.out_stride;
    args.experts = static_cast<int>(p_.experts);
    args.k = static_cast<int>(p_.k);
    args.capacity = static_cast<int>(p_.capacity);
    args.group_entries = static_cast<int>(group_entries());
    args.groups = static_cast<int>(groups());
    args.out_rows = out_rows();
    if (p_.scale_blocks > 0) {
        args.scales = static_cast<const float*>(inputs.begin()[2].data());
        args.out_scales = static_cast<float*>(outputs.begin()[3].data());
        args.scale_blocks = static_cast<int>(p_.scale_blocks);
        args.scales_stride = p_.scales_stride;
    }
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
