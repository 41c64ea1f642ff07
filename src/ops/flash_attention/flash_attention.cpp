// Flash attention forward: problem checks, tuning key and kernel choice (FlashAttentionModel),
// operand checks and the launch. Kernels: kernel_templates/flash_attention/
// (flash_attention_sm80.cuh, flash_attention_sm90.cuh). Configs: ops/flash_attention_config.cpp.
#include "tileops/flash_attention.hpp"

#include <algorithm>
#include <any>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "cuda/driver.hpp"
#include "flash_attention/flash_attention_args.cuh"  // kernel_templates/: the kernels' parameters
#include "ops/flash_attention/flash_attention_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "FlashAttention";
constexpr double kLog2e = 1.4426950408889634;

void check_range(const char* name, int64_t value, int64_t low, int64_t high) { check_in_range(kOp, name, value, low, high); }

int64_t stride_or(const char* name, int64_t given, int64_t packed) {
    const int64_t stride = stride_or_packed(kOp, name, given, packed);
    if (stride % 8 != 0)
        throw InvalidArgument(fmt::format("tileops::{}: {} = {} must be a multiple of 8 elements (16 bytes)", kOp, name, stride));
    return stride;
}

// Fills in the packed strides of one tensor of `rows` rows per sequence, `heads` heads and rows of
// `d` elements.
void normalize_strides(const FlashAttentionProblem& p, const char* tensor, int64_t rows, int64_t heads, int64_t d,
                       int64_t& batch_stride, int64_t& seq_stride, int64_t& head_stride) {
    const bool bhsd = p.layout == AttentionLayout::bhsd && !p.varlen;
    const std::string name = tensor;
    seq_stride = stride_or((name + "_seq_stride").c_str(), seq_stride, bhsd ? d : heads * d);
    head_stride = stride_or((name + "_head_stride").c_str(), head_stride, bhsd ? rows * d : d);
    batch_stride = p.varlen ? 0 : stride_or((name + "_batch_stride").c_str(), batch_stride, rows * heads * d);
}

