// Rotary position embedding (RoPE) of queries and keys, optionally fused with appending the rotated
// keys and the values to a KV cache (paged or contiguous, 16-bit or fp8 e4m3): the step between
// the QKV projection and attention, for prefill (tokens of many sequences, flattened) and decode.
#pragma once

#include <optional>
#include <vector>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

// Which elements of a head form the rotated pairs.
enum class RopeStyle : int {
    neox = 0,  // element i with i + rotary_dim / 2 (Llama and NeoX in Hugging Face: rotate_half)
    gptj = 1,  // element 2i with 2i + 1 (GPT-J, the original interleaved layout)
    none = 2,  // no rotation: q and k are copied and k and v appended (learned positions, GPT-2)
};

// How the frequencies theta^(-2i / rotary_dim) are stretched for contexts longer than training.
struct RopeScaling {
    enum class Type : int { none = 0, linear = 1, llama3 = 2 } type = Type::none;
    double factor = 1.0;                   // linear and llama3: frequencies divided by it
    // llama3 only: wavelengths above original_max_positions / low_freq_factor are divided by
    // factor, those below original_max_positions / high_freq_factor kept, those between blended.
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    double original_max_positions = 8192;  // the context length of pre-training
    // Llama 3.1's values (config.json's rope_scaling: factor 8, low 1, high 4, original 8192).
    static RopeScaling llama3(double factor = 8.0, double low = 1.0, double high = 4.0, double original = 8192) {
        return {Type::llama3, factor, low, high, original};
    }
};

struct RopeProblem {
    int64_t num_tokens = 1;          // tokens of all sequences, flattened (a decode step: the batch)
    int64_t num_heads = 32;          // query heads
    int64_t num_kv_heads = 8;        // key (and value) heads
    int64_t head_dim = 128;          // even, at most 512
    int64_t rotary_dim = 0;          // the leading elements of a head that rotate (even); 0: head_dim
                                     // (style none: must stay 0, and nothing rotates)
    RopeStyle style = RopeStyle::neox;
    double theta = 10000.0;          // the base of the frequencies (Llama 3: 500000)
    RopeScaling scaling;
    DType dtype = DType::bf16;       // q, k, v and the rotated outputs: fp32, fp16 or bf16

    // Elements between tokens (rows) of each operand; heads are contiguous within a token, head_dim
    // apart. 0: packed (heads x head_dim). A fused QKV projection's output [tokens, (H + 2 Hkv) d]
    // is q, k and v at offsets 0, H d and (H + Hkv) d with strides of (H + 2 Hkv) d.
    int64_t q_stride = 0, k_stride = 0, v_stride = 0;
    int64_t q_out_stride = 0, k_out_stride = 0;

    // Append the rotated keys and the values of each token to a KV cache of layout
    // [num_pages, page_size, num_kv_heads, head_dim]: token t goes to page slots[t] / page_size,
    // row slots[t] % page_size. A contiguous cache [batch, max_len, kv_heads, head_dim] is the
    // same with page_size = max_len and slot = sequence * max_len + position.
    bool append_kv = false;
    int64_t page_size = 0;           // with append_kv: >= 1
    int64_t num_pages = 0;           // with append_kv: >= 1; num_pages x page_size < 2^31
    std::optional<DType> kv_dtype = std::nullopt;  // the cache's dtype: dtype (default) or fp8_e4m3
    // fp8_e4m3 cache: an element is stored as the code nearest to value x (1 / scale), saturated
    // at +-448: the per-tensor scales DecodeAttention reads the cache with.
    float k_scale = 1.0f, v_scale = 1.0f;
    // The cache's strides in elements (head_dim is contiguous); 0: packed.
    int64_t cache_page_stride = 0, cache_token_stride = 0, cache_head_stride = 0;
};

// For each token t, query head and key head x (head_dim elements, rotary_dim of them rotated):
//   (x_a, x_b) <- (x_a cos(a) - x_b sin(a), x_b cos(a) + x_a sin(a)),  a = positions[t] * inv_freq[i]
// for the style's pairs (a, b) = (i, i + rotary_dim / 2) or (2i, 2i + 1). As in Hugging Face, the
// angle is float(position) times the fp32 frequency, rounded to fp32; the rest is computed in fp32
// and rounded once. Elements past rotary_dim are copied unchanged.
//
// Operands of run(): inputs {q, k, positions} or, with append_kv, {q, k, v, positions, slots};
// q: [num_tokens, num_heads, head_dim], k and v: [num_tokens, num_kv_heads, head_dim]; positions
// and slots: int32 [num_tokens] on the device. Outputs {q_out, k_out} or, with append_kv,
// {q_out, k_out, k_cache, v_cache}. q_out may be q and k_out may be k (in place).
// Slots live on the device, so the host cannot check them: a token whose slot is negative (padding)
// or not below num_pages x page_size is not appended; the cache is never written out of bounds.
// Slots of different tokens must differ (two writes to one row race).
class TILEOPS_EXPORT Rope : public Op {
public:
    explicit Rope(const RopeProblem& problem);
    // The problem as normalized (defaults filled in).
    const RopeProblem& problem() const noexcept { return *problem_; }
    // The rotation frequencies inv_freq[i], i < rotary_dim / 2, in fp32, scaling applied.
    std::vector<float> frequencies() const;

private:
    const RopeProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
