#include "decoder.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "float16.hpp"
#include "tileops/tileops.hpp"

namespace transformer {
namespace {

using namespace tileops;

// The ops of one forward pass over `rows` tokens of `sequences` sequences. Ops are shapes, not
// weights: every layer runs the same ones.
struct StepOps {
    std::optional<Embedding> embed;
    std::optional<RmsNorm> rms_norm;       // Llama, over [rows, hidden]: the first layer's
    std::optional<RmsNorm> rms_norm_add;   // the others': x += delta, then the norm
    std::optional<LayerNorm> layer_norm;   // GPT-2
    std::optional<Gemm> qkv, out, up, down;
    std::optional<Rope> rope;
    std::optional<FlashAttention> prefill_attention;
    std::optional<DecodeAttention> decode_attention;
    std::optional<Elementwise> activation;  // SwiGLU's silu(gate) * up, or GPT-2's tanh GELU
    std::optional<Embedding> gather_last;   // prefill: each sequence's last row
    std::optional<RmsNorm> final_rms_norm;  // over [sequences, hidden], the last delta added
    std::optional<LayerNorm> final_layer_norm;
    std::optional<Gemm> lm_head;
    std::optional<Sampling> sampling;

    template <class Visit>
    void each(Visit&& visit) {
        const auto one = [&](auto& op) {
            if (op) visit(*op);
        };
        one(embed), one(rms_norm), one(rms_norm_add), one(layer_norm), one(qkv), one(out), one(up), one(down), one(rope);
        one(prefill_attention), one(decode_attention), one(activation), one(gather_last), one(final_rms_norm);
        one(final_layer_norm), one(lm_head), one(sampling);
    }
};

// Prompts prefilled together: [first, first + count), `tokens` in all.
struct PrefillGroup {
    size_t first = 0, count = 0;
    int64_t tokens = 0, longest = 0;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

struct Decoder::Impl {
    Runtime* runtime;  // null when only checking
    const ModelConfig config;
    const ModelWeights* weights;  // null when only checking
    const std::vector<int64_t> prompt_lengths;
    const DecoderOptions options;
    cudaStream_t stream;
    const bool llama;
    const DType dtype;
    const int64_t sequences, hidden, qkv_cols, up_cols, pages_per_sequence, num_pages;
    std::vector<PrefillGroup> groups;
    int64_t max_rows = 0;  // the most tokens one forward pass runs
    int64_t steps_done = 0;

    // Device memory: the KV cache, activations, and the small int32 arrays the ops read.
    DeviceMemory cache, activations, indices, logits, history;
    std::vector<void*> k_cache, v_cache;  // per layer
    // Llama adds each projection's output (delta) to the residual stream in the next RMSNorm;
    // GPT-2 in the projection's GEMM (C = D = residual).
    void *residual = nullptr, *delta = nullptr, *normed = nullptr, *qkv = nullptr, *attention = nullptr;
    void *mlp = nullptr, *act = nullptr;
    void *last = nullptr, *last_delta = nullptr, *last_normed = nullptr;
    int32_t *ids = nullptr, *positions = nullptr, *slots = nullptr, *cu_seqlens = nullptr, *last_rows = nullptr;
    int32_t *page_table = nullptr, *tokens = nullptr, *zeros = nullptr, *top_k = nullptr;
    float *temperature = nullptr, *top_p = nullptr, *min_p = nullptr;
    // The decode step's inputs, [positions, slots, lengths, offsets] x sequences, copied in from
    // step_table (pinned, every step's precomputed) before each launch.
    int32_t* step_inputs = nullptr;
    PinnedMemory step_table;
    std::vector<int32_t> host_page_table;

    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<StepOps>> prefill_ops;  // by (rows, sequences)
    // While profiling: an event recorded before each op, named by it.
    std::vector<std::pair<const char*, cudaEvent_t>>* marks = nullptr;
    StepOps decode_ops;
    cudaGraphExec_t decode_graph = nullptr;

