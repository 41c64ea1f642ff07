// MLA decode: problem checks, tuning key and kernel choice (MlaDecodeModel), and MlaDecode::run.
// Kernels: kernel_templates/mla_decode/; configs: mla_decode_config.cpp.
#include "tileops/mla_decode.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/kv_cache_checks.hpp"
#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "mla_decode/mla_decode_args.cuh"  // kernel_templates/: the kernels' argument block
#include "ops/mla_decode/mla_decode_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "MlaDecode";
constexpr int64_t kKeyDim = MlaDecode::kKeyDim, kValueDim = MlaDecode::kLatentDim;

}  // namespace

class MlaDecodeModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const MlaDecodeProblem& problem() const noexcept { return p_; }
    explicit MlaDecodeModel(const MlaDecodeProblem& p) : p_(p), shape_(mla_shape(p)) {}

    std::string op_name() const override { return "mla_decode"; }
    std::vector<long long> shape() const override { return {p_.batch, p_.num_heads, p_.q_len, p_.max_kv_len}; }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    std::string flags() const override { return p_.page_size > 0 ? fmt::format("page{}", p_.page_size) : ""; }

    Config heuristic(const DeviceInfo& device) const override { return mla_heuristic(shape_, device); }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        return valid_configs(mla_search_space(shape_, device), device);
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        return mla_invalid_reason(shape_, config, device);
    }
    std::vector<int> vector_widths(const Config&) const override { return {1}; }

    LaunchPlan plan(const Config& config, int /*vec*/, const DeviceInfo& /*device*/) const override {
        const MlaLaunch l = mla_launch(shape_, config);
        LaunchPlan plan;
        plan.template_file = l.kernel == 2   ? "mla_decode/mla_decode_seesaw.cuh"
                             : l.kernel == 1 ? "mla_decode/mla_decode_sm90.cuh"
                                             : "mla_decode/mla_decode_sm80.cuh";
        const char* type = device_type_name(p_.dtype);
        plan.name_expression =
            l.kernel == 2   ? fmt::format("tileops::mla_decode_seesaw_kernel<{}, {}>", type, p_.page_size)
            : l.kernel == 1 ? fmt::format("tileops::mla_decode_sm90_kernel<{}, {}, {}, {}>", type, l.block_n, l.stages, p_.page_size)
                            : fmt::format("tileops::mla_decode_sm80_kernel<{}, {}, {}, {}, {}>", type, l.block_m, l.block_n,
                                          l.stages, p_.page_size);
        // Balanced: the row blocks vary fastest (common/kv_chunks.cuh says why).
        plan.grid[0] = static_cast<unsigned>(l.balanced ? l.row_blocks : l.split_ctas);
        plan.grid[1] = static_cast<unsigned>(l.balanced ? l.split_ctas : l.row_blocks);
        plan.grid[2] = static_cast<unsigned>(p_.batch);
        plan.block[0] = static_cast<unsigned>(l.threads);
        plan.shared_bytes = static_cast<unsigned>(l.shared_bytes);
        if (l.split_ctas > 1) {  // the merge: a block of 128 threads per (row, sequence)
            plan.after.name_expression = fmt::format("tileops::mla_merge_kernel<{}, {}>", type, l.block_m);
            plan.after.grid[0] = static_cast<unsigned>(p_.q_len * p_.num_heads);
            plan.after.grid[1] = static_cast<unsigned>(p_.batch);
            plan.after.block[0] = 128;
        }
        return plan;
    }

    size_t workspace_bytes(const Config& config, int) const override {
        return mla_workspace_bytes(shape_, mla_launch(shape_, config));
    }

    std::vector<OperandSpec> operands() const override {
        const long long q_extent = (p_.batch - 1) * p_.q_batch_stride + (p_.q_len - 1) * p_.q_token_stride +
                                   (p_.num_heads - 1) * p_.q_head_stride + kKeyDim;
        const long long o_extent = (p_.batch - 1) * p_.o_batch_stride + (p_.q_len - 1) * p_.o_token_stride +
                                   (p_.num_heads - 1) * p_.o_head_stride + kValueDim;
        const long long outer = p_.page_size > 0 ? p_.num_pages : p_.batch;
        const long long tokens = p_.page_size > 0 ? p_.page_size : p_.max_kv_len;
        const long long kv_extent = (outer - 1) * p_.kv_outer_stride + (tokens - 1) * p_.kv_token_stride + kKeyDim;
        std::vector<OperandSpec> list{
            {"q", p_.dtype, 0, q_extent, 0, false},
            {"kv", p_.dtype, 0, kv_extent, 0, false},
            {"lengths", DType::int32, 0, p_.batch, 0, false, OperandFill::sequence_lengths, p_.max_kv_len},
        };
        list[1].read_by_lengths = true;
        if (p_.page_size > 0)
            list.push_back({"page_table", DType::int32, 0, p_.batch * p_.max_pages_per_seq, 0, false,
                            OperandFill::scrambled_index, p_.num_pages});
        list.push_back({"out", p_.dtype, 0, o_extent, 0, true});
        if (p_.return_lse) list.push_back({"lse", DType::fp32, 0, p_.batch * p_.q_len * p_.num_heads, 0, true});
        return list;
    }

