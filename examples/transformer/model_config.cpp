#include "model_config.hpp"

#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "read_bounded.hpp"

namespace transformer {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
    throw std::invalid_argument(fmt::format("{}: {}", source, what));
}

// An integer field in [low, high]; `fallback` when absent and allowed to be.
int64_t integer(const json& root, const char* key, const std::string& source, int64_t low, int64_t high,
                const int64_t* fallback = nullptr) {
    const auto it = root.find(key);
    if (it == root.end() || it->is_null()) {
        if (fallback != nullptr) return *fallback;
        refuse(source, fmt::format("'{}' is missing", key));
    }
    if (!it->is_number_integer()) refuse(source, fmt::format("'{}' must be an integer, got {}", key, it->dump()));
    const int64_t value = it->get<int64_t>();
    if (value < low || value > high) refuse(source, fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, value));
    return value;
}

double real(const json& root, const char* key, const std::string& source, double fallback, bool positive = true) {
    const auto it = root.find(key);
    if (it == root.end() || it->is_null()) return fallback;
    if (!it->is_number()) refuse(source, fmt::format("'{}' must be a number, got {}", key, it->dump()));
    const double value = it->get<double>();
    if (!(value > 0.0) && positive) refuse(source, fmt::format("'{}' must be > 0, got {}", key, it->dump()));
    return value;
}

constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = std::numeric_limits<int32_t>::max();

void parse_llama(const json& root, const std::string& source, ModelConfig& c) {
    c.hidden = integer(root, "hidden_size", source, 1, kMaxDim);
    c.layers = integer(root, "num_hidden_layers", source, 1, 4096);
    c.heads = integer(root, "num_attention_heads", source, 1, 4096);
    c.kv_heads = integer(root, "num_key_value_heads", source, 1, c.heads, &c.heads);
    c.intermediate = integer(root, "intermediate_size", source, 1, kMaxDim);
    c.vocab = integer(root, "vocab_size", source, 1, kMaxVocab);
    const int64_t default_positions = 8192;
    c.max_positions = integer(root, "max_position_embeddings", source, 1, kMaxVocab, &default_positions);
    c.norm_eps = real(root, "rms_norm_eps", source, 1e-5);
    c.rope_theta = real(root, "rope_theta", source, 10000.0);
    if (const auto tie = root.find("tie_word_embeddings"); tie != root.end() && !tie->is_null()) {
        if (!tie->is_boolean()) refuse(source, "'tie_word_embeddings' must be true or false");
        c.tie_word_embeddings = tie->get<bool>();
    }
    if (const auto act = root.find("hidden_act"); act != root.end() && !act->is_null() && *act != "silu")
        refuse(source, fmt::format("hidden_act {} is not supported (silu)", act->dump()));
    if (root.contains("head_dim") && !root["head_dim"].is_null()) {
        const int64_t head_dim = integer(root, "head_dim", source, 2, 512);
        if (head_dim * c.heads != c.hidden)
            refuse(source, fmt::format("head_dim ({}) x num_attention_heads ({}) must be hidden_size ({})", head_dim,
                                       c.heads, c.hidden));
    }
    if (c.heads % c.kv_heads != 0)
        refuse(source, fmt::format("num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", c.heads,
                                   c.kv_heads));
    const auto scaling = root.find("rope_scaling");
    if (scaling == root.end() || scaling->is_null()) return;
    if (!scaling->is_object()) refuse(source, "'rope_scaling' must be an object or null");
    const std::string where = source + ": rope_scaling";
    std::string type;
    for (const char* key : {"rope_type", "type"})
        if (scaling->contains(key) && (*scaling)[key].is_string()) type = (*scaling)[key].get<std::string>();
    if (type == "llama3") {
        c.rope_scaling = tileops::RopeScaling::llama3(
            real(*scaling, "factor", where, 8.0), real(*scaling, "low_freq_factor", where, 1.0),
            real(*scaling, "high_freq_factor", where, 4.0),
            real(*scaling, "original_max_position_embeddings", where, 8192.0));
    } else if (type == "linear") {
        c.rope_scaling = {tileops::RopeScaling::Type::linear, real(*scaling, "factor", where, 1.0)};
    } else {
        refuse(source, fmt::format("rope_scaling type '{}' is not supported (llama3, linear)", type));
    }
}

void parse_gpt2(const json& root, const std::string& source, ModelConfig& c) {
    c.hidden = integer(root, "n_embd", source, 1, kMaxDim);
    c.layers = integer(root, "n_layer", source, 1, 4096);
    c.heads = integer(root, "n_head", source, 1, 4096);
    c.kv_heads = c.heads;
    const int64_t four_hidden = 4 * c.hidden;
    c.intermediate = integer(root, "n_inner", source, 1, kMaxDim, &four_hidden);
    c.vocab = integer(root, "vocab_size", source, 1, kMaxVocab);
    c.max_positions = integer(root, "n_positions", source, 1, 1 << 20);
    c.norm_eps = real(root, "layer_norm_epsilon", source, 1e-5);
    c.tie_word_embeddings = true;
    c.activation = Activation::gelu_tanh;  // "gelu_new", GPT-2's default
    if (const auto act = root.find("activation_function"); act != root.end() && !act->is_null()) {
        if (*act == "gelu") {
            c.activation = Activation::gelu;
        } else if (*act != "gelu_new" && *act != "gelu_pytorch_tanh" && *act != "gelu_fast") {
            refuse(source, fmt::format("activation_function {} is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)",
                                       act->dump()));
        }
    }
}

}  // namespace

