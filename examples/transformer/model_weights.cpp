#include "model_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "float16.hpp"
#include "safetensors.hpp"

namespace transformer {
namespace {

using tileops::DType;

// A region of the allocation: the checkpoint tensors stacked into it, in order, and the pointer
// of ModelWeights that receives its address.
struct Slot {
    std::vector<std::string> sources;
    const void** target = nullptr;
    int64_t elements = 0;
    bool vector = false;  // 1-D: a norm weight (random: 1) or a bias (random: 0)
    size_t offset = 0;
};

std::vector<Slot> slots_of(const ModelConfig& c, ModelWeights& w) {
    std::vector<Slot> slots;
    const auto add = [&](const void** target, std::vector<std::string> sources) {
        slots.push_back({std::move(sources), target});
    };
    w.layers.assign(static_cast<size_t>(c.layers), {});
    if (c.architecture == Architecture::llama) {
        add(&w.embedding, {"model.embed_tokens.weight"});
        for (int64_t l = 0; l < c.layers; ++l) {
            const std::string p = fmt::format("model.layers.{}.", l);
            LayerWeights& layer = w.layers[static_cast<size_t>(l)];
            add(&layer.norm1, {p + "input_layernorm.weight"});
            add(&layer.qkv, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
            add(&layer.out, {p + "self_attn.o_proj.weight"});
            add(&layer.norm2, {p + "post_attention_layernorm.weight"});
            add(&layer.up, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
            add(&layer.down, {p + "mlp.down_proj.weight"});
        }
        add(&w.final_norm, {"model.norm.weight"});
        if (!c.tie_word_embeddings) add(&w.lm_head, {"lm_head.weight"});
    } else {
        add(&w.embedding, {"wte.weight"});
        add(&w.positions, {"wpe.weight"});
        for (int64_t l = 0; l < c.layers; ++l) {
            const std::string p = fmt::format("h.{}.", l);
            LayerWeights& layer = w.layers[static_cast<size_t>(l)];
            add(&layer.norm1, {p + "ln_1.weight"});
            add(&layer.norm1_bias, {p + "ln_1.bias"});
            add(&layer.qkv, {p + "attn.c_attn.weight"});
            add(&layer.qkv_bias, {p + "attn.c_attn.bias"});
            add(&layer.out, {p + "attn.c_proj.weight"});
            add(&layer.out_bias, {p + "attn.c_proj.bias"});
            add(&layer.norm2, {p + "ln_2.weight"});
            add(&layer.norm2_bias, {p + "ln_2.bias"});
            add(&layer.up, {p + "mlp.c_fc.weight"});
            add(&layer.up_bias, {p + "mlp.c_fc.bias"});
            add(&layer.down, {p + "mlp.c_proj.weight"});
            add(&layer.down_bias, {p + "mlp.c_proj.bias"});
        }
        add(&w.final_norm, {"ln_f.weight"});
        add(&w.final_norm_bias, {"ln_f.bias"});
        if (!c.tie_word_embeddings) add(&w.lm_head, {"lm_head.weight"});
    }
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const WeightSpec& spec : required_weights(c)) shapes[spec.name] = spec.shape;
    for (Slot& slot : slots) {
        for (const std::string& name : slot.sources) {
            const auto& shape = shapes.at(name);
            int64_t count = 1;
            for (int64_t dim : shape) count *= dim;
            slot.elements += count;
            slot.vector = shape.size() == 1;
        }
    }
    return slots;
}

// Lays the slots out in one allocation (256-byte aligned) and points the weights at them.
DeviceMemory allocate(std::vector<Slot>& slots, size_t element) {
    size_t bytes = 0;
    for (Slot& slot : slots) {
        slot.offset = bytes;
        bytes += (static_cast<size_t>(slot.elements) * element + 255) / 256 * 256;
    }
    DeviceMemory memory(bytes);
    for (Slot& slot : slots) *slot.target = memory.as<char>() + slot.offset;
    return memory;
}

// The tensor's elements appended to `out` as 16-bit codes of `dtype`.
void convert(const TensorView& tensor, DType dtype, std::vector<uint16_t>& out) {
    const size_t count = tensor.bytes / dtype_bytes(tensor.dtype);
    const size_t base = out.size();
    out.resize(base + count);
    const bool to_bf16 = dtype == DType::bf16;
    if ((tensor.dtype == "BF16" && to_bf16) || (tensor.dtype == "F16" && !to_bf16)) {
        std::memcpy(out.data() + base, tensor.data, tensor.bytes);
        return;
    }
    for (size_t i = 0; i < count; ++i) {
        float value;
        if (tensor.dtype == "F32") {
            std::memcpy(&value, tensor.data + 4 * i, 4);
        } else {
            uint16_t code;
            std::memcpy(&code, tensor.data + 2 * i, 2);
            value = tensor.dtype == "BF16" ? bf16_to_float(code) : half_to_float(code);
        }
        out[base + i] = float_to_code(value, dtype);
    }
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Uniform values in [-a, a) (a = std x sqrt(3)) from (seed, slot, index), on every core.
void fill_random(std::vector<uint16_t>& out, size_t count, DType dtype, uint64_t seed, size_t slot, double std) {
    out.resize(count);
    const float half_width = static_cast<float>(std * std::sqrt(3.0));
    const uint64_t key = mix(seed ^ mix(slot));
    const size_t threads = std::max(1u, std::thread::hardware_concurrency());
    const size_t per_thread = (count + threads - 1) / threads;
    std::vector<std::thread> workers;
    for (size_t t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            const size_t end = std::min(count, (t + 1) * per_thread);
            for (size_t i = t * per_thread; i < end; ++i) {
                const float unit = static_cast<float>(mix(key + i) >> 40) * 0x1p-24f;  // [0, 1)
                const float value = (2.0f * unit - 1.0f) * half_width;
                out[i] = float_to_code(value, dtype);
            }
        });
    }
    for (std::thread& worker : workers) worker.join();
}

void check_dtype(DType dtype) {
    if (dtype != DType::bf16 && dtype != DType::fp16)
        throw std::invalid_argument(fmt::format("the model runs in bf16 or fp16, not {}", tileops::dtype_name(dtype)));
}

void upload(const Slot& slot, const std::vector<uint16_t>& codes) {
    check_cuda(cudaMemcpy(const_cast<void*>(*slot.target), codes.data(), codes.size() * 2, cudaMemcpyHostToDevice),
               "uploading a weight");
}

}  // namespace

ModelWeights ModelWeights::load(const ModelConfig& config, const Checkpoint& file, DType dtype) {
    check_dtype(dtype);
    file.check(config);
    ModelWeights w;
    w.dtype_ = dtype;
    std::vector<Slot> slots = slots_of(config, w);
    w.memory_ = allocate(slots, 2);
    std::vector<uint16_t> codes;
    for (const Slot& slot : slots) {
        codes.clear();
        for (const std::string& name : slot.sources) convert(file.tensor(name), dtype, codes);
        upload(slot, codes);
    }
    if (w.lm_head == nullptr) w.lm_head = w.embedding;
    return w;
}

ModelWeights ModelWeights::random(const ModelConfig& config, DType dtype, uint64_t seed, double std) {
    check_dtype(dtype);
    ModelWeights w;
    w.dtype_ = dtype;
    std::vector<Slot> slots = slots_of(config, w);
    w.memory_ = allocate(slots, 2);
    std::vector<uint16_t> codes;
    for (size_t i = 0; i < slots.size(); ++i) {
        const Slot& slot = slots[i];
        const auto count = static_cast<size_t>(slot.elements);
        if (slot.vector) {
            // Norm weights are 1 and biases 0, so activations keep their scale through the layers.
            const bool bias = slot.sources.front().size() >= 4 &&
                              slot.sources.front().compare(slot.sources.front().size() - 4, 4, "bias") == 0;
            const float value = bias ? 0.0f : 1.0f;
            codes.assign(count, float_to_code(value, dtype));
        } else {
            fill_random(codes, count, dtype, seed, i, std);
        }
        upload(slot, codes);
    }
    if (w.lm_head == nullptr) w.lm_head = w.embedding;
    return w;
}

}  // namespace transformer
