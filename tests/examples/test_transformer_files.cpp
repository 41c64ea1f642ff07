// The transformer example's inputs: config.json (Llama 3, GPT-2) and safetensors checkpoints,
// valid ones read field by field, malformed or hostile ones refused with a message naming the file
// and the field or tensor, never a crash, a hang or a read outside the file.
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include "model_config.hpp"
#include "tileops/tensor.hpp"
#include "safetensors.hpp"
#include "support/test_support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace transformer;
namespace fs = std::filesystem;

namespace {

std::string data_file(const char* name) {
    return std::string(TILEOPS_TEST_SOURCE_DIR) + "/tests/data/transformer/" + name;
}

std::string refusal(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(accepted)";
}

// A safetensors file: the 8-byte header length, the header, the data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
    std::string bytes(8, '\0');
    uint64_t length = header.size();
    for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
    return bytes + header + data;
}

void write(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Two F32 tensors: "a" [2, 3] at bytes 0-24 and "b" [4] at bytes 24-40, values 0, 1, 2, ...
std::pair<std::string, std::string> two_tensors() {
    const std::string header =
        R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
        R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}})";
    std::string data(40, '\0');
    for (int i = 0; i < 10; ++i) {
        const float v = static_cast<float>(i);
        std::memcpy(&data[static_cast<size_t>(i) * 4], &v, 4);
    }
    return {header, data};
}

}  // namespace

TEST_CASE("transformer: Llama 3 and GPT-2 configs are read field by field", "[examples]") {
    const ModelConfig llama = load_model_config(data_file("llama3_8b_config.json"));
    CHECK(llama.architecture == Architecture::llama);
    CHECK(llama.hidden == 4096);
    CHECK(llama.layers == 32);
    CHECK(llama.heads == 32);
    CHECK(llama.kv_heads == 8);
    CHECK(llama.head_dim == 128);
    CHECK(llama.intermediate == 14336);
    CHECK(llama.vocab == 128256);
    CHECK(llama.rope_theta == 500000.0);
    CHECK(llama.rope_scaling.type == tileops::RopeScaling::Type::llama3);
    CHECK(llama.rope_scaling.factor == 8.0);
    CHECK_FALSE(llama.tie_word_embeddings);
    const auto weights = required_weights(llama);
    CHECK(weights.size() == 1 + 32 * 9 + 1 + 1);
    CHECK(weights[2].name == "model.layers.0.self_attn.q_proj.weight");
    CHECK(weights[3].shape == std::vector<int64_t>{1024, 4096});  // k_proj: 8 heads of 128

    const ModelConfig gpt2 = parse_model_config(
        R"({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
            "vocab_size": 50257, "n_inner": null, "layer_norm_epsilon": 1e-5})",
        "gpt2.json");
    CHECK(gpt2.architecture == Architecture::gpt2);
    CHECK(gpt2.head_dim == 64);
    CHECK(gpt2.kv_heads == 12);
    CHECK(gpt2.intermediate == 3072);
    CHECK(gpt2.tie_word_embeddings);
    const auto gpt2_weights = required_weights(gpt2);
    CHECK(gpt2_weights.size() == 2 + 12 * 12 + 2);
    CHECK(gpt2_weights[1].shape == std::vector<int64_t>{1024, 768});  // wpe
}

