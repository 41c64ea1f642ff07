// Mixture-of-experts routing: the router's top-k (MoeTopK), the tokens' rows gathered in expert
// order for a grouped GEMM (MoePermute), and the experts' outputs weighted back into token order
// (MoeUnpermute). Everything stays on the device: no host sync, CUDA-graph safe.
#pragma once

#include <cstdint>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

// Limits of the three ops: experts in [1, kMoeMaxExperts], k in [1, kMoeMaxK] (and k <= experts for
// the top-k); anything beyond is refused with InvalidArgument.
inline constexpr int64_t kMoeMaxExperts = 512;
inline constexpr int64_t kMoeMaxK = 32;

// How router logits become scores.
enum class MoeScoring {
    softmax,  // over the row's experts (Mixtral, Qwen3-MoE)
    sigmoid,  // each expert on its own (DeepSeek-V3)
};

// "softmax", "sigmoid".
TILEOPS_EXPORT const char* moe_scoring_name(MoeScoring scoring) noexcept;

struct MoeTopKProblem {
    int64_t tokens = 0;
    int64_t experts = 0;                  // logits a row: 1-512
    int64_t k = 0;                        // experts chosen a token: 1-32, at most `experts`
    DType dtype = DType::bf16;            // the logits: fp32, fp16 or bf16
    MoeScoring scoring = MoeScoring::softmax;
    bool renormalize = false;             // the chosen weights divided by their sum
    float routed_scaling_factor = 1.0f;   // every weight multiplied by it (after renormalize); finite
    // DeepSeek-V3's grouped choice: experts split into n_group equal groups (experts a multiple of
    // n_group, at least 2 a group, n_group <= 32); a group's score is the sum of its two best
    // scores; only the experts of the topk_group best groups are chosen from. n_group = 1: none.
    int64_t n_group = 1;
    int64_t topk_group = 1;
    // sigmoid only: an fp32 [experts] input added to the scores for choosing (experts and groups),
    // not to the weights (DeepSeek-V3's e_score_correction_bias).
    bool correction_bias = false;
    int64_t logits_stride = 0;            // elements between rows of logits; 0: experts
};

// Per token t, with s[e] = softmax(logits[t])[e] or sigmoid(logits[t, e]) computed in fp32:
//   choice[e] = logits[t, e] (the order of s, without the ties rounding s would make), or
//               s[e] + correction_bias[e] in fp32 with a correction bias;
//   grouped: group g scores the sum of the two largest s[e] (+ bias) of its experts; the
//            topk_group best groups are kept (ties: the lower group index);
//   topk_ids[t, :] = the k experts (of the kept groups) of largest choice, in descending order of
//            choice; of equal choices the lower expert index comes first. Deterministic.
//   topk_weights[t, j] = s[id] (softmax: of all experts), divided by the sum of the k chosen s
//            (plus 1e-20, so that k zeros give zeros) when renormalize, times
//            routed_scaling_factor.
// The ids of a token are distinct and in [0, experts). Logits must be finite: a NaN is chosen last
// (as -inf) and its weight, like every weight of a row holding an infinity, is unspecified.
//
// Operands of run(): inputs {logits} or {logits, correction_bias}: logits [tokens, experts] with
// row stride logits_stride, correction_bias fp32 [experts]; outputs {topk_weights, topk_ids}:
// fp32 [tokens, k] and int32 [tokens, k], contiguous.
class TILEOPS_EXPORT MoeTopK : public Op {
public:
    explicit MoeTopK(const MoeTopKProblem& problem);
    const MoeTopKProblem& problem() const noexcept { return *problem_; }

private:
    const MoeTopKProblem* problem_ = nullptr;  // the model's
};

// Where MoePermute puts an expert's rows.
enum class MoeLayout {
    // x_perm [tokens * k, hidden]: expert e's rows are rows [expert_offsets[e], expert_offsets[e + 1]).
    contiguous,
    // x_masked [experts, capacity, hidden]: expert e's rows are x_masked[e, 0 : expert_counts[e]].
    masked,
};

// "contiguous", "masked".
TILEOPS_EXPORT const char* moe_layout_name(MoeLayout layout) noexcept;

struct MoePermuteProblem {
    int64_t tokens = 0;
    int64_t hidden = 0;
    int64_t experts = 0;             // 1-512
    int64_t k = 0;                   // 1-32: topk_ids is [tokens, k]
    DType dtype = DType::bf16;       // x and the permuted rows: bf16, fp16 or fp8_e4m3 (copied as is)
    MoeLayout layout = MoeLayout::contiguous;
    int64_t capacity = 0;            // masked: rows an expert holds (>= 1); unused when contiguous
    int64_t x_stride = 0;            // elements between rows of x; 0: hidden
    int64_t out_stride = 0;          // elements between permuted rows; 0: hidden
    // fp8 x only: the fp32 scales of each row, permuted along with it. 0: none; 1: one a token
    // (Quantize's per-token scales); ceil(hidden / 128): one per 128 elements (its 1 x 128 block
    // scales, which GemmFp8 and GemmFp8Grouped read).
    int64_t scale_blocks = 0;
    int64_t scales_stride = 0;       // elements between x_scales' blocks (Quantize's scale_stride); 0: tokens
};

