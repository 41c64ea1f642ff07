// The embedding family: token ids to rows of a table, with learned positions added (GPT-2).
// Kernels: kernel_templates/embedding/.
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/embedding.hpp"
#include "tileops/error.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "tokens x vocab x hidden";

// Flag positionsN: a learned position embedding of N rows is added.
std::unique_ptr<Op> make_embedding(const ProblemSpec& spec) {
    require_rank(spec, 3, kShape);
    const DTypePair dtypes = parse_dtype_pair(spec.dtype);
    EmbeddingProblem p;
    p.num_tokens = spec.shape[0];
    p.vocab_size = spec.shape[1];
    p.hidden = spec.shape[2];
    p.dtype = dtypes.in;
    p.out_dtype = dtypes.out;
    for (const std::string& flag : split_flags(spec.flags)) {
        const long long positions = flag_number(flag, "positions").value_or(0);
        if (positions <= 0)
            throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to embedding (positionsN)", flag));
        p.positions = true;
        p.max_positions = positions;
    }
    return std::make_unique<Embedding>(p);
}

// Each dtype, a decode step and a prefill, an odd hidden size (narrow vectors), GPT-2's positions.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16})
        for (int64_t tokens : {1, 8192})
            ops.push_back(std::make_unique<Embedding>(EmbeddingProblem{tokens, 128256, 4096, dtype}));
    ops.push_back(std::make_unique<Embedding>(EmbeddingProblem{77, 1000, 771, DType::bf16}));
    EmbeddingProblem gpt2{512, 50257, 768, DType::fp32};
    gpt2.positions = true, gpt2.max_positions = 1024;
    ops.push_back(std::make_unique<Embedding>(gpt2));
    return ops;
}

}  // namespace

OpFamily embedding_family() {
    return {"embedding", {{"embedding", kShape, "positionsN (a learned position table of N rows)", make_embedding}},
            representative_ops};
}

}  // namespace tileops::detail
