// Decode attention: problem checks, tuning key and kernel choice (DecodeAttentionModel), and
// DecodeAttention::run. Kernels: kernel_templates/decode_attention/decode_attention.cuh (CUDA cores) and
// decode_attention_mma.cuh (tensor cores); configs: decode_attention_config.cpp.
#include "tileops/decode_attention.hpp"

#include <algorithm>
#include <any>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/kv_cache_checks.hpp"
#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "ops/decode_attention/decode_attention_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "DecodeAttention";
// Two translation units: the kernels' shared-memory copy helpers come from different headers.
constexpr const char* kCudaCoreTemplate = "decode_attention/decode_attention.cuh";
constexpr const char* kTensorCoreTemplate = "decode_attention/decode_attention_mma.cuh";

}  // namespace

class DecodeAttentionModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const DecodeAttentionProblem& problem() const noexcept { return p_; }
    explicit DecodeAttentionModel(const DecodeAttentionProblem& p) : p_(p), shape_(decode_shape(p)) {}

    std::string op_name() const override { return "decode_attention"; }
    std::vector<long long> shape() const override {
        return {p_.batch, p_.num_heads, p_.num_kv_heads, p_.head_dim, p_.q_len, p_.max_kv_len};
    }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    // "page16", "kv_fp8", "page16,kv_fp8".
    std::string flags() const override {
        std::string text = p_.page_size > 0 ? fmt::format("page{}", p_.page_size) : "";
        if (fp8_cache()) text += text.empty() ? "kv_fp8" : ",kv_fp8";
        return text;
    }

    Config heuristic(const DeviceInfo& device) const override { return decode_heuristic(shape_, device); }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        return valid_configs(decode_search_space(shape_, device), device);
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        return decode_invalid_reason(shape_, config, device);
    }
    std::vector<int> vector_widths(const Config&) const override { return {1}; }

    LaunchPlan plan(const Config& config, int /*vec*/, const DeviceInfo& /*device*/) const override {
        const DecodeLaunch l = decode_launch(shape_, config);
        LaunchPlan plan;
        const char* type = device_type_name(p_.dtype);
        // The templates' trailing flags, BALANCED and (tensor cores) ROW_WARPS, default to false.
        const std::string template_flags = l.row_warps ? fmt::format(", {}, true", l.balanced) : l.balanced ? ", true" : "";
        plan.details = DecodeKernelChoice{l.kernel};  // launch_with passes each kernel its own parameters
        if (l.kernel == kDecodeTensorCores) {
            plan.template_file = kTensorCoreTemplate;
            plan.name_expression = fmt::format("tileops::decode_attention_mma{}_kernel<{}, {}, {}, {}, {}, {}{}>",
                                               fp8_cache() ? "_fp8" : "", type, p_.head_dim, l.warps, l.tile, l.stages,
                                               p_.page_size, template_flags);
        } else {
            plan.template_file = kCudaCoreTemplate;
            plan.name_expression = fmt::format("tileops::decode_attention_kernel<{}, {}, {}, {}, {}, {}, {}, {}{}>", type,
                                               device_type_name(*p_.kv_dtype), p_.head_dim, l.rows, l.warps, l.unroll,
                                               l.stages, p_.page_size, template_flags);
        }
        // Balanced: the (kv head, row block) columns vary fastest (common/kv_chunks.cuh says why).
        const unsigned columns = static_cast<unsigned>(p_.num_kv_heads * l.row_blocks);
        plan.grid[0] = l.balanced ? columns : static_cast<unsigned>(l.split_ctas);
        plan.grid[1] = l.balanced ? static_cast<unsigned>(l.split_ctas) : columns;
        plan.grid[2] = static_cast<unsigned>(p_.batch);
        plan.block[0] = static_cast<unsigned>(l.warps * 32);
        plan.shared_bytes = static_cast<unsigned>(l.dynamic_shared_bytes);
        return plan;
    }

    size_t workspace_bytes(const Config& config, int) const override {
        return decode_workspace_bytes(shape_, decode_launch(shape_, config));
    }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{
            {"q", p_.dtype, 0, extent(p_.batch, p_.q_len, p_.num_heads, p_.q_batch_stride, p_.q_token_stride, p_.q_head_stride), 0, false},
            {"k", *p_.kv_dtype, 0, kv_extent(), 0, false},
            {"v", *p_.kv_dtype, 0, kv_extent(), 0, false},
            {"lengths", DType::int32, 0, p_.batch, 0, false, OperandFill::sequence_lengths, p_.max_kv_len},
        };
        list[1].read_by_lengths = list[2].read_by_lengths = true;
        if (p_.page_size > 0)
            list.push_back({"page_table", DType::int32, 0, p_.batch * p_.max_pages_per_seq, 0, false,
                            OperandFill::scrambled_index, p_.num_pages});
        list.push_back({"out", p_.dtype, 0,
                        extent(p_.batch, p_.q_len, p_.num_heads, p_.o_batch_stride, p_.o_token_stride, p_.o_head_stride), 0,
                        true});
        if (p_.return_lse) list.push_back({"lse", DType::fp32, 0, p_.batch * p_.q_len * p_.num_heads, 0, true});
        return list;
    }