// Gathers x's rows into expert order for a grouped GEMM. Entry (t, j) of topk_ids sends row t of
// x to expert topk_ids[t, j]; within an expert, entries keep their order in topk_ids read as one
// flat array (token order, then j): stable and deterministic.
//
// contiguous: x_perm [tokens * k, hidden] (row stride out_stride), expert e's rows at
//   [expert_offsets[e], expert_offsets[e + 1]); expert_offsets int32 [experts + 1] with
//   expert_offsets[0] = 0 and expert_offsets[experts] = the entries routed (tokens * k when every
//   id is valid), no padding; rows past expert_offsets[experts] are not written.
// masked: x_masked [experts, capacity, hidden] (row stride out_stride, expert stride
//   capacity x out_stride), expert e's first expert_counts[e] rows written, the rest untouched;
//   expert_counts int32 [experts] = min(entries routed to e, capacity): an entry past its
//   expert's capacity is dropped (row_map -1; the later entries in the order above are dropped).
// row_map int32 [tokens, k]: the permuted row of entry (t, j): a row of x_perm, or of x_masked
//   viewed as [experts * capacity, hidden] (e * capacity + r); -1 for a dropped entry. This is
//   what MoeUnpermute reads.
// An id outside [0, experts) routes nothing (row_map -1) and is never used as an address.
//
// Operands of run(): inputs {x, topk_ids} (x [tokens, hidden], x_stride; topk_ids int32 [tokens, k]
// contiguous); outputs {x_perm, expert_offsets, row_map} (contiguous) or {x_masked, expert_counts,
// row_map} (masked). With scale_blocks, also the input x_scales fp32 [scale_blocks, tokens]
// (row stride scales_stride) and the output perm_scales fp32 [scale_blocks, rows] (contiguous;
// rows: tokens * k, or experts * capacity), both block-major (a block's scales of consecutive rows
// adjacent) and plain vectors when scale_blocks is 1: perm_scales[b, row_map[t, j]] =
// x_scales[b, t], the rows no entry reaches untouched.
//
// Two kernels on the caller's stream: the first counts each expert's entries in groups of
// entries, ranks every entry within its group (stably), and its last CTA turns the counts into
// offsets (its workspace, a counter it resets, and each group's start in each expert); the second
// reads each x row once and writes it to its k rows. Runs of one op object on different streams
// must not overlap (the workspace).
class TILEOPS_EXPORT MoePermute : public Op {
public:
    explicit MoePermute(const MoePermuteProblem& problem);
    const MoePermuteProblem& problem() const noexcept { return *problem_; }

private:
    const MoePermuteProblem* problem_ = nullptr;  // the model's
};

struct MoeUnpermuteProblem {
    int64_t tokens = 0;
    int64_t hidden = 0;
    int64_t k = 0;                 // 1-32: row_map and topk_weights are [tokens, k]
    DType dtype = DType::bf16;     // y and out: bf16 or fp16
    // Rows y holds: 0 means tokens * k (MoePermute's contiguous layout); experts * capacity for
    // its masked layout ([experts, capacity, hidden] viewed as rows).
    int64_t y_rows = 0;
    bool accumulate = false;       // out += the sum (a residual add) instead of out = the sum
    int64_t y_stride = 0;          // elements between rows of y; 0: hidden
    int64_t out_stride = 0;        // elements between rows of out; 0: hidden
};

// out[t] (+)= sum over j of topk_weights[t, j] * y[row_map[t, j]], accumulated in fp32 (with out's
// old value first when accumulate), rounded once. Entries whose row_map is negative or >= y_rows
// are skipped (never read). Each y row is read by the entry that maps to it, so each once.
//
// Operands of run(): inputs {y, row_map, topk_weights} (y [y_rows, hidden], y_stride; row_map int32
// and topk_weights fp32 [tokens, k], contiguous); outputs {out} [tokens, hidden], out_stride.
class TILEOPS_EXPORT MoeUnpermute : public Op {
public:
    explicit MoeUnpermute(const MoeUnpermuteProblem& problem);
    const MoeUnpermuteProblem& problem() const noexcept { return *problem_; }

private:
    const MoeUnpermuteProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
