#include "model_config.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "read_bounded.hpp"
#include "tileops/decode_attention.hpp"
#include "tileops/error.hpp"
#include "tileops/flash_attention.hpp"
#include "tileops/rope.hpp"

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

void parse_rope(const json& root, const std::string& source, ModelConfig& c);

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
    for (const char* key : {"attention_bias", "mlp_bias"}) {
        const auto it = root.find(key);
        if (it == root.end() || it->is_null()) continue;
        if (!it->is_boolean()) refuse(source, fmt::format("'{}' must be true or false, got {}", key, it->dump()));
        if (it->get<bool>()) refuse(source, fmt::format("'{}': true is not supported (the Llama layers here have no biases)", key));
    }
    parse_rope(root, source, c);
}

// A number that must be there (rope scaling parameters are never guessed).
double required_real(const json& object, const char* key, const std::string& where) {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) refuse(where, fmt::format("'{}' is missing", key));
    return real(object, key, where, 0.0);
}

// rope_scaling or rope_parameters (transformers v5) as the library's RopeScaling; "rope_type"
// wins over the older "type" as in Hugging Face, "default" is no scaling.
tileops::RopeScaling parse_scaling(const json& s, const std::string& where) {
    std::string type;
    bool typed = false;
    for (const char* key : {"type", "rope_type"}) {  // rope_type last: it wins
        const auto it = s.find(key);
        if (it == s.end() || it->is_null()) continue;
        if (!it->is_string()) refuse(where, fmt::format("'{}' must be a string, got {}", key, it->dump()));
        type = it->get<std::string>(), typed = true;
    }
    if (!typed) refuse(where, "'rope_type' is missing (default, llama3, linear)");
    if (type == "default") return {};
    // A factor below 1 would compress positions: Hugging Face warns of it as invalid; refused here.
    const auto scale_factor = [&] {
        const double factor = required_real(s, "factor", where);
        if (!(factor >= 1.0)) refuse(where, fmt::format("'factor' = {} must be at least 1", factor));
        return factor;
    };
    if (type == "llama3") {
        const double factor = scale_factor();  // in order, so the first missing is named
        const double low = required_real(s, "low_freq_factor", where);
        const double high = required_real(s, "high_freq_factor", where);
        return tileops::RopeScaling::llama3(factor, low, high, required_real(s, "original_max_position_embeddings", where));
    }
    if (type == "linear") return {tileops::RopeScaling::Type::linear, scale_factor()};
    refuse(where, fmt::format("rope type '{}' is not supported (default, llama3, linear)", type));
}

bool same(const tileops::RopeScaling& a, const tileops::RopeScaling& b) {
    if (a.type != b.type) return false;
    if (a.type == tileops::RopeScaling::Type::none) return true;
    if (a.factor != b.factor) return false;
    return a.type != tileops::RopeScaling::Type::llama3 ||
           (a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
            a.original_max_positions == b.original_max_positions);
}

