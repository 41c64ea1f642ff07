// Sampling the next token from logits: greedy, or with temperature, top-k, top-p and min-p per
// row, reproducible from a seed and a per-row offset, without sorting the vocabulary.
#pragma once

#include <cstdint>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct SamplingProblem {
    int64_t batch = 1;               // rows of logits, one token sampled from each
    int64_t vocab_size = 0;          // logits a row
    DType dtype = DType::fp32;       // the logits: fp32, fp16 or bf16
    int64_t logits_stride = 0;       // elements between rows; 0: vocab_size
    bool greedy = false;             // argmax only: no parameters, no randomness
    uint64_t seed = 0;               // the random stream's key (with greedy = false)
};

// Per row r, with p = softmax(logits[r] / temperature[r]):
//   A = the top_k[r] most probable tokens (ties with the k-th all kept) whose p >= min_p[r] x max p;
//   S = the most probable tokens of A, from the top, until they hold top_p[r] of A's mass (the
//       token that crosses it included, with any it ties with);
//   tokens[r] = a token of S drawn with probability p / p(S) (greedy: the first argmax).
// This is vLLM's order (min-p, then top-k and top-p on what remains). Probabilities are kept as
// integers of 2^-40 of the largest, so sums are exact and a draw depends only on the seed, the
// row's offset and its row index: the same run after run, inside a CUDA graph too. Tokens below
// 2^-40 of the most probable one are never drawn.
//
// Operands of run(): inputs {logits} (greedy) or {logits, temperature, top_k, top_p, min_p,
// offsets}: logits [batch, vocab_size]; temperature, top_p, min_p fp32 [batch]; top_k, offsets
// int32 [batch], on the device. outputs {tokens}: int32 [batch].
// Parameters are read on the device, so the host cannot check them; they mean: temperature <= 0
// or NaN, or top_k == 1: greedy; top_k <= 0 or >= vocab_size: no top-k; top_p >= 1 or NaN: no
// top-p (<= 0 keeps the most probable token); min_p <= 0 or NaN: no min-p (above 1: 1). A row's
// offset picks its draw: advance it every step (e.g. the number of tokens generated so far).
// NaN logits are never drawn; a row with no finite logit gives its first argmax (token 0).
class TILEOPS_EXPORT Sampling : public Op {
public:
    explicit Sampling(const SamplingProblem& problem);
    // The problem as normalized (defaults filled in).
    const SamplingProblem& problem() const noexcept { return *problem_; }

private:
    const SamplingProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