    // Checks the sizes and creates the ops (no GPU needed); with weights, also allocates, prepares
    // the kernels and captures the decode step.
    Impl(Runtime* runtime_, const ModelConfig& config_, const ModelWeights* weights_, DType dtype_,
         const std::vector<int64_t>& lengths, const DecoderOptions& options_, cudaStream_t stream_)
        : runtime(runtime_), config(config_), weights(weights_), prompt_lengths(lengths), options(options_),
          stream(stream_), llama(config_.architecture == Architecture::llama), dtype(dtype_),
          sequences(static_cast<int64_t>(lengths.size())), hidden(config_.hidden),
          qkv_cols((config_.heads + 2 * config_.kv_heads) * config_.head_dim),
          up_cols(llama ? 2 * config_.intermediate : config_.intermediate),
          pages_per_sequence(options_.page_size > 0 ? ceil_div(options_.max_context, options_.page_size) : 0),
          num_pages(sequences * pages_per_sequence) {
        check_sizes();
        plan_groups();
        for (const PrefillGroup& g : groups) ops_for_prefill(g);
        build_decode_ops();
        if (weights == nullptr) return;
        allocate();
        // Every op of the model at once: their kernels compile together on all cores.
        std::vector<const Op*> all_ops;
        for (auto& entry : prefill_ops) entry.second->each([&](const Op& op) { all_ops.push_back(&op); });
        decode_ops.each([&](const Op& op) { all_ops.push_back(&op); });
        runtime->prepare(all_ops);
        capture_decode_step();
    }

    ~Impl() {
        if (decode_graph != nullptr) cudaGraphExecDestroy(decode_graph);
    }

    void check_sizes() const {
        const auto refuse = [](const std::string& what) { throw std::invalid_argument(what); };
        if (sequences < 1) refuse("no prompts to run");
        if (options.page_size < 1) refuse(fmt::format("the page size must be >= 1, got {}", options.page_size));
        if (options.max_prefill_tokens < 1)
            refuse(fmt::format("the prefill group must be >= 1 token, got {}", options.max_prefill_tokens));
        for (size_t b = 0; b < prompt_lengths.size(); ++b) {
            if (prompt_lengths[b] < 1) refuse(fmt::format("prompt {} is empty", b));
            if (prompt_lengths[b] >= options.max_context)
                refuse(fmt::format("prompt {} has {} tokens: no room to generate within a context of {}", b,
                                   prompt_lengths[b], options.max_context));
        }
        if (!llama && options.max_context > config.max_positions)
            refuse(fmt::format("a context of {} tokens passes GPT-2's {} learned positions", options.max_context,
                               config.max_positions));
        if (num_pages * options.page_size >= std::numeric_limits<int32_t>::max())
            refuse(fmt::format("{} sequences of {} tokens pass the KV cache's 2^31 slots", sequences, options.max_context));
    }

    void plan_groups() {
        PrefillGroup group;
        for (size_t b = 0; b < prompt_lengths.size(); ++b) {
            const int64_t length = prompt_lengths[b];
            if (group.count > 0 && group.tokens + length > options.max_prefill_tokens) {
                groups.push_back(group);
                group = {b, 0, 0, 0};
            }
            ++group.count;
            group.tokens += length;
            group.longest = std::max(group.longest, length);
        }
        groups.push_back(group);
        max_rows = sequences;
        for (const PrefillGroup& g : groups) max_rows = std::max(max_rows, g.tokens);
    }

