// A model's weights on the device, in the layout the forward pass reads: one allocation, each
// matrix in the checkpoint's orientation, Llama's q/k/v and gate/up projections stacked so that
// one GEMM computes each pair.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_memory.hpp"
#include "model_config.hpp"
#include "tileops/tensor.hpp"

namespace transformer {

class Checkpoint;

// Device pointers of one layer; a bias is null where the architecture has none (Llama).
struct LayerWeights {
    const void* norm1 = nullptr;      // input_layernorm / ln_1 [hidden]
    const void* norm1_bias = nullptr;
    // Llama: q_proj, k_proj and v_proj stacked, [(heads + 2 kv_heads) head_dim, hidden] (D = x W^T).
    // GPT-2: c_attn [hidden, 3 hidden] (D = x W).
    const void* qkv = nullptr;
    const void* qkv_bias = nullptr;
    const void* out = nullptr;        // o_proj [hidden, heads head_dim] / c_proj [hidden, hidden]
    const void* out_bias = nullptr;
    const void* norm2 = nullptr;      // post_attention_layernorm / ln_2 [hidden]
    const void* norm2_bias = nullptr;
    // Llama: gate_proj and up_proj stacked, [2 intermediate, hidden]; GPT-2: c_fc [hidden, intermediate].
    const void* up = nullptr;
    const void* up_bias = nullptr;
    const void* down = nullptr;       // down_proj [hidden, intermediate] / c_proj [intermediate, hidden]
    const void* down_bias = nullptr;
};

class ModelWeights {
public:
    // Every weight the config needs from `checkpoint` (checked by name and shape first), converted
    // to `dtype` (bf16 or fp16) on the host.
    static ModelWeights load(const ModelConfig& config, const Checkpoint& checkpoint, tileops::DType dtype);
    // Seeded random weights for speed measurements: matrices uniform with standard deviation
    // `std` (GPT-2's initialisation scale), norm weights 1, biases 0.
    static ModelWeights random(const ModelConfig& config, tileops::DType dtype, uint64_t seed, double std = 0.02);

    tileops::DType dtype() const noexcept { return dtype_; }
    size_t bytes() const noexcept { return memory_.size(); }

    const void* embedding = nullptr;   // [vocab, hidden]
    const void* positions = nullptr;   // GPT-2's learned positions [max_positions, hidden]
    const void* final_norm = nullptr;  // [hidden]
    const void* final_norm_bias = nullptr;
    const void* lm_head = nullptr;     // [vocab, hidden] (the embedding when tied)
    std::vector<LayerWeights> layers;

private:
    tileops::DType dtype_ = tileops::DType::bf16;
    DeviceMemory memory_;
};

}  // namespace transformer