private:
    bool fp8_cache() const { return p_.kv_dtype == DType::fp8_e4m3; }
    // Elements spanned by a [outer, tokens, heads, head_dim] tensor with these strides.
    long long extent(long long outer, long long tokens, long long heads, long long outer_stride, long long token_stride,
                     long long head_stride) const {
        return (outer - 1) * outer_stride + (tokens - 1) * token_stride + (heads - 1) * head_stride + p_.head_dim;
    }
    long long kv_extent() const {
        const long long outer = p_.page_size > 0 ? p_.num_pages : p_.batch;
        const long long tokens = p_.page_size > 0 ? p_.page_size : p_.max_kv_len;
        return extent(outer, tokens, p_.num_kv_heads, p_.kv_outer_stride, p_.kv_token_stride, p_.kv_head_stride);
    }

    DecodeAttentionProblem p_;
    DecodeShape shape_;
};

namespace {

void check_range(const char* name, int64_t value, int64_t low, int64_t high) { check_in_range(kOp, name, value, low, high); }

int64_t default_stride(const char* name, int64_t stride, int64_t packed) { return stride_or_packed(kOp, name, stride, packed); }

DecodeAttentionProblem normalized(DecodeAttentionProblem p) {
    constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
    check_range("batch", p.batch, 1, 65535);
    check_range("num_kv_heads", p.num_kv_heads, 1, 4096);
    check_range("num_heads", p.num_heads, 1, 65536);
    if (p.num_heads % p.num_kv_heads != 0)
        throw InvalidArgument(fmt::format("tileops::{}: num_heads ({}) must be a multiple of num_kv_heads ({})", kOp,
                                          p.num_heads, p.num_kv_heads));
    if (p.head_dim < 16 || p.head_dim > 256 || p.head_dim % 16 != 0)
        throw InvalidArgument(
            fmt::format("tileops::{}: head_dim must be a multiple of 16 from 16 to 256, got {}", kOp, p.head_dim));
    check_range("q_len", p.q_len, 1, 8);
    check_range("max_kv_len", p.max_kv_len, 1, kIntMax / 2);
    if (p.dtype != DType::fp16 && p.dtype != DType::bf16)
        throw InvalidArgument(fmt::format("tileops::{}: dtype must be fp16 or bf16, got {}", kOp, dtype_name(p.dtype)));
    const DType kv = kv_cache_dtype(kOp, p.dtype, p.kv_dtype, p.k_scale, p.v_scale);
    p.kv_dtype = kv;
    if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
    check_positive_finite(kOp, "scale", p.scale);
    if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap))
        throw InvalidArgument(fmt::format("tileops::{}: softcap must be >= 0 and finite, got {}", kOp, p.softcap));
    check_range("window_left", p.window_left, -1, kIntMax / 2);

    const int64_t d = p.head_dim;
    const bool paged = p.page_size != 0;
    check_kv_pages(kOp, p.page_size, p.num_pages, p.max_pages_per_seq, p.max_kv_len);
    const int64_t kv_tokens = paged ? p.page_size : p.max_kv_len;
    // A stride left at 0 packs its dimension around the ones inside it, as given: a token holds its
    // heads, and a sequence (or page) whatever its tokens and heads span, in either order (BHSD too).
    p.q_head_stride = default_stride("q_head_stride", p.q_head_stride, d);
    p.q_token_stride = default_stride("q_token_stride", p.q_token_stride, saturating_product(p.num_heads, p.q_head_stride));
    p.q_batch_stride = default_stride("q_batch_stride", p.q_batch_stride,
                                      std::max(saturating_product(p.q_len, p.q_token_stride), saturating_product(p.num_heads, p.q_head_stride)));
    p.o_head_stride = default_stride("o_head_stride", p.o_head_stride, d);
    p.o_token_stride = default_stride("o_token_stride", p.o_token_stride, saturating_product(p.num_heads, p.o_head_stride));
    p.o_batch_stride = default_stride("o_batch_stride", p.o_batch_stride,
                                      std::max(saturating_product(p.q_len, p.o_token_stride), saturating_product(p.num_heads, p.o_head_stride)));
    p.kv_head_stride = default_stride("kv_head_stride", p.kv_head_stride, d);
    p.kv_token_stride = default_stride("kv_token_stride", p.kv_token_stride, saturating_product(p.num_kv_heads, p.kv_head_stride));
    p.kv_outer_stride = default_stride("kv_outer_stride", p.kv_outer_stride,
                                       std::max(saturating_product(kv_tokens, p.kv_token_stride),
                                                saturating_product(p.num_kv_heads, p.kv_head_stride)));
    // Distinct output rows must not share elements (their blocks would race).
    check_rows_disjoint(kOp, d, {{"o_batch_stride", p.batch, p.o_batch_stride}, {"o_token_stride", p.q_len, p.o_token_stride},
                                 {"o_head_stride", p.num_heads, p.o_head_stride}});
    // The kernel loads 16 bytes of a key or value row at a time.
    const int64_t vec = 16 / static_cast<int64_t>(dtype_size(kv));
    for (auto [name, stride] : {std::pair{"kv_head_stride", p.kv_head_stride}, {"kv_token_stride", p.kv_token_stride},
                                {"kv_outer_stride", p.kv_outer_stride}})
        if (stride % vec != 0)
            throw InvalidArgument(fmt::format("tileops::{}: {} = {} must be a multiple of {} elements (16 bytes)", kOp, name,
                                              stride, vec));
    // Offsets inside the kernel are 64-bit; lengths, positions and page numbers are 32-bit.
    check_span(kOp, "q", d, {{"q_batch_stride", p.batch, p.q_batch_stride}, {"q_token_stride", p.q_len, p.q_token_stride},
                             {"q_head_stride", p.num_heads, p.q_head_stride}});
    check_span(kOp, "each of k and v", d, {{"kv_outer_stride", paged ? p.num_pages : p.batch, p.kv_outer_stride},
                                           {"kv_token_stride", kv_tokens, p.kv_token_stride},
                                           {"kv_head_stride", p.num_kv_heads, p.kv_head_stride}});
    return p;
}