    void allocate() {
        const int64_t d = config.head_dim, kv = config.kv_heads;
        const size_t element = dtype_size(dtype);
        const size_t layer_cache = static_cast<size_t>(num_pages * options.page_size * kv * d) * element;
        cache = DeviceMemory(2 * static_cast<size_t>(config.layers) * layer_cache);
        for (int64_t l = 0; l < config.layers; ++l) {
            k_cache.push_back(cache.as<char>() + (2 * l) * layer_cache);
            v_cache.push_back(cache.as<char>() + (2 * l + 1) * layer_cache);
        }

        // Activations, each 256-byte aligned.
        size_t offset = 0;
        std::vector<std::pair<void**, size_t>> parts;
        const auto part = [&](void** target, int64_t elements) {
            parts.push_back({target, offset});
            offset += (static_cast<size_t>(elements) * element + 255) / 256 * 256;
        };
        part(&residual, max_rows * hidden);
        part(&delta, max_rows * hidden);
        part(&normed, max_rows * hidden);
        part(&qkv, max_rows * qkv_cols);
        part(&attention, max_rows * config.heads * d);
        part(&mlp, max_rows * up_cols);
        part(&act, max_rows * config.intermediate);
        part(&last, sequences * hidden);
        part(&last_delta, sequences * hidden);
        part(&last_normed, sequences * hidden);
        activations = DeviceMemory(offset);
        for (auto [target, at] : parts) *target = activations.as<char>() + at;

        logits = DeviceMemory(static_cast<size_t>(sequences * config.vocab) * sizeof(float));
        history = DeviceMemory(static_cast<size_t>((max_steps() + 1) * sequences) * sizeof(int32_t));

        // The int32 arrays and the fp32 sampling parameters in one allocation: carved once to
        // measure it, once to place them.
        const int64_t s = sequences;
        const auto carve = [&](uintptr_t base) {
            int64_t at = 0;
            const auto next = [&](int64_t count) {
                const uintptr_t p = base + static_cast<uintptr_t>(at) * 4;
                at += (count + 63) / 64 * 64;  // 256-byte aligned
                return p;
            };
            ids = reinterpret_cast<int32_t*>(next(max_rows));
            positions = reinterpret_cast<int32_t*>(next(max_rows));
            slots = reinterpret_cast<int32_t*>(next(max_rows));
            cu_seqlens = reinterpret_cast<int32_t*>(next(s + 1));
            last_rows = reinterpret_cast<int32_t*>(next(s));
            page_table = reinterpret_cast<int32_t*>(next(s * pages_per_sequence));
            tokens = reinterpret_cast<int32_t*>(next(s));
            zeros = reinterpret_cast<int32_t*>(next(s));
            top_k = reinterpret_cast<int32_t*>(next(s));
            temperature = reinterpret_cast<float*>(next(s));
            top_p = reinterpret_cast<float*>(next(s));
            min_p = reinterpret_cast<float*>(next(s));
            step_inputs = reinterpret_cast<int32_t*>(next(4 * s));
            return at;
        };
        indices = DeviceMemory(static_cast<size_t>(carve(0)) * 4);
        carve(reinterpret_cast<uintptr_t>(indices.data()));
        check_cuda(cudaMemsetAsync(indices.data(), 0, indices.size(), stream), "clearing the index arrays");

        // Page i of sequence b is page i x sequences + b: the sequences' pages interleave, as in a
        // cache whose pages were handed out as the sequences grew.
        host_page_table.resize(static_cast<size_t>(s * pages_per_sequence));
        for (int64_t b = 0; b < s; ++b)
            for (int64_t i = 0; i < pages_per_sequence; ++i)
                host_page_table[static_cast<size_t>(b * pages_per_sequence + i)] = static_cast<int32_t>(i * s + b);
        upload(page_table, host_page_table);
        const SamplingSettings& sampling = options.sampling;
        upload(top_k, std::vector<int32_t>(static_cast<size_t>(s), sampling.top_k));
        upload(temperature, std::vector<float>(static_cast<size_t>(s), sampling.temperature));
        upload(top_p, std::vector<float>(static_cast<size_t>(s), sampling.top_p));
        upload(min_p, std::vector<float>(static_cast<size_t>(s), sampling.min_p));

        // Every decode step's inputs, computed now so a step is one copy and one launch.
        const int64_t steps = max_steps();
        step_table = PinnedMemory(static_cast<size_t>(std::max<int64_t>(steps, 1) * 4 * s) * sizeof(int32_t));
        for (int64_t step = 0; step < steps; ++step) {
            int32_t* row = step_table.as<int32_t>() + step * 4 * s;
            for (int64_t b = 0; b < s; ++b) {
                const int64_t position = prompt_lengths[static_cast<size_t>(b)] + step;
                row[b] = static_cast<int32_t>(position);
                row[s + b] = slot_of(b, position);
                row[2 * s + b] = static_cast<int32_t>(position + 1);
                row[3 * s + b] = static_cast<int32_t>(step + 1);  // the prefill drew with offset 0
            }
        }
    }