TEST_CASE("transformer: malformed configs are refused naming the file and the field", "[examples]") {
    const std::string llama = R"("model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000)";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{", "not valid JSON"},
        {std::string("{\"model_type\": \"llama\"}") + '\0' + "junk", "NUL byte"},
        {"[1, 2]", "expected a JSON object"},
        {"{}", "'model_type' is missing"},
        {R"({"model_type": "bert"})", "model_type 'bert' is not supported"},
        {R"({"model_type": "llama"})", "'hidden_size' is missing"},
        {R"({"model_type": "llama", "hidden_size": "256"})", "'hidden_size' must be an integer"},
        {R"({"model_type": "llama", "hidden_size": -4})", "'hidden_size' must be in"},
        {R"({"model_type": "llama", "hidden_size": 1e300})", "'hidden_size' must be an integer"},
        {"{" + llama + R"(, "num_key_value_heads": 3})", "must be a multiple of num_key_value_heads (3)"},
        {"{" + llama + R"(, "num_key_value_heads": 8})", "'num_key_value_heads' must be in [1, 4]"},
        {"{" + llama + R"(, "rope_scaling": {"rope_type": "yarn"}})", "rope_scaling: rope type 'yarn' is not supported"},
        {"{" + llama + R"(, "rope_scaling": {"rope_type": "llama3", "factor": -2}})", "rope_scaling: 'factor' must be > 0"},
        {"{" + llama + R"(, "rope_scaling": 5})", "'rope_scaling' must be an object"},
        {"{" + llama + R"(, "tie_word_embeddings": 1})", "'tie_word_embeddings' must be true or false"},
        {"{" + llama + R"(, "rope_theta": 0})", "'rope_theta' must be > 0"},
        {"{" + llama + R"(, "head_dim": 32})", "head_dim (32) x num_attention_heads (4) must be hidden_size (256)"},
        {R"({"model_type": "llama", "hidden_size": 250, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 512, "vocab_size": 1000})", "must be even"},
        {R"({"model_type": "gpt2", "n_embd": 768, "n_layer": 99999, "n_head": 12, "n_positions": 1024, "vocab_size": 5})",
         "'n_layer' must be in"},
    };
    for (const auto& [text, message] : cases) {
        INFO(text);
        CHECK_THAT(refusal([&] { parse_model_config(text, "cfg.json"); }),
                   ContainsSubstring("cfg.json: ") && ContainsSubstring(message));
    }
    CHECK(refusal([&] { parse_model_config("{" + llama + "}", "ok.json"); }) == "(accepted)");

    tileops::test::TempDir dir;
    const fs::path fifo = dir.path() / "fifo.json";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THAT(refusal([&] { load_model_config(fifo.string()); }), ContainsSubstring("not a regular file"));
    CHECK_THAT(refusal([&] { load_model_config((dir.path() / "missing.json").string()); }),
               ContainsSubstring("missing.json"));
}

TEST_CASE("transformer: a safetensors file is read through its header, checked against the file", "[examples]") {
    tileops::test::TempDir dir;
    const fs::path path = dir.path() / "two.safetensors";
    const auto [header, data] = two_tensors();
    write(path, safetensors_bytes(header, data));
    const SafetensorsFile file(path.string());
    REQUIRE(file.tensors().size() == 2);
    const TensorView& b = file.tensor("b");
    CHECK(b.dtype == "F32");
    CHECK(b.shape == std::vector<int64_t>{4});
    float first = 0;
    std::memcpy(&first, b.data, 4);
    CHECK(first == 6.0f);
    CHECK_NOTHROW(file.check_weights({{"a", {2, 3}}, {"b", {4}}}));
    CHECK_THAT(refusal([&] { file.check_weights({{"a", {3, 2}}}); }),
               ContainsSubstring("'a' has shape [2, 3], the config needs [3, 2]"));
    CHECK_THAT(refusal([&] { file.check_weights({{"c", {1}}}); }), ContainsSubstring("no tensor 'c'"));
}

TEST_CASE("transformer: malformed safetensors files are refused naming the file and the tensor", "[examples]") {
    tileops::test::TempDir dir;
    const auto [header, data] = two_tensors();
    const auto with = [](std::string text, const std::string& from, const std::string& to) {
        text.replace(text.find(from), from.size(), to);
        return text;
    };
    std::string huge_length(8, '\xff');
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"short", "too short"},
        {huge_length + "{}", "does not fit the file"},
        {safetensors_bytes("{", data), "not valid JSON"},
        {safetensors_bytes(std::string("{}") + '\0', data), "NUL byte"},
        {safetensors_bytes("[]", data), "not a JSON object"},
        {safetensors_bytes(with(header, R"("dtype": "F32", "shape": [4])", R"("shape": [4])"), data), "'b': no dtype"},
        {safetensors_bytes(with(header, R"("F32", "shape": [4])", R"("Q7", "shape": [4])"), data), "unknown dtype 'Q7'"},
        {safetensors_bytes(with(header, "[4]", "[-4]"), data), "not of non-negative integers"},
        {safetensors_bytes(with(header, "[4]", "[4294967296, 4294967296]"), data), "overflows"},
        {safetensors_bytes(with(header, "[24, 40]", "[40, 24]"), data), "outside the data"},
        {safetensors_bytes(with(header, "[24, 40]", "[24, 4000]"), data), "outside the data"},
        {safetensors_bytes(with(header, "[24, 40]", "[24, 36]"), data), "hold 12 bytes, its shape and dtype 16"},
        {safetensors_bytes(with(with(header, "[24, 40]", "[16, 32]"), "[0, 24]", "[0, 24]"), data), "share bytes"},
        {safetensors_bytes(with(header, "[24, 40]", "[24]"), data), "no data_offsets"},
    };
    int index = 0;
    for (const auto& [bytes, message] : cases) {
        const fs::path path = dir.path() / ("bad" + std::to_string(index++) + ".safetensors");
        write(path, bytes);
        INFO(message);
        CHECK_THAT(refusal([&] { SafetensorsFile file(path.string()); }),
                   ContainsSubstring(path.string()) && ContainsSubstring(message));
    }
    const fs::path fifo = dir.path() / "fifo.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THAT(refusal([&] { SafetensorsFile file(fifo.string()); }), ContainsSubstring("not a regular file"));

    // Random damage: every outcome is a load or a refusal.
    const std::string valid = safetensors_bytes(header, data);
    std::mt19937 rng(5);
    for (int round = 0; round < 300; ++round) {
        std::string bytes = valid;
        for (int flips = 0; flips < 3; ++flips) bytes[rng() % bytes.size()] = static_cast<char>(rng());
        const fs::path path = dir.path() / "fuzz.safetensors";
        write(path, bytes);
        try {
            SafetensorsFile file(path.string());
            for (const auto& [name, view] : file.tensors()) CHECK(view.bytes <= bytes.size());
        } catch (const std::invalid_argument&) {
        }
    }
}