private:
    MlaDecodeProblem p_;
    MlaShape shape_;
};

namespace {

void check_range(const char* name, int64_t value, int64_t low, int64_t high) { check_in_range(kOp, name, value, low, high); }

int64_t default_stride(const char* name, int64_t stride, int64_t packed) { return stride_or_packed(kOp, name, stride, packed); }

MlaDecodeProblem normalized(MlaDecodeProblem p) {
    constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
    check_range("batch", p.batch, 1, 65535);
    check_range("num_heads", p.num_heads, 1, 1024);
    check_range("q_len", p.q_len, 1, 8);
    check_range("max_kv_len", p.max_kv_len, 1, kIntMax / 2);
    if (p.dtype != DType::fp16 && p.dtype != DType::bf16)
        throw InvalidArgument(fmt::format("tileops::{}: dtype must be fp16 or bf16, got {}", kOp, dtype_name(p.dtype)));
    if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(static_cast<float>(kKeyDim));
    check_positive_finite(kOp, "scale", p.scale);
    const bool paged = p.page_size != 0;
    check_kv_pages(kOp, p.page_size, p.num_pages, p.max_pages_per_seq, p.max_kv_len);
    p.q_head_stride = default_stride("q_head_stride", p.q_head_stride, kKeyDim);
    p.q_token_stride = default_stride("q_token_stride", p.q_token_stride, saturating_product(p.num_heads, p.q_head_stride));
    p.q_batch_stride = default_stride("q_batch_stride", p.q_batch_stride, saturating_product(p.q_len, p.q_token_stride));
    p.o_head_stride = default_stride("o_head_stride", p.o_head_stride, kValueDim);
    p.o_token_stride = default_stride("o_token_stride", p.o_token_stride, saturating_product(p.num_heads, p.o_head_stride));
    p.o_batch_stride = default_stride("o_batch_stride", p.o_batch_stride, saturating_product(p.q_len, p.o_token_stride));
    // Distinct output rows must not share elements (their blocks would race).
    check_rows_disjoint(kOp, kValueDim, {{"o_batch_stride", p.batch, p.o_batch_stride}, {"o_token_stride", p.q_len, p.o_token_stride},
                                         {"o_head_stride", p.num_heads, p.o_head_stride}});
    p.kv_token_stride = default_stride("kv_token_stride", p.kv_token_stride, kKeyDim);
    p.kv_outer_stride = default_stride("kv_outer_stride", p.kv_outer_stride,
                                       saturating_product(paged ? p.page_size : p.max_kv_len, p.kv_token_stride));
    // The kernel moves 16 bytes of a row at a time.
    const int64_t vec = 16 / static_cast<int64_t>(dtype_size(p.dtype));
    for (auto [name, stride] : {std::pair{"q_head_stride", p.q_head_stride}, {"q_token_stride", p.q_token_stride},
                                {"q_batch_stride", p.q_batch_stride}, {"o_head_stride", p.o_head_stride},
                                {"o_token_stride", p.o_token_stride}, {"o_batch_stride", p.o_batch_stride},
                                {"kv_token_stride", p.kv_token_stride}, {"kv_outer_stride", p.kv_outer_stride}})
        if (stride % vec != 0)
            throw InvalidArgument(fmt::format("tileops::{}: {} = {} must be a multiple of {} elements (16 bytes)", kOp, name,
                                              stride, vec));
    // Offsets inside the kernels are 64-bit.
    check_span(kOp, "q", kKeyDim, {{"q_batch_stride", p.batch, p.q_batch_stride}, {"q_token_stride", p.q_len, p.q_token_stride},
                                   {"q_head_stride", p.num_heads, p.q_head_stride}});
    check_span(kOp, "kv", kKeyDim, {{"kv_outer_stride", paged ? p.num_pages : p.batch, p.kv_outer_stride},
                                    {"kv_token_stride", paged ? p.page_size : p.max_kv_len, p.kv_token_stride}});
    return p;
}

// Checks run()'s operands.
void bind(const MlaDecodeProblem& p, Inputs inputs, Outputs outputs) {
    const bool paged = p.page_size > 0;
    check_count(kOp, "inputs", inputs.size(), paged ? 4 : 3, paged ? "q, kv, lengths, page_table" : "q, kv, lengths");
    check_count(kOp, "outputs", outputs.size(), p.return_lse ? 2 : 1, p.return_lse ? "out, lse" : "out");
    const RowsSpan q = check_tensor(kOp, "q", inputs[0].data(), inputs[0].view(), p.dtype,
                                    {p.batch, p.q_len, p.num_heads, kKeyDim},
                                    {p.q_batch_stride, p.q_token_stride, p.q_head_stride, 1}, 16,
                                    "[batch, q_len, num_heads, 576]");
    const int64_t outer = paged ? p.num_pages : p.batch, tokens = paged ? p.page_size : p.max_kv_len;
    const RowsSpan kv = check_tensor(kOp, "kv", inputs[1].data(), inputs[1].view(), p.dtype, {outer, tokens, kKeyDim},
                                     {p.kv_outer_stride, p.kv_token_stride, 1}, 16,
                                     paged ? "[num_pages, page_size, 576]" : "[batch, max_kv_len, 576]");
    const RowsSpan out = check_tensor(kOp, "out", outputs[0].data(), outputs[0].view(), p.dtype,
                                      {p.batch, p.q_len, p.num_heads, kValueDim},
                                      {p.o_batch_stride, p.o_token_stride, p.o_head_stride, 1}, 16,
                                      "[batch, q_len, num_heads, 512]");
    const DecodeIndexSpans indices =
        check_decode_indices(kOp, inputs[2], paged ? &inputs[3] : nullptr, p.return_lse ? &outputs[1] : nullptr, p.batch,
                             p.q_len, p.num_heads, p.max_pages_per_seq);
    check_outputs_apart(kOp, {out, indices.lse}, {q, kv, indices.lengths, indices.page_table});
}

}  // namespace
}  // namespace detail

