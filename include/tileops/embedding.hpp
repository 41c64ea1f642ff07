// Token embedding: rows of a [vocab, hidden] table gathered by token id, with an optional learned
// position embedding added (GPT-2).
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct EmbeddingProblem {
    int64_t num_tokens = 0;          // rows of the output
    int64_t vocab_size = 0;          // rows of the table
    int64_t hidden = 0;              // columns of the table and the output
    DType dtype = DType::bf16;       // the tables: fp32, fp16 or bf16
    std::optional<DType> out_dtype = std::nullopt;  // default: dtype
    // Add a learned position embedding: y[t] = table[ids[t]] + position_table[positions[t]].
    bool positions = false;
    int64_t max_positions = 0;       // rows of the position table (with positions)
    int64_t table_stride = 0;        // elements between rows of both tables; 0: hidden
    int64_t out_stride = 0;          // 0: hidden
};

// y[t, :] = table[ids[t], :] (+ position_table[positions[t], :]), summed in fp32.
// Operands of run(): inputs: {ids, table} or, with positions, {ids, table, positions,
// position_table}; ids and positions are int32 device arrays of num_tokens; outputs: {y}.
// Ids live on the device, so the host cannot check them: an id outside [0, vocab_size) (or a
// position outside [0, max_positions)) is never read; it contributes zeros to its row.
class TILEOPS_EXPORT Embedding : public Op {
public:
    explicit Embedding(const EmbeddingProblem& problem);
    // The problem as normalized (defaults filled in).
    const EmbeddingProblem& problem() const noexcept { return *problem_; }

private:
    const EmbeddingProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