// Checks run()'s operands.
void bind(const DecodeAttentionProblem& p, Inputs inputs, Outputs outputs) {
    const bool paged = p.page_size > 0;
    check_count(kOp, "inputs", inputs.size(), paged ? 5 : 4, paged ? "q, k, v, lengths, page_table" : "q, k, v, lengths");
    check_count(kOp, "outputs", outputs.size(), p.return_lse ? 2 : 1, p.return_lse ? "out, lse" : "out");
    const size_t element = dtype_size(p.dtype);
    const RowsSpan q = check_tensor(kOp, "q", inputs[0].data(), inputs[0].view(), p.dtype,
                                    {p.batch, p.q_len, p.num_heads, p.head_dim},
                                    {p.q_batch_stride, p.q_token_stride, p.q_head_stride, 1}, element,
                                    "[batch, q_len, num_heads, head_dim]");
    const int64_t outer = paged ? p.num_pages : p.batch, tokens = paged ? p.page_size : p.max_kv_len;
    const char* kv_dims = paged ? "[num_pages, page_size, num_kv_heads, head_dim]" : "[batch, max_kv_len, num_kv_heads, head_dim]";
    RowsSpan kv[2]{};
    for (int i : {0, 1})
        kv[i] = check_tensor(kOp, i == 0 ? "k" : "v", inputs[1 + i].data(), inputs[1 + i].view(), *p.kv_dtype,
                             {outer, tokens, p.num_kv_heads, p.head_dim},
                             {p.kv_outer_stride, p.kv_token_stride, p.kv_head_stride, 1}, 16, kv_dims);
    const RowsSpan out = check_tensor(kOp, "out", outputs[0].data(), outputs[0].view(), p.dtype,
                                      {p.batch, p.q_len, p.num_heads, p.head_dim},
                                      {p.o_batch_stride, p.o_token_stride, p.o_head_stride, 1}, element,
                                      "[batch, q_len, num_heads, head_dim]");
    const DecodeIndexSpans indices =
        check_decode_indices(kOp, inputs[3], paged ? &inputs[4] : nullptr, p.return_lse ? &outputs[1] : nullptr, p.batch,
                             p.q_len, p.num_heads, p.max_pages_per_seq);
    check_outputs_apart(kOp, {out, indices.lse}, {q, kv[0], kv[1], indices.lengths, indices.page_table});
}

}  // namespace
}  // namespace detail