MlaDecode::MlaDecode(const MlaDecodeProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::MlaDecodeModel>(detail::normalized(problem)));
}

namespace detail {

int MlaDecodeModel::vector_width(Inputs inputs, Outputs outputs) const {
    detail::bind(p_, inputs, outputs);
    return 1;
}

void MlaDecodeModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const MlaDecodeProblem& p = p_;
    MlaDecodeArgs args{};
    args.q = inputs[0].data();
    args.kv = inputs[1].data();
    args.lengths = static_cast<const int*>(inputs[2].data());
    args.page_table = p.page_size > 0 ? static_cast<const int*>(inputs[3].data()) : nullptr;
    args.out = outputs[0].data();
    args.lse = p.return_lse ? static_cast<float*>(outputs[1].data()) : nullptr;
    args.workspace = static_cast<float*>(launch.workspace_data());  // null without splits
    args.q_batch_stride = p.q_batch_stride, args.q_token_stride = p.q_token_stride, args.q_head_stride = p.q_head_stride;
    args.kv_outer_stride = p.kv_outer_stride, args.kv_token_stride = p.kv_token_stride;
    args.page_table_stride = p.max_pages_per_seq;
    args.o_batch_stride = p.o_batch_stride, args.o_token_stride = p.o_token_stride, args.o_head_stride = p.o_head_stride;
    args.num_heads = static_cast<int>(p.num_heads);
    args.q_len = static_cast<int>(p.q_len);
    args.num_pages = static_cast<int>(p.num_pages);
    args.max_kv_len = static_cast<int>(p.max_kv_len);
    args.balanced = mla_balanced(shape_) ? 1 : 0;
    args.num_splits = static_cast<int>(args.balanced ? launch.grid[1] : launch.grid[0]);
    args.scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
    args.scale = p.scale;
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