namespace {

const std::string kLlama = R"("model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000)";
const std::string kGpt2 = R"("model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "n_positions": 32,
    "vocab_size": 100)";

}  // namespace

TEST_CASE("transformer: rope_parameters (transformers v5) and rope_scaling are read as Hugging Face does", "[examples]") {
    // Llama 3.1 as transformers v5 writes it: theta and scaling under "rope_parameters".
    const ModelConfig v5 = parse_model_config(
        "{" + kLlama + R"(, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
        "v5.json");
    CHECK(v5.rope_theta == 500000.0);
    CHECK(v5.rope_scaling.type == tileops::RopeScaling::Type::llama3);
    CHECK(v5.rope_scaling.factor == 8.0);
    CHECK(v5.rope_scaling.high_freq_factor == 4.0);
    CHECK(v5.rope_scaling.original_max_positions == 8192);
    const ModelConfig plain = parse_model_config(
        "{" + kLlama + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})", "v5.json");
    CHECK(plain.rope_theta == 1000000.0);
    CHECK(plain.rope_scaling.type == tileops::RopeScaling::Type::none);
    // Both forms: accepted when they agree, refused when not.
    CHECK(refusal([&] {
              parse_model_config("{" + kLlama + R"(, "rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2},
                  "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000}})",
                                 "both.json");
          }) == "(accepted)");
    // rope_type wins over type; "default" is no scaling.
    const ModelConfig both_keys = parse_model_config(
        "{" + kLlama + R"(, "rope_scaling": {"type": "linear", "rope_type": "default", "factor": 4}})", "keys.json");
    CHECK(both_keys.rope_scaling.type == tileops::RopeScaling::Type::none);
    const ModelConfig linear = parse_model_config(
        "{" + kLlama + R"(, "rope_scaling": {"type": "yarn", "rope_type": "linear", "factor": 4}})", "keys.json");
    CHECK(linear.rope_scaling.type == tileops::RopeScaling::Type::linear);
    CHECK(linear.rope_scaling.factor == 4.0);

    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"("rope_theta": 10000, "rope_parameters": {"rope_type": "default", "rope_theta": 500000})",
         "'rope_theta' (10000) and rope_parameters' 'rope_theta' (500000) differ"},
        {R"("rope_scaling": {"rope_type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "linear", "factor": 4})",
         "'rope_scaling' and 'rope_parameters' differ"},
        {R"("rope_scaling": null, "rope_parameters": 3)", "'rope_parameters' must be an object"},
        {R"("rope_scaling": {"rope_type": "llama3"})", "rope_scaling: 'factor' is missing"},
        {R"("rope_scaling": {"rope_type": "llama3", "factor": 8})", "rope_scaling: 'low_freq_factor' is missing"},
        {R"("rope_scaling": {"type": "linear"})", "rope_scaling: 'factor' is missing"},
        {R"("rope_scaling": {"type": "linear", "factor": 0.5})", "rope_scaling: 'factor' = 0.5 must be at least 1"},
        {R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5})", "rope_parameters: 'factor' is missing"},
        {R"("rope_scaling": {"factor": 2})", "'rope_type' is missing"},
        {R"("rope_scaling": {"type": 3})", "'type' must be a string"},
        {R"("rope_parameters": {"rope_type": "yarn", "factor": 4})", "rope type 'yarn' is not supported"},
    };
    for (const auto& [fields, message] : cases) {
        INFO(fields);
        CHECK_THAT(refusal([&] { parse_model_config("{" + kLlama + ", " + fields + "}", "cfg.json"); }),
                   ContainsSubstring("cfg.json") && ContainsSubstring(message));
    }
}