FlashAttentionProblem normalized(FlashAttentionProblem p) {
    constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
    if (p.num_kv_heads == 0) p.num_kv_heads = p.num_heads;
    if (p.seqlen_k == 0) p.seqlen_k = p.seqlen_q;
    check_range("batch", p.batch, 1, 65535);
    check_range("num_heads", p.num_heads, 1, 65535);
    check_range("num_kv_heads", p.num_kv_heads, 1, p.num_heads);
    if (p.num_heads % p.num_kv_heads != 0)
        throw InvalidArgument(fmt::format("tileops::{}: num_heads ({}) must be a multiple of num_kv_heads ({})", kOp,
                                          p.num_heads, p.num_kv_heads));
    if (p.head_dim_v == 0) p.head_dim_v = p.head_dim;
    for (auto [name, dim] : {std::pair{"head_dim", p.head_dim}, {"head_dim_v", p.head_dim_v}})
        if (dim < 16 || dim > 256 || dim % 16 != 0)
            throw Unsupported(fmt::format("tileops::{}: {} must be a multiple of 16 from 16 to 256, got {}", kOp, name, dim));
    check_range("seqlen_q", p.seqlen_q, 1, kIntMax / 2);
    check_range("seqlen_k", p.seqlen_k, 1, kIntMax / 2);
    if (p.dtype != DType::fp16 && p.dtype != DType::bf16)
        throw Unsupported(fmt::format("tileops::{}: dtype must be fp16 or bf16, got {}", kOp, dtype_name(p.dtype)));
    if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
    check_positive_finite(kOp, "scale", p.scale);
    check_range("window_left", p.window_left, -1, kIntMax / 2);
    if (p.layout != AttentionLayout::bshd && p.layout != AttentionLayout::bhsd)
        throw InvalidArgument(fmt::format("tileops::{}: layout {} is not bshd or bhsd", kOp, static_cast<int>(p.layout)));
    if (p.varlen) {
        check_range("total_q", p.total_q, 1, kIntMax / 2);
        check_range("total_k", p.total_k, 1, kIntMax / 2);
    } else if (p.total_q != 0 || p.total_k != 0) {
        throw InvalidArgument(fmt::format("tileops::{}: total_q and total_k are for varlen problems (set varlen)", kOp));
    }
    // The sm_90 kernel numbers its work tiles (64 query rows or more each) with 32-bit integers.
    if ((p.seqlen_q + 63) / 64 * p.num_heads * p.batch > kIntMax)
        throw InvalidArgument(fmt::format("tileops::{}: batch x num_heads x seqlen_q ({} x {} x {}) is larger than supported",
                                          kOp, p.batch, p.num_heads, p.seqlen_q));
    const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
    normalize_strides(p, "q", rows_q, p.num_heads, p.head_dim, p.q_batch_stride, p.q_seq_stride, p.q_head_stride);
    normalize_strides(p, "k", rows_k, p.num_kv_heads, p.head_dim, p.k_batch_stride, p.k_seq_stride, p.k_head_stride);
    normalize_strides(p, "v", rows_k, p.num_kv_heads, p.head_dim_v, p.v_batch_stride, p.v_seq_stride, p.v_head_stride);
    normalize_strides(p, "o", rows_q, p.num_heads, p.head_dim_v, p.o_batch_stride, p.o_seq_stride, p.o_head_stride);
    // Distinct output rows must not share elements (their blocks would race).
    check_rows_disjoint(kOp, p.head_dim_v, {{"o_batch_stride", p.varlen ? 1 : p.batch, p.o_batch_stride},
                                          {"o_seq_stride", rows_q, p.o_seq_stride}, {"o_head_stride", p.num_heads, p.o_head_stride}});
    // Offsets are 64-bit in the kernels and TMA strides must stay below 2^40 bytes.
    const int64_t limit = int64_t{1} << 38;
    for (auto [name, stride] :
         {std::pair{"q_batch_stride", p.q_batch_stride}, {"q_seq_stride", p.q_seq_stride}, {"q_head_stride", p.q_head_stride},
          {"k_batch_stride", p.k_batch_stride}, {"k_seq_stride", p.k_seq_stride}, {"k_head_stride", p.k_head_stride},
          {"v_batch_stride", p.v_batch_stride}, {"v_seq_stride", p.v_seq_stride}, {"v_head_stride", p.v_head_stride},
          {"o_batch_stride", p.o_batch_stride}, {"o_seq_stride", p.o_seq_stride}, {"o_head_stride", p.o_head_stride}})
        if (stride > limit)
            throw InvalidArgument(fmt::format("tileops::{}: {} = {} elements is larger than supported", kOp, name, stride));
    const int64_t batches = p.varlen ? 1 : p.batch;
    check_span(kOp, "q", p.head_dim, {{"q_batch_stride", batches, p.q_batch_stride}, {"q_seq_stride", rows_q, p.q_seq_stride},
                                      {"q_head_stride", p.num_heads, p.q_head_stride}});
    check_span(kOp, "k", p.head_dim, {{"k_batch_stride", batches, p.k_batch_stride}, {"k_seq_stride", rows_k, p.k_seq_stride},
                                      {"k_head_stride", p.num_kv_heads, p.k_head_stride}});
    check_span(kOp, "v", p.head_dim_v, {{"v_batch_stride", batches, p.v_batch_stride}, {"v_seq_stride", rows_k, p.v_seq_stride},
                                        {"v_head_stride", p.num_kv_heads, p.v_head_stride}});
    return p;
}

FlashShape flash_shape(const FlashAttentionProblem& p) {
    return {p.head_dim, p.head_dim_v, static_cast<int>(dtype_size(p.dtype)), p.causal, p.seqlen_q};
}

// Elements spanned by a tensor of `outer` x `rows` x `heads` rows of `dim` elements with these strides.
long long span(long long dim, long long outer, long long outer_stride, long long rows, long long row_stride,
               long long heads, long long head_stride) {
    return (outer - 1) * outer_stride + (rows - 1) * row_stride + (heads - 1) * head_stride + dim;
}

}  // namespace

class FlashAttentionModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const FlashAttentionProblem& problem() const noexcept { return p_; }
    explicit FlashAttentionModel(const FlashAttentionProblem& p) : p_(p), shape_(flash_shape(p)) {}

    std::string op_name() const override { return "flash_attention"; }
    std::vector<long long> shape() const override {
        return {p_.batch, p_.num_heads, p_.num_kv_heads, p_.head_dim, p_.seqlen_q, p_.seqlen_k};
    }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    // Options that change the kernel or its work: "causal,window,varlen", and "dvN" for a value
    // head dim N other than head_dim.
    std::string flags() const override {
        std::string text;
        auto add = [&](const std::string& flag) { text += (text.empty() ? "" : ",") + flag; };
        if (p_.causal) add("causal");
        if (p_.window_left >= 0) add("window");
        if (p_.varlen) add("varlen");
        if (p_.head_dim_v != p_.head_dim) add(fmt::format("dv{}", p_.head_dim_v));
        return text;
    }

    Config heuristic(const DeviceInfo& device) const override { return flash_heuristic(shape_, device); }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        return flash_search_space(shape_, device);
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        return flash_invalid_reason(shape_, config, device);
    }
    std::vector<int> vector_widths(const Config&) const override { return {1}; }
    // The sm_90 kernel hands work tiles out from two counters (flash_attention_sm90.cuh).
    size_t workspace_bytes(const Config& config, int) const override {
        return FlashConfig::from(config).kernel == kFlashSm90 ? 2 * sizeof(int) : 0;
    }

    LaunchPlan plan(const Config& config, int /*vec*/, const DeviceInfo& device) const override {
        const FlashConfig c = FlashConfig::from(config);
        LaunchPlan plan;
        plan.template_file = c.kernel == kFlashSm90 ? "flash_attention/flash_attention_sm90.cuh"
                                                     : "flash_attention/flash_attention_sm80.cuh";
        const char* type = device_type_name(p_.dtype);
        const char* causal = p_.causal ? "true" : "false";
        const char* window = p_.window_left >= 0 ? "true" : "false";
        if (c.kernel == kFlashSm90) {
            plan.name_expression = fmt::format("tileops::flash_attention_sm90_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>",
                                               type, p_.head_dim, p_.head_dim_v, c.block_n, c.stages, c.block_m / 64,
                                               c.q_buffers(shape_), c.pingpong ? "true" : "false", causal, window);
            plan.details = FlashTmaLaunch{c.block_m, c.block_n};
        } else {
            plan.name_expression = fmt::format("tileops::flash_attention_sm80_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}>", type,
                                               p_.head_dim, p_.head_dim_v, c.block_m, c.block_n, c.warps, c.stages, causal,
                                               window);
        }
        const int64_t q_tiles = (p_.seqlen_q + c.block_m - 1) / c.block_m;
        if (c.kernel == kFlashSm90) {
            // Persistent: as many blocks as the SMs hold at once, each taking the next work tile
            // as it finishes one (blocks launched past that would find the work gone).
            plan.grid[0] = static_cast<unsigned>(std::min<int64_t>(
                q_tiles * p_.num_heads * p_.batch, int64_t{c.blocks_per_sm(shape_, device)} * device.sm_count));
            plan.persistent = true;
        } else {
            plan.grid[0] = static_cast<unsigned>(q_tiles);
            plan.grid[1] = static_cast<unsigned>(p_.num_heads);
            plan.grid[2] = static_cast<unsigned>(p_.batch);
        }
        plan.block[0] = static_cast<unsigned>(c.threads());
        plan.shared_bytes = static_cast<unsigned>(c.shared_bytes(shape_));
        return plan;
    }

    std::vector<OperandSpec> operands() const override {
        const long long outer = p_.varlen ? 1 : p_.batch;
        const long long rows_q = p_.varlen ? p_.total_q : p_.seqlen_q, rows_k = p_.varlen ? p_.total_k : p_.seqlen_k;
        std::vector<OperandSpec> list{
            {"q", p_.dtype, 0,
             span(p_.head_dim, outer, p_.q_batch_stride, rows_q, p_.q_seq_stride, p_.num_heads, p_.q_head_stride), 0, false},
            {"k", p_.dtype, 0,
             span(p_.head_dim, outer, p_.k_batch_stride, rows_k, p_.k_seq_stride, p_.num_kv_heads, p_.k_head_stride), 0, false},
            {"v", p_.dtype, 0,
             span(p_.head_dim_v, outer, p_.v_batch_stride, rows_k, p_.v_seq_stride, p_.num_kv_heads, p_.v_head_stride), 0,
             false},
        };
        if (p_.varlen) {
            // Tools run varlen problems as sequences of the longest length, packed.
            list.push_back({"cu_seqlens_q", DType::int32, 0, p_.batch + 1, 0, false, OperandFill::multiples,
                            std::min<long long>(p_.seqlen_q, p_.total_q / p_.batch)});
            list.push_back({"cu_seqlens_k", DType::int32, 0, p_.batch + 1, 0, false, OperandFill::multiples,
                            std::min<long long>(p_.seqlen_k, p_.total_k / p_.batch)});
        }
        list.push_back({"out", p_.dtype, 0,
                        span(p_.head_dim_v, outer, p_.o_batch_stride, rows_q, p_.o_seq_stride, p_.num_heads, p_.o_head_stride),
                        0, true});
        if (p_.return_lse) list.push_back({"lse", DType::fp32, 0, lse_elements(), 0, true});
        return list;
    }

    long long lse_elements() const { return p_.varlen ? p_.num_heads * p_.total_q : p_.batch * p_.num_heads * p_.seqlen_q; }

