// Checks a model against the architectures the transformer example runs (Llama 3, GPT-2): its
// config.json, and the weights of a safetensors checkpoint by name, shape and dtype.
//
//   transformer_check --config config.json [--weights model.safetensors] [--list-weights]
//
// --weights takes a .safetensors file, a sharded checkpoint's model.safetensors.index.json or a
// directory holding either. The model's head shapes and rope are also checked against the
// library's attention and rotation ops (what transformer_run refuses before the GPU).
// Exit status 0 when everything needed is there, 2 with a message naming the file and the field
// or tensor otherwise. --list-weights prints the weights the config needs as JSON lines
// ({"name": ..., "shape": [...]}) instead, for make_random_weights.py.
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model_config.hpp"
#include "safetensors.hpp"

namespace {

constexpr const char* kUsage =
    "usage: transformer_check --config config.json [--weights model.safetensors|model.safetensors.index.json|DIR]\n"
    "           [--list-weights]\n";

}  // namespace

int main(int argc, char** argv) {
    std::string config_path, weights_path;
    bool list_weights = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (arg == "--list-weights") {
            list_weights = true;
        } else if (arg == "--config" && i + 1 < argc && config_path.empty()) {
            config_path = argv[++i];
        } else if (arg == "--weights" && i + 1 < argc && weights_path.empty()) {
            weights_path = argv[++i];
        } else {
            std::fprintf(stderr, "transformer_check: %s\n%s",
                         arg == "--config" || arg == "--weights"
                             ? (i + 1 < argc ? (arg + " given twice").c_str() : (arg + " needs a value").c_str())
                             : ("unknown option '" + arg + "'").c_str(),
                         kUsage);
            return 2;
        }
    }
    if (config_path.empty()) {
        std::fprintf(stderr, "transformer_check: --config is required\n%s", kUsage);
        return 2;
    }
    try {
        const transformer::ModelConfig config = transformer::load_model_config(config_path);
        const auto weights = transformer::required_weights(config);
        if (list_weights) {
            for (const auto& w : weights) fmt::print("{{\"name\": \"{}\", \"shape\": [{}]}}\n", w.name, fmt::join(w.shape, ", "));
            return 0;
        }
        // What transformer_run's ops would refuse for this model, refused here too.
        transformer::check_model_ops(config, tileops::DType::bf16, config_path);
        fmt::print("{}: {} with {} layers, hidden {}, heads {}/{} of {}, MLP {}, vocabulary {}; {} weights\n", config_path,
                   config.architecture == transformer::Architecture::llama ? "Llama" : "GPT-2", config.layers, config.hidden,
                   config.heads, config.kv_heads, config.head_dim, config.intermediate, config.vocab, weights.size());
        if (!weights_path.empty()) {
            const transformer::Checkpoint checkpoint(weights_path);
            checkpoint.check(config);
            fmt::print("{}: all {} weights present\n", weights_path, weights.size());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "transformer_check: %s\n", e.what());
        return 2;
    }
    return 0;
}