TEST_CASE("transformer: config fields that would change the computation are refused, not ignored", "[examples]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{" + kLlama + R"(, "attention_bias": true})", "'attention_bias': true is not supported"},
        {"{" + kLlama + R"(, "mlp_bias": true})", "'mlp_bias': true is not supported"},
        {"{" + kLlama + R"(, "mlp_bias": "no"})", "'mlp_bias' must be true or false"},
        {"{" + kGpt2 + R"(, "scale_attn_weights": false})", "'scale_attn_weights': false is not supported"},
        {"{" + kGpt2 + R"(, "scale_attn_by_inverse_layer_idx": true})",
         "'scale_attn_by_inverse_layer_idx': true is not supported"},
        {"{" + kGpt2 + R"(, "add_cross_attention": true})", "'add_cross_attention': true is not supported"},
        {"{" + kLlama + R"(, "hidden_size": 512})", "'hidden_size' is given twice in one object"},
        {"{" + kLlama + R"(, "rope_scaling": {"rope_type": "linear", "factor": 2, "factor": 3}})", "'factor' is given twice"},
        {"{" + kLlama + R"(, "eos_token_id": [1, "x"]})", "'eos_token_id' must be a token id"},
    };
    for (const auto& [text, message] : cases) {
        INFO(text);
        CHECK_THAT(refusal([&] { parse_model_config(text, "cfg.json"); }),
                   ContainsSubstring("cfg.json: ") && ContainsSubstring(message));
    }
    // Accepted: the supported values, an untied GPT-2 (its own lm_head.weight), eos ids.
    const ModelConfig llama = parse_model_config(
        "{" + kLlama + R"(, "attention_bias": false, "mlp_bias": false, "eos_token_id": [998, 999, 5000]})", "ok.json");
    CHECK(llama.eos_token_ids == std::vector<int32_t>{998, 999});  // 5000 is outside the vocabulary
    const ModelConfig untied = parse_model_config(
        "{" + kGpt2 + R"(, "scale_attn_weights": true, "tie_word_embeddings": false, "eos_token_id": 7})", "ok.json");
    CHECK_FALSE(untied.tie_word_embeddings);
    CHECK(untied.eos_token_ids == std::vector<int32_t>{7});
    const auto weights = required_weights(untied);
    CHECK(weights.back().name == "lm_head.weight");
    CHECK(weights.back().shape == std::vector<int64_t>{100, 64});
}

TEST_CASE("transformer: a model the library's ops refuse is refused up front, naming the config", "[examples]") {
    const auto check = [](const std::string& text) {
        return refusal([&] { check_model_ops(parse_model_config(text, "cfg.json"), tileops::DType::bf16, "cfg.json"); });
    };
    CHECK(check("{" + kLlama + "}") == "(accepted)");
    CHECK(check("{" + kGpt2 + "}") == "(accepted)");
    CHECK_THAT(check("{" + kLlama + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
                     "high_freq_factor": 4, "original_max_position_embeddings": 8192}})"),
               ContainsSubstring("cfg.json: ") && ContainsSubstring("high_freq_factor"));
    CHECK_THAT(check(R"({"model_type": "llama", "hidden_size": 72, "num_hidden_layers": 1, "num_attention_heads": 4,
                         "intermediate_size": 64, "vocab_size": 100})"),
               ContainsSubstring("cfg.json: ") && ContainsSubstring("head_dim"));
}

namespace {

// A safetensors file of F32 vectors of 2 elements, one per name.
std::string vectors(const std::vector<std::string>& names) {
    nlohmann::json header = nlohmann::json::object();
    for (size_t i = 0; i < names.size(); ++i) header[names[i]] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8 * i, 8 * i + 8}}};
    return safetensors_bytes(header.dump(), std::string(8 * names.size(), '\0'));
}

}  // namespace