private:
    FlashAttentionProblem p_;
    FlashShape shape_;
};

namespace {

// One of q, k, v, out (rows of `dim` elements): a pointer, or a view of the problem's shape and strides.
RowsSpan check_attention_tensor(const FlashAttentionProblem& p, const char* name, const void* data, const TensorView* view,
                                int64_t rows, int64_t heads, int64_t dim, int64_t batch_stride, int64_t seq_stride,
                                int64_t head_stride) {
    const bool value_dim = dim != p.head_dim;  // literals: run() checks operands on the hot path, which must not allocate
    if (p.varlen)
        return check_tensor(kOp, name, data, view, p.dtype, {rows, heads, dim}, {seq_stride, head_stride, 1}, 16,
                            value_dim ? "[total_rows, heads, head_dim_v]" : "[total_rows, heads, head_dim]");
    if (p.layout == AttentionLayout::bhsd)
        return check_tensor(kOp, name, data, view, p.dtype, {p.batch, heads, rows, dim},
                            {batch_stride, head_stride, seq_stride, 1}, 16,
                            value_dim ? "[batch, heads, seqlen, head_dim_v]" : "[batch, heads, seqlen, head_dim]");
    return check_tensor(kOp, name, data, view, p.dtype, {p.batch, rows, heads, dim}, {batch_stride, seq_stride, head_stride, 1},
                        16, value_dim ? "[batch, seqlen, heads, head_dim_v]" : "[batch, seqlen, heads, head_dim]");
}

void bind(const FlashAttentionProblem& p, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), p.varlen ? 5 : 3, p.varlen ? "q, k, v, cu_seqlens_q, cu_seqlens_k" : "q, k, v");
    check_count(kOp, "outputs", outputs.size(), p.return_lse ? 2 : 1, p.return_lse ? "out, lse" : "out");
    const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
    const RowsSpan q = check_attention_tensor(p, "q", inputs[0].data(), inputs[0].view(), rows_q, p.num_heads, p.head_dim,
                                              p.q_batch_stride, p.q_seq_stride, p.q_head_stride);
    const RowsSpan k = check_attention_tensor(p, "k", inputs[1].data(), inputs[1].view(), rows_k, p.num_kv_heads, p.head_dim,
                                              p.k_batch_stride, p.k_seq_stride, p.k_head_stride);
    const RowsSpan v = check_attention_tensor(p, "v", inputs[2].data(), inputs[2].view(), rows_k, p.num_kv_heads,
                                              p.head_dim_v, p.v_batch_stride, p.v_seq_stride, p.v_head_stride);
    RowsSpan cu_q{}, cu_k{}, lse{};
    if (p.varlen) {
        cu_q = check_tensor(kOp, "cu_seqlens_q", inputs[3].data(), inputs[3].view(), DType::int32, {p.batch + 1}, {1}, 4,
                            "[batch + 1]");
        cu_k = check_tensor(kOp, "cu_seqlens_k", inputs[4].data(), inputs[4].view(), DType::int32, {p.batch + 1}, {1}, 4,
                            "[batch + 1]");
    }
    const RowsSpan out = check_attention_tensor(p, "out", outputs[0].data(), outputs[0].view(), rows_q, p.num_heads,
                                                p.head_dim_v, p.o_batch_stride, p.o_seq_stride, p.o_head_stride);
    if (p.return_lse) {
        if (p.varlen)
            lse = check_tensor(kOp, "lse", outputs[1].data(), outputs[1].view(), DType::fp32, {p.num_heads, p.total_q},
                               {p.total_q, 1}, 4, "[num_heads, total_q]");
        else
            lse = check_tensor(kOp, "lse", outputs[1].data(), outputs[1].view(), DType::fp32,
                               {p.batch, p.num_heads, p.seqlen_q}, {p.num_heads * p.seqlen_q, p.seqlen_q, 1}, 4,
                               "[batch, num_heads, seqlen_q]");
    }
    check_outputs_apart(kOp, {out, lse}, {q, k, v, cu_q, cu_k});
}

