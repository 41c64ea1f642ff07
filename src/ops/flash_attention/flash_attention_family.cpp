// The flash attention family: prefill attention forward, fp16/bf16, MHA/GQA/MQA, causal, windows,
// varlen. Kernels: kernel_templates/flash_attention/ (sm_90a FA3-style, mma.sync elsewhere).
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/flash_attention.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "batch x heads x kv_heads x head_dim x seqlen_q x seqlen_k";

// Flags causal, windowN (a left window of N keys), varlen (the sequences packed, all of the
// given lengths), dvN (a value head dim of N; else head_dim).
std::unique_ptr<Op> make_flash_attention(const ProblemSpec& spec) {
    require_rank(spec, 6, kShape);
    FlashAttentionProblem p;
    p.batch = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.num_kv_heads = spec.shape[2];
    p.head_dim = spec.shape[3];
    p.seqlen_q = spec.shape[4];
    p.seqlen_k = spec.shape[5];
    p.dtype = parse_dtype(spec.dtype);
    for (const std::string& flag : split_flags(spec.flags)) {
        const long long window = flag_number(flag, "window").value_or(-1);
        const long long head_dim_v = flag_number(flag, "dv").value_or(-1);
        if (flag == "causal") p.causal = true;
        else if (flag == "varlen") p.varlen = true, p.total_q = p.batch * p.seqlen_q, p.total_k = p.batch * p.seqlen_k;
        else if (window >= 0) p.window_left = window;
        else if (head_dim_v > 0) p.head_dim_v = head_dim_v;
        else throw InvalidArgument(
            fmt::format("tileops: flag '{}' does not apply to flash_attention (causal, windowN, varlen, dvN)", flag));
    }
    return std::make_unique<FlashAttention>(p);
}

// The common head dims and ones that are not multiples of 64 (80, and DeepSeek's 192 for Q/K with
// 128 for V), each dtype, causal or not, a window, varlen (the whole search space has its own
// compile test).
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (DType dtype : {DType::fp16, DType::bf16})
        for (auto [head_dim, head_dim_v] : {std::pair<int64_t, int64_t>{64, 64}, {80, 80}, {128, 128}, {192, 128}, {256, 256}})
            for (int variant = 0; variant < 3; ++variant) {
                FlashAttentionProblem p;
                p.batch = 2, p.num_heads = 16, p.num_kv_heads = 4, p.head_dim = head_dim, p.head_dim_v = head_dim_v;
                p.dtype = dtype;
                p.seqlen_q = p.seqlen_k = 4096;
                p.causal = variant >= 1;
                if (variant == 2) p.window_left = 512, p.varlen = true, p.total_q = p.total_k = 8192;
                ops.push_back(std::make_unique<FlashAttention>(p));
            }
    return ops;
}

}  // namespace

OpFamily flash_attention_family() {
    return {"flash_attention", {{"flash_attention", kShape, "causal, windowN, varlen, dvN", make_flash_attention}},
            representative_ops};
}

}  // namespace tileops::detail