TEST_CASE("transformer: sharded checkpoints load through their index, every shard checked", "[examples]") {
    tileops::test::TempDir dir;
    const fs::path model = dir.path() / "model";
    fs::create_directories(model);
    write(model / "one.safetensors", vectors({"a", "b"}));
    write(model / "two.safetensors", vectors({"c"}));
    const auto index = [&](const std::string& map) {
        write(model / "model.safetensors.index.json", R"({"metadata": {"total_size": 24}, "weight_map": )" + map + "}");
        return (model / "model.safetensors.index.json").string();
    };
    const std::string good = index(R"({"a": "one.safetensors", "b": "one.safetensors", "c": "two.safetensors"})");
    for (const std::string& path : {good, model.string()}) {  // the index, or its directory
        const Checkpoint checkpoint(path);
        CHECK(checkpoint.tensor("a").shape == std::vector<int64_t>{2});
        CHECK(checkpoint.find("c") != nullptr);
        CHECK(checkpoint.find("d") == nullptr);
    }
    write(model / "model.safetensors", vectors({"x"}));  // a directory with both: the single file
    CHECK(Checkpoint(model.string()).find("x") != nullptr);
    fs::remove(model / "model.safetensors");

    write(dir.path() / "outside.safetensors", vectors({"c"}));
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"a": "one.safetensors", "c": "../outside.safetensors"})", "leaves the index's directory"},
        {R"({"a": "/tmp/one.safetensors"})", "is not a path relative to the index"},
        {R"({"a": "one.safetensors", "c": "one.safetensors"})", "puts tensor 'c' in"},
        {R"({"a": "missing.safetensors"})", "cannot open"},
        {R"({"a": 3})", "not a file name"},
        {"{}", "non-empty 'weight_map'"},
    };
    for (const auto& [map, message] : cases) {
        INFO(map);
        CHECK_THAT(refusal([&] { Checkpoint checkpoint(index(map)); }), ContainsSubstring(message));
    }
    write(model / "two.safetensors", vectors({"c", "a"}));
    CHECK_THAT(refusal([&] { Checkpoint checkpoint(index(R"({"a": "one.safetensors", "c": "two.safetensors"})")); }),
               ContainsSubstring("tensor 'a' is in two shards"));
    const fs::path empty = dir.path() / "empty";
    fs::create_directories(empty);
    CHECK_THAT(refusal([&] { Checkpoint checkpoint(empty.string()); }), ContainsSubstring("without model.safetensors"));
}

TEST_CASE("transformer: checkpoint tensors are matched to the architecture, none ignored", "[examples]") {
    tileops::test::TempDir dir;
    // A 1-layer Llama of hidden 2: every weight a [2] vector or [2, 2] matrix; written as F32.
    const ModelConfig llama = parse_model_config(
        R"({"model_type": "llama", "hidden_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1,
            "intermediate_size": 2, "vocab_size": 2, "tie_word_embeddings": true})",
        "tiny.json");
    const auto write_weights = [&](const fs::path& path, const std::vector<WeightSpec>& specs, const std::string& prefix,
                                   const std::vector<std::string>& extra) {
        nlohmann::json header = nlohmann::json::object();
        uint64_t offset = 0;
        for (const WeightSpec& w : specs) {
            int64_t count = 1;
            for (int64_t d : w.shape) count *= d;
            header[prefix + w.name] = {{"dtype", "F32"}, {"shape", w.shape}, {"data_offsets", {offset, offset + 4 * count}}};
            offset += 4 * static_cast<uint64_t>(count);
        }
        for (const std::string& name : extra) {
            header[name] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {offset, offset + 8}}};
            offset += 8;
        }
        write(path, safetensors_bytes(header.dump(), std::string(offset, '\0')));
        return path.string();
    };
    const auto llama_weights = required_weights(llama);
    CHECK_NOTHROW(Checkpoint(write_weights(dir.path() / "l.safetensors", llama_weights, "", {})).check(llama));
    CHECK_THAT(refusal([&] {
                   Checkpoint(write_weights(dir.path() / "lb.safetensors", llama_weights, "",
                                            {"model.layers.0.self_attn.q_proj.bias"}))
                       .check(llama);
               }),
               ContainsSubstring("'model.layers.0.self_attn.q_proj.bias'") && ContainsSubstring("biases are not supported"));
    // GPT-2 as GPT2LMHeadModel.save_pretrained names it: "transformer.wte.weight", ...
    const ModelConfig gpt2 = parse_model_config(
        R"({"model_type": "gpt2", "n_embd": 4, "n_layer": 1, "n_head": 2, "n_positions": 2, "vocab_size": 2})", "g.json");
    CHECK_NOTHROW(Checkpoint(write_weights(dir.path() / "g.safetensors", required_weights(gpt2), "transformer.", {}))
                      .check(gpt2));
}

TEST_CASE("transformer: overlapping tensors are refused naming both", "[examples]") {
    tileops::test::TempDir dir;
    const fs::path path = dir.path() / "overlap.safetensors";
    write(path, safetensors_bytes(R"({"first": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                      "second": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                  std::string(12, '\0')));
    CHECK_THAT(refusal([&] { SafetensorsFile file(path.string()); }),
               ContainsSubstring("tensors 'first' and 'second' share bytes"));
}
