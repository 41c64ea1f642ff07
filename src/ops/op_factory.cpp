#include "ops/op_factory.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/tileops.hpp"

namespace tileops::detail {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> parts;
    std::stringstream stream(text);
    std::string part;
    while (std::getline(stream, part, separator))
        if (!part.empty()) parts.push_back(part);
    return parts;
}

// The number after `prefix` in a flag like "page16" or "window128"; nullopt when the flag is not
// the prefix followed by a number.
std::optional<long long> flag_number(const std::string& flag, const std::string& prefix) {
    if (flag.size() <= prefix.size() || flag.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    try {
        return std::stoll(flag.substr(prefix.size()));
    } catch (...) {
        return std::nullopt;
    }
}

struct DTypes {
    DType in, out;
};

DTypes parse_dtypes(const std::string& text) {
    auto arrow = text.find("->");
    if (arrow == std::string::npos) {
        DType d = parse_dtype(text);
        return {d, d};
    }
    return {parse_dtype(text.substr(0, arrow)), parse_dtype(text.substr(arrow + 2))};
}

}  // namespace

const std::vector<std::string>& known_ops() {
    static const std::vector<std::string> ops = {"rmsnorm", "layernorm", "softmax", "log_softmax", "gelu",
                                                 "gelu_tanh", "silu", "silu_mul", "add", "mul", "decode_attention", "gemm",
                                                 "flash_attention", "mla_decode"};
    return ops;
}

std::vector<long long> parse_shape(const std::string& text) {
    std::vector<long long> shape;
    for (const std::string& part : split(text, 'x')) {
        size_t used = 0;
        long long value = 0;
        try {
            value = std::stoll(part, &used);
        } catch (...) {
            used = 0;
        }
        if (used != part.size() || value < 1)
            throw InvalidArgument(fmt::format("tileops: shape '{}' is not like 8192x4096 (positive integers)", text));
        shape.push_back(value);
    }
    if (shape.empty()) throw InvalidArgument(fmt::format("tileops: shape '{}' is empty", text));
    return shape;
}

namespace {

// gemm: shape MxNxK or BxMxNxK; flags nt (B is N x K), beta (C is read, beta = 1), bias, gelu or silu.
std::unique_ptr<Op> make_gemm(const ProblemSpec& spec) {
    if (spec.shape.size() != 3 && spec.shape.size() != 4)
        throw InvalidArgument(fmt::format("tileops: gemm needs a shape MxNxK or BxMxNxK, got {} dimension(s)", spec.shape.size()));
    const DTypes dtypes = parse_dtypes(spec.dtype);
    const size_t first = spec.shape.size() - 3;
    GemmProblem problem;
    problem.batch = first == 1 ? spec.shape[0] : 1;
    problem.m = spec.shape[first];
    problem.n = spec.shape[first + 1];
    problem.k = spec.shape[first + 2];
    problem.dtype = dtypes.in;
    problem.out_dtype = dtypes.out;
    for (const std::string& flag : split(spec.flags, ',')) {
        if (flag == "nt") problem.layout = GemmLayout::nt;
        else if (flag == "beta") problem.has_c = true, problem.beta = 1.0f;
        else if (flag == "bias") problem.bias = true;
        else if (flag == "gelu" && problem.epilogue == GemmEpilogue::none) problem.epilogue = GemmEpilogue::gelu;
        else if (flag == "silu" && problem.epilogue == GemmEpilogue::none) problem.epilogue = GemmEpilogue::silu;
        else throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to gemm (nt, beta, bias, gelu or silu; one activation)", flag));
    }
    return std::make_unique<Gemm>(problem);
}

// A paged cache from the flags of a decode problem: pageN (N-token pages, a page pool of exactly
// batch x pages per sequence) is the only flag those ops take.
struct PagedCache {
    long long page_size = 0, max_pages_per_seq = 0, num_pages = 0;
};
PagedCache paged_cache(const ProblemSpec& spec, long long batch, long long max_kv_len) {
    PagedCache cache;
    for (const std::string& flag : split(spec.flags, ',')) {
        const long long page = flag_number(flag, "page").value_or(0);
        if (page <= 0) throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to {} (pageN)", flag, spec.op));
        cache.page_size = page;
        cache.max_pages_per_seq = (max_kv_len + page - 1) / page;
        cache.num_pages = batch * cache.max_pages_per_seq;
    }
    return cache;
}

}  // namespace