// A 4-D (head dim, rows, heads, batch) tensor map of 16-bit elements, loaded in boxes of 64 head-dim
// columns (128 bytes, swizzled to match wgmma's shared-memory layout) x box_rows rows of one head.
// A head dim that is not a multiple of 64 ends in a box partly past it, which TMA fills with zeros.
CUtensorMap attention_tensor_map(const void* data, DType dtype, int64_t head_dim, int64_t rows, int64_t heads,
                                 int64_t batch, int64_t seq_stride, int64_t head_stride, int64_t batch_stride,
                                 unsigned box_rows) {
    CUtensorMap map;
    const size_t element = dtype_size(dtype);
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rows),
                                static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
    // A dimension of extent 1 still needs a valid stride: any multiple of 16 bytes.
    auto bytes = [&](int64_t stride) { return static_cast<cuuint64_t>(stride > 0 ? stride : 8) * element; };
    const cuuint64_t strides[3] = {bytes(seq_stride), bytes(head_stride), bytes(batch_stride)};
    const cuuint32_t box[4] = {64, box_rows, 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    const CUtensorMapDataType type = dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    TILEOPS_CU_CHECK(cuda::driver().cuTensorMapEncodeTiled(
        &map, type, 4, const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

}  // namespace
}  // namespace detail

FlashAttention::FlashAttention(const FlashAttentionProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::FlashAttentionModel>(detail::normalized(problem)));
}

namespace detail {

int FlashAttentionModel::vector_width(Inputs inputs, Outputs outputs) const {
    detail::bind(p_, inputs, outputs);
    return 1;
}

void FlashAttentionModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const FlashAttentionProblem& p = p_;
    FlashAttentionArgs args{};
    args.q = inputs[0].data();
    args.k = inputs[1].data();
    args.v = inputs[2].data();
    args.o = outputs[0].data();
    args.lse = p.return_lse ? static_cast<float*>(outputs[1].data()) : nullptr;
    args.cu_seqlens_q = p.varlen ? static_cast<const int*>(inputs[3].data()) : nullptr;
    args.cu_seqlens_k = p.varlen ? static_cast<const int*>(inputs[4].data()) : nullptr;
    args.q_batch_stride = p.q_batch_stride, args.q_row_stride = p.q_seq_stride, args.q_head_stride = p.q_head_stride;
    args.k_batch_stride = p.k_batch_stride, args.k_row_stride = p.k_seq_stride, args.k_head_stride = p.k_head_stride;
    args.v_batch_stride = p.v_batch_stride, args.v_row_stride = p.v_seq_stride, args.v_head_stride = p.v_head_stride;
    args.o_batch_stride = p.o_batch_stride, args.o_row_stride = p.o_seq_stride, args.o_head_stride = p.o_head_stride;
    args.lse_batch_stride = p.varlen ? 0 : p.num_heads * p.seqlen_q;
    args.lse_head_stride = p.varlen ? p.total_q : p.seqlen_q;
    args.seqlen_q = static_cast<int>(p.seqlen_q);
    args.seqlen_k = static_cast<int>(p.seqlen_k);
    args.group = static_cast<int>(p.num_heads / p.num_kv_heads);
    args.window_left = static_cast<int>(p.window_left);
    args.scale_log2 = static_cast<float>(p.scale * detail::kLog2e);
    args.scale = p.scale;
    args.num_heads = static_cast<int>(p.num_heads);
    args.batch = static_cast<int>(p.batch);
    args.scheduler = static_cast<int*>(launch.workspace_data());  // null unless the kernel is sm_90's
    // Varlen: the packed tensors' rows, into which the kernels clamp the caller's cu_seqlens.
    FlashPackedRows rows{static_cast<int>(p.varlen ? p.total_q : 0), static_cast<int>(p.varlen ? p.total_k : 0)};
    const auto* tma = std::any_cast<detail::FlashTmaLaunch>(&launch.details);
    if (tma == nullptr) {  // the sm_80 kernel
        void* params[] = {&args, &rows};
        detail::launch(launch, params, stream, *this);
        return;
    }
    // The TMA kernel: Q in boxes of block_m rows, K and V in boxes of block_n rows.
    const auto block_m = static_cast<unsigned>(tma->block_m), block_n = static_cast<unsigned>(tma->block_n);
    const int64_t batch = p.varlen ? 1 : p.batch;
    const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
    alignas(64) CUtensorMap map_q = detail::attention_tensor_map(args.q, p.dtype, p.head_dim, rows_q, p.num_heads, batch,
                                                                 p.q_seq_stride, p.q_head_stride, p.q_batch_stride, block_m);
    alignas(64) CUtensorMap map_k = detail::attention_tensor_map(args.k, p.dtype, p.head_dim, rows_k, p.num_kv_heads, batch,
                                                                 p.k_seq_stride, p.k_head_stride, p.k_batch_stride, block_n);
    alignas(64) CUtensorMap map_v = detail::attention_tensor_map(args.v, p.dtype, p.head_dim_v, rows_k, p.num_kv_heads, batch,
                                                                 p.v_seq_stride, p.v_head_stride, p.v_batch_stride, block_n);
    void* params[] = {&map_q, &map_k, &map_v, &args, &rows};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