DecodeAttention::DecodeAttention(const DecodeAttentionProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::DecodeAttentionModel>(detail::normalized(problem)));
}

namespace detail {

int DecodeAttentionModel::vector_width(Inputs inputs, Outputs outputs) const {
    detail::bind(p_, inputs, outputs);
    return 1;
}

void DecodeAttentionModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const DecodeAttentionProblem& p = p_;
    const bool paged = p.page_size > 0;
    const void* q = inputs[0].data();
    const void* k = inputs[1].data();
    const void* v = inputs[2].data();
    const void* lengths = inputs[3].data();
    const void* page_table = paged ? inputs[4].data() : nullptr;
    void* out = outputs[0].data();
    void* lse = p.return_lse ? outputs[1].data() : nullptr;
    long long q_bs = p.q_batch_stride, q_ts = p.q_token_stride, q_hs = p.q_head_stride;
    long long kv_os = p.kv_outer_stride, kv_ts = p.kv_token_stride, kv_hs = p.kv_head_stride;
    long long pt_stride = p.max_pages_per_seq;
    int num_pages = static_cast<int>(p.num_pages), max_kv_len = static_cast<int>(p.max_kv_len);
    long long o_bs = p.o_batch_stride, o_ts = p.o_token_stride, o_hs = p.o_head_stride;
    int group = static_cast<int>(p.num_heads / p.num_kv_heads), q_len = static_cast<int>(p.q_len);
    int window = static_cast<int>(p.window_left);
    // An fp8 cache's key scale is folded into the score scale; its value scale goes to the kernel.
    const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
    float scale = fp8 ? p.scale * p.k_scale : p.scale, softcap = p.softcap, v_scale = fp8 ? p.v_scale : 1.0f;
    void* workspace = launch.workspace_data();  // null without splits
    // v_scale comes after the workspace, for the CUDA-core kernel and the tensor cores' fp8 one.
    const bool cuda_cores = std::any_cast<detail::DecodeKernelChoice>(launch.details).kernel == detail::kDecodeCudaCores;
    void* args[] = {&q,     &q_bs,    &q_ts,       &q_hs,      &k,         &v,          &kv_os, &kv_ts,
                    &kv_hs, &lengths, &page_table, &pt_stride, &num_pages, &max_kv_len, &out,   &o_bs,
                    &o_ts,  &o_hs,    &lse,        &group,     &q_len,     &window,     &scale, &softcap,
                    &workspace, cuda_cores || fp8 ? static_cast<void*>(&v_scale) : nullptr};
    detail::launch(launch, args, stream, *this);
}

}  // namespace detail
}  // namespace tileops
