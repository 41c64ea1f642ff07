// A Llama or GPT-2 decoder on the library's ops: a varlen prefill of whole prompts that fills a
// paged KV cache, then decode steps of every sequence at once, each step one CUDA graph launch.
//
// Per layer (x is the residual stream, kept in the model dtype):
//   y = norm(x); qkv = y W_qkv; rotate q and k in place (GPT-2: no rotation) and append k, v to the
//   cache; a = attention(q, cache); x += a W_o; y = norm(x); x += act(y W_up) W_down
// The residual adds ride in the next RMSNorm (Llama) or in the GEMMs (GPT-2: C = D = x); Llama's
// SwiGLU gate and up projections are one GEMM. The LM head runs on each sequence's last row only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "model_config.hpp"
#include "model_weights.hpp"
#include "tileops/runtime.hpp"

namespace transformer {

struct SamplingSettings {
    bool greedy = true;
    float temperature = 1.0f;
    int top_k = 0;        // <= 0: no top-k
    float top_p = 1.0f;   // >= 1: no top-p
    float min_p = 0.0f;   // <= 0: no min-p
    uint64_t seed = 0;
};

struct DecoderOptions {
    int64_t max_context = 0;             // tokens a sequence may hold: its prompt and what it generates
    int64_t page_size = 16;              // the KV cache's page
    int64_t max_prefill_tokens = 16384;  // prompts are prefilled in groups of at most this many tokens
    SamplingSettings sampling;
};

class Decoder {
public:
    // Sizes everything for prompts of these lengths, creates the ops of the prefill and the decode
    // step, loads or compiles their kernels and captures the decode step's graph. `weights` must
    // outlive the decoder. Throws std::invalid_argument for lengths or options that do not fit.
    Decoder(tileops::Runtime& runtime, const ModelConfig& config, const ModelWeights& weights,
            const std::vector<int64_t>& prompt_lengths, const DecoderOptions& options, cudaStream_t stream);
    ~Decoder();
    Decoder(const Decoder&) = delete;
    // Throws what the constructor would for these sizes (std::invalid_argument, or
    // tileops::InvalidArgument for a shape an op does not run), without a GPU.
    static void check(const ModelConfig& config, tileops::DType dtype, const std::vector<int64_t>& prompt_lengths,
                      const DecoderOptions& options);
    Decoder& operator=(const Decoder&) = delete;

    // Runs the prompts (of the lengths given to the constructor), fills their KV cache and samples
    // each one's next token. With `hidden`, also returns the residual stream after every layer,
    // [layer][token * hidden + i] (this synchronizes).
    void prefill(const std::vector<std::vector<int32_t>>& prompts, std::vector<std::vector<float>>* hidden = nullptr);
    // One token for every sequence: the step's positions copied in and one graph launch. Does not
    // wait for the GPU. Throws std::length_error when a sequence would pass max_context.
    void decode_step();
    // Runs one prefill and one decode step (eagerly, not as the graph: each op timed apart, the
    // gaps between them included) and returns the milliseconds of each kind of op, summed over the
    // layers: "prefill: attention", "decode step: qkv projection", ... Rewrites the cache rows of
    // the prefill and the first decode step.
    std::map<std::string, double> profile(const std::vector<std::vector<int32_t>>& prompts);
    // How many decode steps fit after the prefill.
    int64_t max_steps() const;

    // Waits for the stream. The tokens sampled so far, [sequence][step] (the prefill's first).
    std::vector<std::vector<int32_t>> generated() const;
    // Waits for the stream. The last step's logits, [sequence * vocab + token] (fp32).
    std::vector<float> last_logits() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace transformer