ModelConfig parse_model_config(std::string_view json_text, const std::string& source) {
    // The JSON parser stops at a NUL byte as at the end of the input.
    if (json_text.find('\0') != std::string_view::npos) refuse(source, "not valid JSON: a NUL byte");
    json root;
    try {
        root = json::parse(json_text.begin(), json_text.end());
    } catch (const json::exception& e) {
        refuse(source, fmt::format("not valid JSON: {}", e.what()));
    }
    if (!root.is_object()) refuse(source, "expected a JSON object");
    const auto type = root.find("model_type");
    if (type == root.end() || !type->is_string()) refuse(source, "'model_type' is missing (llama or gpt2)");
    ModelConfig c;
    const std::string model_type = type->get<std::string>();
    if (model_type == "llama") {
        c.architecture = Architecture::llama;
        parse_llama(root, source, c);
    } else if (model_type == "gpt2") {
        c.architecture = Architecture::gpt2;
        parse_gpt2(root, source, c);
    } else {
        refuse(source, fmt::format("model_type '{}' is not supported (llama or gpt2)", model_type));
    }
    if (c.hidden % c.heads != 0)
        refuse(source, fmt::format("the hidden size ({}) must be a multiple of the heads ({})", c.hidden, c.heads));
    c.head_dim = c.hidden / c.heads;
    if (c.head_dim % 2 != 0 || c.head_dim > 256)
        refuse(source, fmt::format("head_dim ({}) must be even and at most 256", c.head_dim));
    return c;
}

ModelConfig load_model_config(const std::string& path) {
    return parse_model_config(read_bounded(path, size_t{1} << 20, "model config"), path);
}

std::vector<WeightSpec> required_weights(const ModelConfig& c) {
    std::vector<WeightSpec> weights;
    const int64_t h = c.hidden, d = c.head_dim, ff = c.intermediate;
    if (c.architecture == Architecture::llama) {
        weights.push_back({"model.embed_tokens.weight", {c.vocab, h}});
        for (int64_t l = 0; l < c.layers; ++l) {
            const std::string p = fmt::format("model.layers.{}.", l);
            weights.push_back({p + "input_layernorm.weight", {h}});
            weights.push_back({p + "self_attn.q_proj.weight", {c.heads * d, h}});
            weights.push_back({p + "self_attn.k_proj.weight", {c.kv_heads * d, h}});
            weights.push_back({p + "self_attn.v_proj.weight", {c.kv_heads * d, h}});
            weights.push_back({p + "self_attn.o_proj.weight", {h, c.heads * d}});
            weights.push_back({p + "post_attention_layernorm.weight", {h}});
            weights.push_back({p + "mlp.gate_proj.weight", {ff, h}});
            weights.push_back({p + "mlp.up_proj.weight", {ff, h}});
            weights.push_back({p + "mlp.down_proj.weight", {h, ff}});
        }
        weights.push_back({"model.norm.weight", {h}});
        if (!c.tie_word_embeddings) weights.push_back({"lm_head.weight", {c.vocab, h}});
    } else {
        // GPT-2's Conv1D stores its weights [in, out].
        weights.push_back({"wte.weight", {c.vocab, h}});
        weights.push_back({"wpe.weight", {c.max_positions, h}});
        for (int64_t l = 0; l < c.layers; ++l) {
            const std::string p = fmt::format("h.{}.", l);
            for (const char* norm : {"ln_1", "ln_2"}) {
                weights.push_back({p + norm + ".weight", {h}});
                weights.push_back({p + norm + ".bias", {h}});
            }
            weights.push_back({p + "attn.c_attn.weight", {h, 3 * h}});
            weights.push_back({p + "attn.c_attn.bias", {3 * h}});
            weights.push_back({p + "attn.c_proj.weight", {h, h}});
            weights.push_back({p + "attn.c_proj.bias", {h}});
            weights.push_back({p + "mlp.c_fc.weight", {h, ff}});
            weights.push_back({p + "mlp.c_fc.bias", {ff}});
            weights.push_back({p + "mlp.c_proj.weight", {ff, h}});
            weights.push_back({p + "mlp.c_proj.bias", {h}});
        }
        weights.push_back({"ln_f.weight", {h}});
        weights.push_back({"ln_f.bias", {h}});
    }
    return weights;
}

}  // namespace transformer