void parse_rope(const json& root, const std::string& source, ModelConfig& c) {
    const json* parameters = nullptr;
    if (const auto it = root.find("rope_parameters"); it != root.end() && !it->is_null()) {
        if (!it->is_object()) refuse(source, "'rope_parameters' must be an object or null");
        parameters = &*it;
    }
    const json* scaling = nullptr;
    if (const auto it = root.find("rope_scaling"); it != root.end() && !it->is_null()) {
        if (!it->is_object()) refuse(source, "'rope_scaling' must be an object or null");
        scaling = &*it;
    }
    const bool top_theta = root.contains("rope_theta") && !root["rope_theta"].is_null();
    c.rope_theta = real(root, "rope_theta", source, 10000.0);
    if (parameters != nullptr) {
        const std::string where = source + ": rope_parameters";
        if (parameters->contains("rope_theta") && !(*parameters)["rope_theta"].is_null()) {
            const double theta = real(*parameters, "rope_theta", where, 10000.0);
            if (top_theta && theta != c.rope_theta)
                refuse(source, fmt::format("'rope_theta' ({}) and rope_parameters' 'rope_theta' ({}) differ", c.rope_theta,
                                           theta));
            c.rope_theta = theta;
        }
        c.rope_scaling = parse_scaling(*parameters, where);
        if (scaling != nullptr && !same(c.rope_scaling, parse_scaling(*scaling, source + ": rope_scaling")))
            refuse(source, "'rope_scaling' and 'rope_parameters' differ");
    } else if (scaling != nullptr) {
        c.rope_scaling = parse_scaling(*scaling, source + ": rope_scaling");
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
    if (const auto tie = root.find("tie_word_embeddings"); tie != root.end() && !tie->is_null()) {
        if (!tie->is_boolean()) refuse(source, "'tie_word_embeddings' must be true or false");
        c.tie_word_embeddings = tie->get<bool>();  // false: a separate lm_head.weight
    }
    // Fields that change what attention computes, refused rather than ignored.
    const auto flag = [&](const char* key, bool supported) {
        const auto it = root.find(key);
        if (it == root.end() || it->is_null()) return;
        if (!it->is_boolean()) refuse(source, fmt::format("'{}' must be true or false, got {}", key, it->dump()));
        if (it->get<bool>() != supported) refuse(source, fmt::format("'{}': {} is not supported", key, it->dump()));
    };
    flag("scale_attn_weights", true);
    flag("scale_attn_by_inverse_layer_idx", false);
    flag("add_cross_attention", false);
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
    // A key given twice in one object is refused: the parser would keep the last one silently.
    std::vector<std::vector<std::string>> keys;  // the keys of each open object
    std::string repeated;
    const json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) {
            keys.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
            if (!keys.empty()) keys.pop_back();
        } else if (event == json::parse_event_t::key && !keys.empty()) {
            const std::string key = parsed.get<std::string>();
            auto& seen = keys.back();
            if (std::find(seen.begin(), seen.end(), key) != seen.end() && repeated.empty()) repeated = key;
            seen.push_back(key);
        }
        return true;
    };
    try {
        root = json::parse(json_text.begin(), json_text.end(), callback);
    } catch (const json::exception& e) {
        refuse(source, fmt::format("not valid JSON: {}", e.what()));
    }
    if (!repeated.empty()) refuse(source, fmt::format("'{}' is given twice in one object", repeated));
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
    if (const auto eos = root.find("eos_token_id"); eos != root.end() && !eos->is_null()) {
        const json list = eos->is_array() ? *eos : json::array({*eos});
        for (const json& id : list) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0)
                refuse(source, fmt::format("'eos_token_id' must be a token id or a list of them, got {}", eos->dump()));
            // An id outside the vocabulary (a shrunk test model's) is never generated: no stop.
            if (id.get<int64_t>() < c.vocab) c.eos_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
    }
    return c;
}

void check_model_ops(const ModelConfig& c, tileops::DType dtype, const std::string& source) {
    try {
        const int64_t qkv_cols = (c.heads + 2 * c.kv_heads) * c.head_dim, page_size = 16;
        tileops::RopeProblem rope{1, c.heads, c.kv_heads, c.head_dim};
        rope.dtype = dtype;
        if (c.architecture == Architecture::llama) {
            rope.theta = c.rope_theta;
            rope.scaling = c.rope_scaling;
        } else {
            rope.style = tileops::RopeStyle::none;
        }
        rope.q_stride = rope.k_stride = rope.v_stride = rope.q_out_stride = rope.k_out_stride = qkv_cols;
        rope.append_kv = true, rope.page_size = page_size, rope.num_pages = 1;
        const tileops::Rope rope_op(rope);
        tileops::FlashAttentionProblem fa;
        fa.batch = 1;
        fa.num_heads = c.heads, fa.num_kv_heads = c.kv_heads, fa.head_dim = c.head_dim;
        fa.seqlen_q = fa.seqlen_k = 1;
        fa.dtype = dtype;
        fa.causal = true;
        fa.varlen = true, fa.total_q = fa.total_k = 1;
        fa.q_seq_stride = fa.k_seq_stride = fa.v_seq_stride = qkv_cols;
        const tileops::FlashAttention prefill(fa);
        tileops::DecodeAttentionProblem da;
        da.batch = 1;
        da.num_heads = c.heads, da.num_kv_heads = c.kv_heads, da.head_dim = c.head_dim;
        da.max_kv_len = page_size;
        da.dtype = dtype;
        da.page_size = page_size, da.num_pages = 1, da.max_pages_per_seq = 1;
        da.q_batch_stride = qkv_cols;
        const tileops::DecodeAttention decode(da);
    } catch (const tileops::Error& e) {
        refuse(source, fmt::format("the model's shapes do not run on the library's ops: {}", e.what()));
    }
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
        if (!c.tie_word_embeddings) weights.push_back({"lm_head.weight", {c.vocab, h}});
    }
    return weights;
}

}  // namespace transformer