    template <typename T>
    void upload(T* device, const std::vector<T>& host) {
        check_cuda(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream),
                   "uploading step inputs");
        check_cuda(cudaStreamSynchronize(stream), "uploading step inputs");  // `host` may go away
    }

    int32_t slot_of(int64_t sequence, int64_t position) const {
        const int64_t page = host_page_table[static_cast<size_t>(sequence * pages_per_sequence + position / options.page_size)];
        return static_cast<int32_t>(page * options.page_size + position % options.page_size);
    }

    int64_t max_steps() const {
        const int64_t longest = *std::max_element(prompt_lengths.begin(), prompt_lengths.end());
        return options.max_context - longest;
    }

    // The ops every forward pass over `rows` tokens shares.
    void build_layer_ops(StepOps& ops, int64_t rows) const {
        EmbeddingProblem embed{rows, config.vocab, hidden, dtype};
        if (!llama) embed.positions = true, embed.max_positions = config.max_positions;
        ops.embed.emplace(embed);
        if (llama) {
            RmsNormProblem norm{rows, hidden, dtype, {}, static_cast<float>(config.norm_eps)};
            ops.rms_norm.emplace(norm);
            norm.residual = true;
            ops.rms_norm_add.emplace(norm);
        } else {
            ops.layer_norm.emplace(LayerNormProblem{rows, hidden, dtype, {}, static_cast<float>(config.norm_eps)});
        }
        const GemmLayout layout = llama ? GemmLayout::nt : GemmLayout::nn;  // Llama's weights are [out, in]
        const auto gemm = [&](int64_t n, int64_t k, bool adds_residual, GemmEpilogue epilogue = GemmEpilogue::none) {
            GemmProblem p{rows, n, k, dtype};
            p.layout = layout;
            p.bias = !llama;
            p.epilogue = epilogue;
            // GPT-2's x += ...: C and D are the residual stream. (Llama's RMSNorm adds it: the
            // norm's extra read and write cost less than C in the GEMM's epilogue.)
            if (adds_residual && !llama) p.has_c = true, p.beta = 1.0f;
            return Gemm(p);
        };
        ops.qkv.emplace(gemm(qkv_cols, hidden, false));
        ops.out.emplace(gemm(hidden, config.heads * config.head_dim, true));
        ops.up.emplace(gemm(up_cols, hidden, false,
                            config.activation == Activation::gelu ? GemmEpilogue::gelu : GemmEpilogue::none));
        ops.down.emplace(gemm(hidden, config.intermediate, true));
        if (config.activation != Activation::gelu) {
            ElementwiseProblem e{llama ? ElementwiseOp::silu_mul : ElementwiseOp::gelu_tanh, rows, config.intermediate, dtype};
            if (llama) e.a_stride = e.b_stride = up_cols;
            ops.activation.emplace(e);
        }

        RopeProblem rope{rows, config.heads, config.kv_heads, config.head_dim};
        rope.dtype = dtype;
        if (llama) {
            rope.theta = config.rope_theta;
            rope.scaling = config.rope_scaling;
        } else {
            rope.style = RopeStyle::none;
        }
        rope.q_stride = rope.k_stride = rope.v_stride = rope.q_out_stride = rope.k_out_stride = qkv_cols;
        rope.append_kv = true, rope.page_size = options.page_size, rope.num_pages = num_pages;
        ops.rope.emplace(rope);
    }

    // The LM head and sampling over `rows` sequences.
    void build_head_ops(StepOps& ops, int64_t rows) const {
        if (llama) {
            RmsNormProblem norm{rows, hidden, dtype, {}, static_cast<float>(config.norm_eps)};
            norm.residual = true;
            ops.final_rms_norm.emplace(norm);
        } else {
            ops.final_layer_norm.emplace(LayerNormProblem{rows, hidden, dtype, {}, static_cast<float>(config.norm_eps)});
        }
        GemmProblem head{rows, config.vocab, hidden, dtype};
        head.layout = GemmLayout::nt;  // the [vocab, hidden] table
        head.out_dtype = DType::fp32;
        ops.lm_head.emplace(head);
        SamplingProblem sampling{rows, config.vocab, DType::fp32};
        sampling.greedy = options.sampling.greedy;
        sampling.seed = options.sampling.seed;
        ops.sampling.emplace(sampling);
    }

