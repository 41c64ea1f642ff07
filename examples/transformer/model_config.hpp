// A decoder's architecture as a model's config.json gives it (Hugging Face names): Llama 3
// ("model_type": "llama") and GPT-2 ("model_type": "gpt2"), checked on the way in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tileops/rope.hpp"
#include "tileops/tensor.hpp"

namespace transformer {

enum class Architecture { llama, gpt2 };

// The MLP's activation: Llama's SwiGLU gate (silu), GPT-2's "gelu_new" (tanh form) or exact GELU.
enum class Activation { silu, gelu, gelu_tanh };

struct ModelConfig {
    Architecture architecture = Architecture::llama;
    int64_t hidden = 0;
    int64_t layers = 0;
    int64_t heads = 0;
    int64_t kv_heads = 0;            // GPT-2: heads
    int64_t head_dim = 0;            // hidden / heads
    int64_t intermediate = 0;        // the MLP's inner width (GPT-2's n_inner, default 4 x hidden)
    int64_t vocab = 0;
    int64_t max_positions = 0;       // GPT-2's learned position table; Llama's trained context
    double norm_eps = 1e-5;          // RMSNorm (Llama) or LayerNorm (GPT-2)
    double rope_theta = 10000.0;     // Llama
    tileops::RopeScaling rope_scaling;
    bool tie_word_embeddings = false;  // the LM head is the embedding table (GPT-2 always)
    Activation activation = Activation::silu;
    std::vector<int32_t> eos_token_ids;  // eos_token_id (one or a list); empty when not given
};

// Parses and checks a config.json; throws std::invalid_argument naming `source` and the field.
ModelConfig parse_model_config(std::string_view json_text, const std::string& source);
ModelConfig load_model_config(const std::string& path);

// Constructs the library's attention and rotation ops for the model's head shapes and rope (what
// transformer_run's Decoder::check also does, here without the sizes of a run), so a model they
// refuse is refused up front; throws std::invalid_argument naming `source`. No GPU needed.
void check_model_ops(const ModelConfig& config, tileops::DType dtype, const std::string& source);

// A weight the architecture needs: its name in the checkpoint and its shape.
struct WeightSpec {
    std::string name;
    std::vector<int64_t> shape;
};
// Every weight of the model, in the checkpoint's naming (Hugging Face's).
std::vector<WeightSpec> required_weights(const ModelConfig& config);

}  // namespace transformer