// decode_attention: shape batch x heads x kv_heads x head_dim x q_len x max_kv_len; flags pageN
// for a paged KV cache of N-token pages (a page pool of exactly batch x pages per sequence) and
// kv_fp8 for an fp8 e4m3 cache.
std::unique_ptr<Op> make_decode_attention(const ProblemSpec& spec) {
    if (spec.shape.size() != 6)
        throw InvalidArgument(fmt::format(
            "tileops: decode_attention needs a shape batch x heads x kv_heads x head_dim x q_len x max_kv_len, got {} "
            "dimension(s)", spec.shape.size()));
    DecodeAttentionProblem p;
    p.batch = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.num_kv_heads = spec.shape[2];
    p.head_dim = spec.shape[3];
    p.q_len = spec.shape[4];
    p.max_kv_len = spec.shape[5];
    p.dtype = parse_dtype(spec.dtype);
    ProblemSpec cache_spec = spec;  // the flags paged_cache reads: all but kv_fp8
    std::vector<std::string> flags = split(spec.flags, ',');
    if (const auto fp8 = std::find(flags.begin(), flags.end(), "kv_fp8"); fp8 != flags.end()) {
        p.kv_dtype = DType::fp8_e4m3;
        flags.erase(fp8);
    }
    cache_spec.flags = fmt::format("{}", fmt::join(flags, ","));
    const PagedCache cache = paged_cache(cache_spec, p.batch, p.max_kv_len);
    p.page_size = cache.page_size, p.max_pages_per_seq = cache.max_pages_per_seq, p.num_pages = cache.num_pages;
    return std::make_unique<DecodeAttention>(p);
}

// flash_attention: shape batch x heads x kv_heads x head_dim x seqlen_q x seqlen_k; flags causal,
// windowN (a left window of N keys), varlen (the sequences packed, all of the given lengths).
std::unique_ptr<Op> make_flash_attention(const ProblemSpec& spec) {
    if (spec.shape.size() != 6)
        throw InvalidArgument(fmt::format(
            "tileops: flash_attention needs a shape batch x heads x kv_heads x head_dim x seqlen_q x seqlen_k, got {} "
            "dimension(s)", spec.shape.size()));
    FlashAttentionProblem p;
    p.batch = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.num_kv_heads = spec.shape[2];
    p.head_dim = spec.shape[3];
    p.seqlen_q = spec.shape[4];
    p.seqlen_k = spec.shape[5];
    p.dtype = parse_dtype(spec.dtype);
    for (const std::string& flag : split(spec.flags, ',')) {
        const long long window = flag_number(flag, "window").value_or(-1);
        if (flag == "causal") p.causal = true;
        else if (flag == "varlen") p.varlen = true, p.total_q = p.batch * p.seqlen_q, p.total_k = p.batch * p.seqlen_k;
        else if (window >= 0) p.window_left = window;
        else throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to flash_attention (causal, windowN, varlen)", flag));
    }
    return std::make_unique<FlashAttention>(p);
}

// mla_decode: shape batch x heads x q_len x max_kv_len; flag pageN for a paged cache of N-token
// pages (a page pool of exactly batch x pages per sequence).
std::unique_ptr<Op> make_mla_decode(const ProblemSpec& spec) {
    if (spec.shape.size() != 4)
        throw InvalidArgument(fmt::format(
            "tileops: mla_decode needs a shape batch x heads x q_len x max_kv_len, got {} dimension(s)", spec.shape.size()));
    MlaDecodeProblem p;
    p.batch = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.q_len = spec.shape[2];
    p.max_kv_len = spec.shape[3];
    p.dtype = parse_dtype(spec.dtype);
    const PagedCache cache = paged_cache(spec, p.batch, p.max_kv_len);
    p.page_size = cache.page_size, p.max_pages_per_seq = cache.max_pages_per_seq, p.num_pages = cache.num_pages;
    return std::make_unique<MlaDecode>(p);
}

std::unique_ptr<Op> make_op(const ProblemSpec& spec) {
    if (std::find(known_ops().begin(), known_ops().end(), spec.op) == known_ops().end())
        throw InvalidArgument(fmt::format("tileops: unknown op '{}' (known: {})", spec.op, fmt::join(known_ops(), ", ")));
    if (spec.op == "decode_attention") return make_decode_attention(spec);
    if (spec.op == "gemm") return make_gemm(spec);
    if (spec.op == "flash_attention") return make_flash_attention(spec);
    if (spec.op == "mla_decode") return make_mla_decode(spec);
    if (spec.shape.size() != 2)
        throw InvalidArgument(fmt::format("tileops: {} needs a shape rows x cols, got {} dimension(s)", spec.op,
                                          spec.shape.size()));
    const DTypes dtypes = parse_dtypes(spec.dtype);
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    bool residual = false, broadcast_b = false;
    for (const std::string& flag : split(spec.flags, ',')) {
        if (flag == "residual" && spec.op == "rmsnorm") residual = true;
        else if (flag == "broadcast_b" && (spec.op == "add" || spec.op == "mul")) broadcast_b = true;
        else throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to {}", flag, spec.op));
    }
    if (spec.op == "rmsnorm") return std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtypes.in, dtypes.out, 1e-6f, residual});
    if (spec.op == "layernorm") return std::make_unique<LayerNorm>(LayerNormProblem{rows, cols, dtypes.in, dtypes.out});
    if (spec.op == "softmax" || spec.op == "log_softmax")
        return std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtypes.in, dtypes.out, spec.op == "log_softmax"});
    ElementwiseOp kind = ElementwiseOp::gelu;
    for (int k = 0; k <= 5; ++k)
        if (spec.op == elementwise_op_name(static_cast<ElementwiseOp>(k))) kind = static_cast<ElementwiseOp>(k);
    ElementwiseProblem problem{kind, rows, cols, dtypes.in, dtypes.out};
    problem.broadcast_b = broadcast_b;
    return std::make_unique<Elementwise>(problem);
}

}  // namespace tileops::detail