    StepOps& ops_for_prefill(const PrefillGroup& g) {
        auto& slot = prefill_ops[{g.tokens, static_cast<int64_t>(g.count)}];
        if (slot) return *slot;
        slot = std::make_unique<StepOps>();
        build_layer_ops(*slot, g.tokens);
        FlashAttentionProblem fa;
        fa.batch = static_cast<int64_t>(g.count);
        fa.num_heads = config.heads, fa.num_kv_heads = config.kv_heads, fa.head_dim = config.head_dim;
        fa.seqlen_q = fa.seqlen_k = g.longest;
        fa.dtype = dtype;
        fa.causal = true;
        fa.varlen = true, fa.total_q = fa.total_k = g.tokens;
        fa.q_seq_stride = fa.k_seq_stride = fa.v_seq_stride = qkv_cols;  // q, k and v straight from the QKV rows
        slot->prefill_attention.emplace(fa);
        slot->gather_last.emplace(EmbeddingProblem{static_cast<int64_t>(g.count), g.tokens, hidden, dtype});
        build_head_ops(*slot, static_cast<int64_t>(g.count));
        return *slot;
    }

    void build_decode_ops() {
        build_layer_ops(decode_ops, sequences);
        DecodeAttentionProblem da;
        da.batch = sequences;
        da.num_heads = config.heads, da.num_kv_heads = config.kv_heads, da.head_dim = config.head_dim;
        da.max_kv_len = pages_per_sequence * options.page_size;
        da.dtype = dtype;
        da.page_size = options.page_size, da.num_pages = num_pages, da.max_pages_per_seq = pages_per_sequence;
        da.q_batch_stride = qkv_cols;  // q straight from the QKV rows
        decode_ops.decode_attention.emplace(da);
        build_head_ops(decode_ops, sequences);
    }

    void gemm(Gemm& op, const void* a, const void* b, const void* c, const void* bias, void* d) {
        std::array<TensorArg, 4> in{a, b, nullptr, nullptr};
        size_t count = 2;
        if (c != nullptr) in[count++] = c;
        if (bias != nullptr) in[count++] = bias;
        op.run(*runtime, Inputs(in.data(), count), {d}, stream);
    }

    void mark(const char* name) {
        if (marks == nullptr) return;
        cudaEvent_t event = nullptr;
        check_cuda(cudaEventCreate(&event), "creating a profiling event");
        marks->emplace_back(name, event);
        check_cuda(cudaEventRecord(event, stream), "recording a profiling event");
    }

    // Milliseconds by op over the marks recorded (and destroys them).
    std::map<std::string, double> take_marks() {
        mark("end");
        check_cuda(cudaStreamSynchronize(stream), "profiling");
        std::map<std::string, double> ms;
        for (size_t i = 0; i + 1 < marks->size(); ++i) {
            float elapsed = 0;
            check_cuda(cudaEventElapsedTime(&elapsed, (*marks)[i].second, (*marks)[i + 1].second), "profiling");
            ms[(*marks)[i].first] += elapsed;
        }
        for (auto& entry : *marks) cudaEventDestroy(entry.second);
        marks->clear();
        return ms;
    }

    // One prefill and one decode step run eagerly (not as the graph), timed op by op.
    std::map<std::string, double> profile(const std::vector<std::vector<int32_t>>& prompts) {
        std::vector<std::pair<const char*, cudaEvent_t>> recorded;
        marks = &recorded;
        std::map<std::string, double> out;
        try {
            prefill(prompts, nullptr);
            for (const auto& [name, ms] : take_marks()) out["prefill: " + name] = ms;
            check_cuda(cudaMemcpyAsync(step_inputs, step_table.as<int32_t>(), static_cast<size_t>(4 * sequences) * 4,
                                       cudaMemcpyHostToDevice, stream),
                       "copying a step's inputs");
            run_decode_step_ops();
            for (const auto& [name, ms] : take_marks()) out["decode step: " + name] = ms;
        } catch (...) {
            for (auto& entry : recorded) cudaEventDestroy(entry.second);
            marks = nullptr;
            throw;
        }
        marks = nullptr;
        return out;
    }

