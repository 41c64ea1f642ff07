// Builds an op from a textual problem description: what tileops-tune reads from its command line,
// from workload files and from tuning database keys ("rmsnorm", {8192, 4096}, "bf16", "residual").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tileops/op.hpp"

namespace tileops::detail {

struct ProblemSpec {
    std::string op;                // rmsnorm, layernorm, softmax, log_softmax, gelu, gelu_tanh, silu, silu_mul, add, mul,
                                   // decode_attention, gemm, flash_attention, mla_decode
    std::vector<long long> shape;  // {rows, cols}; decode_attention: {batch, heads, kv_heads, head_dim, q_len, max_kv_len};
                                   // gemm: {m, n, k} or {batch, m, n, k};
                                   // flash_attention: {batch, heads, kv_heads, head_dim, seqlen_q, seqlen_k};
                                   // mla_decode: {batch, heads, q_len, max_kv_len}
    std::string dtype;             // "bf16" or "bf16->fp32"
    std::string flags;             // "" or a comma-separated list: residual, broadcast_b; decode_attention: pageN;
                                   // gemm: nt, beta, bias, gelu, silu; flash_attention: causal, windowN, varlen;
                                   // mla_decode: pageN
};

// Throws InvalidArgument naming what is wrong (unknown op, bad shape, bad dtype, unknown flag).
std::unique_ptr<Op> make_op(const ProblemSpec& spec);

// Every op name make_op accepts.
const std::vector<std::string>& known_ops();

// "8192x4096" -> {8192, 4096}; throws InvalidArgument on anything else.
std::vector<long long> parse_shape(const std::string& text);

}  // namespace tileops::detail