    // The norm over a pass's rows, or (final) over its sequences' last rows. Llama adds `add` (the
    // last projection's output) to x first, in place; null in the first layer.
    void norm(StepOps& ops, bool final, void* x, const void* add, const void* weight, const void* bias, void* y) {
        if (llama) {
            mark(final ? "final norm" : "norm");
            if (add == nullptr) {
                ops.rms_norm->run(*runtime, {x, weight}, {y}, stream);
            } else {
                (final ? ops.final_rms_norm : ops.rms_norm_add)->run(*runtime, {add, x, weight}, {y, x}, stream);
            }
        } else {
            mark(final ? "final norm" : "norm");
            (final ? ops.final_layer_norm : ops.layer_norm)->run(*runtime, {x, weight, bias}, {y}, stream);
        }
    }

    // Embedding and every layer over `rows` tokens; `attend(layer, q, k, v)` writes `attention`.
    // Llama leaves the last layer's delta to add (the final norm does).
    template <class Attend>
    void run_layers(StepOps& ops, const int32_t* token_ids, const int32_t* token_positions, const int32_t* token_slots,
                    int64_t rows, Attend&& attend, std::vector<std::vector<float>>* hidden_out) {
        mark("embedding");
        if (llama) {
            ops.embed->run(*runtime, {token_ids, weights->embedding}, {residual}, stream);
        } else {
            ops.embed->run(*runtime, {token_ids, weights->embedding, token_positions, weights->positions}, {residual}, stream);
        }
        const size_t element = dtype_size(dtype);
        char* q = static_cast<char*>(qkv);
        char* k = q + config.heads * config.head_dim * element;
        char* v = k + config.kv_heads * config.head_dim * element;
        for (int64_t l = 0; l < config.layers; ++l) {
            const LayerWeights& w = weights->layers[static_cast<size_t>(l)];
            norm(ops, false, residual, l == 0 ? nullptr : delta, w.norm1, w.norm1_bias, normed);
            mark("qkv projection");
            gemm(*ops.qkv, normed, w.qkv, nullptr, w.qkv_bias, qkv);
            mark("rope + KV append");
            ops.rope->run(*runtime, {q, k, v, token_positions, token_slots}, {q, k, k_cache[l], v_cache[l]}, stream);
            mark("attention");
            attend(l, q, k, v);
            mark("out projection");
            gemm(*ops.out, attention, w.out, llama ? nullptr : residual, w.out_bias, llama ? delta : residual);
            norm(ops, false, residual, delta, w.norm2, w.norm2_bias, normed);
            mark("up projection");
            gemm(*ops.up, normed, w.up, nullptr, w.up_bias, mlp);
            const void* inner = mlp;
            if (ops.activation) {
                mark("activation");
                if (llama) {
                    ops.activation->run(*runtime, {mlp, static_cast<char*>(mlp) + config.intermediate * element}, {act}, stream);
                } else {
                    ops.activation->run(*runtime, {mlp}, {act}, stream);
                }
                inner = act;
            }
            mark("down projection");
            gemm(*ops.down, inner, w.down, llama ? nullptr : residual, w.down_bias, llama ? delta : residual);
            if (hidden_out != nullptr) append_layer_output(rows, (*hidden_out)[static_cast<size_t>(l)]);
        }
    }

    // The residual stream after a layer (Llama: with its delta added, in fp32), appended to `out`.
    void append_layer_output(int64_t rows, std::vector<float>& out) {
        const auto count = static_cast<size_t>(rows * hidden);
        std::vector<uint16_t> x(count), d(llama ? count : 0);
        check_cuda(cudaMemcpyAsync(x.data(), residual, count * 2, cudaMemcpyDeviceToHost, stream), "reading a layer's output");
        if (llama)
            check_cuda(cudaMemcpyAsync(d.data(), delta, count * 2, cudaMemcpyDeviceToHost, stream), "reading a layer's output");
        check_cuda(cudaStreamSynchronize(stream), "reading a layer's output");
        for (size_t i = 0; i < count; ++i)
            out.push_back(code_to_float(x[i], dtype) + (llama ? code_to_float(d[i], dtype) : 0.0f));
    }

    // The final norm, the LM head and sampling for the sequences from `first` on whose last rows
    // are `x` and (Llama) `x_delta` (as many as the ops were built for).
    void head(StepOps& ops, void* x, const void* x_delta, size_t first, const int32_t* offsets) {
        const ModelWeights* w = weights;
        norm(ops, true, x, x_delta, w->final_norm, w->final_norm_bias, last_normed);
        float* rows_logits = logits.as<float>() + first * static_cast<size_t>(config.vocab);
        mark("LM head");
        gemm(*ops.lm_head, last_normed, w->lm_head, nullptr, nullptr, rows_logits);
        int32_t* rows_tokens = tokens + first;
        mark("sampling");
        if (options.sampling.greedy) {
            ops.sampling->run(*runtime, {rows_logits}, {rows_tokens}, stream);
        } else {
            ops.sampling->run(*runtime,
                              {rows_logits, temperature + first, top_k + first, top_p + first, min_p + first, offsets + first},
                              {rows_tokens}, stream);
        }
    }

    void prefill(const std::vector<std::vector<int32_t>>& prompts, std::vector<std::vector<float>>* hidden_out) {
        if (prompts.size() != prompt_lengths.size())
            throw std::invalid_argument(fmt::format("{} prompts given, the decoder was sized for {}", prompts.size(),
                                                    prompt_lengths.size()));
        for (size_t b = 0; b < prompts.size(); ++b) {
            if (static_cast<int64_t>(prompts[b].size()) != prompt_lengths[b])
                throw std::invalid_argument(fmt::format("prompt {} has {} tokens, the decoder was sized for {}", b,
                                                        prompts[b].size(), prompt_lengths[b]));
            for (int32_t id : prompts[b])
                if (id < 0 || id >= config.vocab)
                    throw std::invalid_argument(fmt::format("prompt {} holds token {}, outside the vocabulary of {}", b, id,
                                                            config.vocab));
        }
        if (hidden_out != nullptr) hidden_out->assign(static_cast<size_t>(config.layers), {});
        for (const PrefillGroup& g : groups) {
            std::vector<int32_t> host_ids, host_positions, host_slots, host_cu{0}, host_last;
            for (size_t b = g.first; b < g.first + g.count; ++b) {
                const auto length = static_cast<int64_t>(prompts[b].size());
                host_ids.insert(host_ids.end(), prompts[b].begin(), prompts[b].end());
                for (int64_t t = 0; t < length; ++t) {
                    host_positions.push_back(static_cast<int32_t>(t));
                    host_slots.push_back(slot_of(static_cast<int64_t>(b), t));
                }
                host_cu.push_back(host_cu.back() + static_cast<int32_t>(length));
                host_last.push_back(host_cu.back() - 1);
            }
            upload(ids, host_ids);
            upload(positions, host_positions);
            upload(slots, host_slots);
            upload(cu_seqlens, host_cu);
            upload(last_rows, host_last);
            StepOps& ops = ops_for_prefill(g);
            auto attend = [&](int64_t, const void* q, const void* k, const void* v) {
                ops.prefill_attention->run(*runtime, {q, k, v, cu_seqlens, cu_seqlens}, {attention}, stream);
            };
            run_layers(ops, ids, positions, slots, g.tokens, attend, hidden_out);
            mark("last rows");
            ops.gather_last->run(*runtime, {last_rows, residual}, {last}, stream);
            if (llama) ops.gather_last->run(*runtime, {last_rows, delta}, {last_delta}, stream);
            head(ops, last, llama ? last_delta : nullptr, g.first, zeros);
        }
        check_cuda(cudaMemcpyAsync(history.data(), tokens, static_cast<size_t>(sequences) * 4, cudaMemcpyDeviceToDevice, stream),
                   "recording the first tokens");
        steps_done = 0;
    }

    // The decode step's kernels: they read the step's inputs from step_inputs and the tokens the
    // previous step sampled.
    void run_decode_step_ops() {
        const int32_t* step_positions = step_inputs;
        const int32_t* step_slots = step_inputs + sequences;
        const int32_t* lengths = step_inputs + 2 * sequences;
        const int32_t* offsets = step_inputs + 3 * sequences;
        auto attend = [&](int64_t layer, const void* q, const void*, const void*) {
            decode_ops.decode_attention->run(*runtime, {q, k_cache[layer], v_cache[layer], lengths, page_table},
                                             {attention}, stream);
        };
        run_layers(decode_ops, tokens, step_positions, step_slots, sequences, attend, nullptr);
        head(decode_ops, residual, llama ? delta : nullptr, 0, offsets);
    }

    void capture_decode_step() {
        check_cuda(cudaStreamSynchronize(stream), "preparing to capture the decode step");
        check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capturing the decode step");
        cudaGraph_t graph = nullptr;
        try {
            run_decode_step_ops();
        } catch (...) {
            cudaStreamEndCapture(stream, &graph);
            if (graph != nullptr) cudaGraphDestroy(graph);
            throw;
        }
        check_cuda(cudaStreamEndCapture(stream, &graph), "capturing the decode step");
        const cudaError_t status = cudaGraphInstantiate(&decode_graph, graph, 0);
        cudaGraphDestroy(graph);
        check_cuda(status, "instantiating the decode step's graph");
    }

    void decode_step() {
        if (steps_done >= max_steps())
            throw std::length_error(fmt::format("decode step {}: a sequence would pass the context of {} tokens",
                                                steps_done + 1, options.max_context));
        const size_t bytes = static_cast<size_t>(4 * sequences) * sizeof(int32_t);
        check_cuda(cudaMemcpyAsync(step_inputs, step_table.as<int32_t>() + steps_done * 4 * sequences, bytes,
                                   cudaMemcpyHostToDevice, stream),
                   "copying a step's inputs");
        check_cuda(cudaGraphLaunch(decode_graph, stream), "launching the decode step");
        ++steps_done;
        check_cuda(cudaMemcpyAsync(history.as<int32_t>() + steps_done * sequences, tokens,
                                   static_cast<size_t>(sequences) * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream),
                   "recording a step's tokens");
    }
};

Decoder::Decoder(Runtime& runtime, const ModelConfig& config, const ModelWeights& weights,
                 const std::vector<int64_t>& prompt_lengths, const DecoderOptions& options, cudaStream_t stream)
    : impl_(std::make_unique<Impl>(&runtime, config, &weights, weights.dtype(), prompt_lengths, options, stream)) {}

void Decoder::check(const ModelConfig& config, tileops::DType dtype, const std::vector<int64_t>& prompt_lengths,
                    const DecoderOptions& options) {
    Impl(nullptr, config, nullptr, dtype, prompt_lengths, options, nullptr);
}

Decoder::~Decoder() = default;

void Decoder::prefill(const std::vector<std::vector<int32_t>>& prompts, std::vector<std::vector<float>>* hidden) {
    impl_->prefill(prompts, hidden);
}

void Decoder::decode_step() { impl_->decode_step(); }

int64_t Decoder::max_steps() const { return impl_->max_steps(); }

std::vector<std::vector<int32_t>> Decoder::generated() const {
    const int64_t s = impl_->sequences, steps = impl_->steps_done + 1;
    std::vector<int32_t> flat(static_cast<size_t>(steps * s));
    check_cuda(cudaMemcpyAsync(flat.data(), impl_->history.data(), flat.size() * 4, cudaMemcpyDeviceToHost, impl_->stream),
               "reading the generated tokens");
    check_cuda(cudaStreamSynchronize(impl_->stream), "reading the generated tokens");
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(s));
    for (int64_t step = 0; step < steps; ++step)
        for (int64_t b = 0; b < s; ++b) out[static_cast<size_t>(b)].push_back(flat[static_cast<size_t>(step * s + b)]);
    return out;
}

std::map<std::string, double> Decoder::profile(const std::vector<std::vector<int32_t>>& prompts) {
    return impl_->profile(prompts);
}

std::vector<float> Decoder::last_logits() const {
    std::vector<float> out(static_cast<size_t>(impl_->sequences * impl_->config.vocab));
    check_cuda(cudaMemcpyAsync(out.data(), impl_->logits.data(), out.size() * 4, cudaMemcpyDeviceToHost, impl_->stream),
               "reading the logits");
    check_cuda(cudaStreamSynchronize(impl_->stream), "reading the logits");
    return out;
}

}  // namespace transformer
