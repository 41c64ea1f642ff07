// Runs a Llama-3 or GPT-2 architecture model on the library's ops: a varlen prefill of the prompts,
// then decode steps over a paged KV cache (one CUDA graph launch a step), greedy or sampled.
//
//   transformer_run --config config.json [--weights CHECKPOINT | --random-weights SEED]
//       (--prompts prompts.json | --prompt-lengths N[xC][,N[xC]...] [--prompt-seed S]) [--steps N]
//       [--temperature T] [--top-k K] [--top-p P] [--min-p M] [--seed S]
//       [--dtype bf16|fp16] [--max-context N] [--page-size N] [--prefill-group-tokens N]
//       [--prefill-repeats R] [--profile] [--ignore-eos] [--dump activations.safetensors] [--report report.json]
//
// CHECKPOINT is a .safetensors file, a sharded checkpoint's model.safetensors.index.json or a
// directory holding either. There is no tokenizer: prompts are token ids, and so is the output.
// prompts.json is a JSON array of token-id arrays; --prompt-lengths makes random prompts (2048x8:
// eight of 2048 tokens). Without --weights the weights are random
// (seeded; speed only). Any of --temperature, --top-k, --top-p, --min-p samples; otherwise greedy.
// --dump writes the residual stream after each layer of the prefill ("hidden.L", [tokens, hidden] fp32),
// the prefill's logits ("logits", [prompts, vocab] fp32) and the tokens ("tokens", [prompts,
// steps + 1] int32) for examples/transformer/check_against_torch.py. --report writes the timings
// (start to first token and its parts, decode step and prefill medians) as JSON. --profile times a
// prefill and a decode step op by op at the end (in the report too).
// A sequence stops at the config's eos_token_id (one or a list): what follows it is not printed
// or reported, and the decoding ends (within 16 steps) once every sequence has stopped (the batch
// runs whole until then; --dump holds every step's token); --ignore-eos runs all --steps steps. --temperature must be >= 0, --top-p in (0, 1],
// --min-p in [0, 1]; --dump and --report must be writable before anything runs.
// Exit status: 0 done, 2 bad arguments or model files (named), 1 anything else (no GPU or driver,
// a device failure, ...). --help prints the usage and exits 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "decoder.hpp"
#include "model_config.hpp"
#include "model_weights.hpp"
#include "read_bounded.hpp"
#include "safetensors.hpp"
#include "tileops/tileops.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kUsage =
    "usage: transformer_run --config config.json [--weights CHECKPOINT | --random-weights SEED]\n"
    "           (--prompts prompts.json | --prompt-lengths N[xC][,N[xC]...] [--prompt-seed S]) [--steps N]\n"
    "           [--temperature T] [--top-k K] [--top-p P] [--min-p M] [--seed S]\n"
    "           [--dtype bf16|fp16] [--max-context N] [--page-size N] [--prefill-group-tokens N]\n"
    "           [--prefill-repeats R] [--profile] [--ignore-eos] [--dump activations.safetensors]\n"
    "           [--report report.json]\n"
    "CHECKPOINT: model.safetensors, model.safetensors.index.json or a directory holding either.\n";

// The GPU or its driver failed (none found, ...): exit status 1.
struct DeviceError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Arguments that are wrong, named: exit status 2.
struct UsageError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

struct Arguments {
    std::string config, weights, prompts, dump, report;
    std::vector<int64_t> prompt_lengths;
    bool random_weights = false, profile = false, ignore_eos = false, help = false;
    uint64_t weight_seed = 0, prompt_seed = 0;
    int64_t steps = 16, max_context = 0, page_size = 16, prefill_group_tokens = 16384, prefill_repeats = 0;
    tileops::DType dtype = tileops::DType::bf16;
    transformer::SamplingSettings sampling;
};

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t low, int64_t high) {
    size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || text.empty() || value < low || value > high)
        throw UsageError(fmt::format("{} must be an integer in [{}, {}], got '{}'", flag, low, high, text));
    return value;
}

float parse_real(const std::string& flag, const std::string& text) {
    size_t used = 0;
    float value = 0;
    try {
        value = std::stof(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || text.empty() || !std::isfinite(value))
        throw UsageError(fmt::format("{} must be a finite number, got '{}'", flag, text));
    return value;
}

Arguments parse_arguments(int argc, char** argv) {
    Arguments a;
    bool sampled = false;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            a.help = true;
            return a;
        }
        if (flag == "--profile" || flag == "--ignore-eos") {
            (flag == "--profile" ? a.profile : a.ignore_eos) = true;
            continue;
        }
        if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value (or is not an option)", flag));
        const std::string value = argv[++i];
        constexpr int64_t kBig = int64_t{1} << 31;
        const auto once = [&](std::string& field) {
            if (!field.empty()) throw UsageError(fmt::format("{} is given twice", flag));
            if (value.empty()) throw UsageError(fmt::format("{} needs a non-empty value", flag));
            field = value;
        };
        if (flag == "--config") {
            once(a.config);
        } else if (flag == "--weights") {
            once(a.weights);
        } else if (flag == "--random-weights") {
            a.random_weights = true;
            a.weight_seed = static_cast<uint64_t>(parse_integer(flag, value, 0, kBig));
        } else if (flag == "--prompts") {
            a.prompts = value;
        } else if (flag == "--prompt-lengths") {
            // N[,N...], where NxC stands for C prompts of N tokens.
            size_t start = 0;
            while (start <= value.size()) {
                const size_t comma = std::min(value.find(',', start), value.size());
                const std::string item = value.substr(start, comma - start);
                const size_t times = item.find('x');
                const int64_t length = parse_integer(flag, item.substr(0, times), 1, kBig);
                const int64_t count = times == std::string::npos ? 1 : parse_integer(flag, item.substr(times + 1), 1, 65536);
                if (static_cast<int64_t>(a.prompt_lengths.size()) + count > 65536)
                    throw UsageError("--prompt-lengths: at most 65536 prompts");
                a.prompt_lengths.insert(a.prompt_lengths.end(), static_cast<size_t>(count), length);
                start = comma + 1;
            }
        } else if (flag == "--prompt-seed") {
            a.prompt_seed = static_cast<uint64_t>(parse_integer(flag, value, 0, kBig));
        } else if (flag == "--steps") {
            a.steps = parse_integer(flag, value, 0, kBig);
        } else if (flag == "--temperature") {
            a.sampling.temperature = parse_real(flag, value), sampled = true;
            if (a.sampling.temperature < 0) throw UsageError(fmt::format("--temperature must be >= 0, got '{}'", value));
        } else if (flag == "--top-k") {
            a.sampling.top_k = static_cast<int>(parse_integer(flag, value, 0, kBig - 1)), sampled = true;
        } else if (flag == "--top-p") {
            a.sampling.top_p = parse_real(flag, value), sampled = true;
            if (!(a.sampling.top_p > 0 && a.sampling.top_p <= 1))
                throw UsageError(fmt::format("--top-p must be in (0, 1], got '{}'", value));
        } else if (flag == "--min-p") {
            a.sampling.min_p = parse_real(flag, value), sampled = true;
            if (!(a.sampling.min_p >= 0 && a.sampling.min_p <= 1))
                throw UsageError(fmt::format("--min-p must be in [0, 1], got '{}'", value));
        } else if (flag == "--seed") {
            a.sampling.seed = static_cast<uint64_t>(parse_integer(flag, value, 0, kBig));
        } else if (flag == "--dtype") {
            try {
                a.dtype = tileops::parse_dtype(value);
            } catch (const std::exception&) {
                throw UsageError(fmt::format("--dtype must be bf16 or fp16, got '{}'", value));
            }
            if (a.dtype != tileops::DType::bf16 && a.dtype != tileops::DType::fp16)
                throw UsageError(fmt::format("--dtype must be bf16 or fp16, got '{}'", value));
        } else if (flag == "--max-context") {
            a.max_context = parse_integer(flag, value, 2, kBig);
        } else if (flag == "--page-size") {
            a.page_size = parse_integer(flag, value, 1, 1024);
        } else if (flag == "--prefill-group-tokens") {
            a.prefill_group_tokens = parse_integer(flag, value, 1, kBig);
        } else if (flag == "--prefill-repeats") {
            a.prefill_repeats = parse_integer(flag, value, 0, 1000);
        } else if (flag == "--dump") {
            once(a.dump);
        } else if (flag == "--report") {
            once(a.report);
        } else {
            throw UsageError(fmt::format("unknown option '{}'", flag));
        }
    }
    a.sampling.greedy = !sampled;
    if (a.random_weights && !a.weights.empty()) throw UsageError("give exactly one of --weights and --random-weights");
    if (a.config.empty()) throw UsageError("--config is required");
    if (a.weights.empty() == !a.random_weights)
        throw UsageError("give exactly one of --weights and --random-weights");
    if (a.prompts.empty() == a.prompt_lengths.empty())
        throw UsageError("give exactly one of --prompts and --prompt-lengths");
    return a;
}

std::vector<std::vector<int32_t>> read_prompts(const std::string& path, int64_t vocab) {
    const auto refuse = [&](const std::string& what) { throw UsageError(fmt::format("{}: {}", path, what)); };
    json root = transformer::parse_json_text(transformer::read_bounded(path, size_t{256} << 20, "prompts file"), refuse);
    if (!root.is_array() || root.empty()) refuse("expected a non-empty array of token-id arrays");
    std::vector<std::vector<int32_t>> prompts;
    for (size_t b = 0; b < root.size(); ++b) {
        if (!root[b].is_array() || root[b].empty()) refuse(fmt::format("prompt {} is not a non-empty array", b));
        auto& prompt = prompts.emplace_back();
        for (const json& id : root[b]) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
                refuse(fmt::format("prompt {} holds {}: token ids are integers in [0, {})", b, id.dump(), vocab));
            prompt.push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
    }
    return prompts;
}

std::vector<std::vector<int32_t>> random_prompts(const std::vector<int64_t>& lengths, int64_t vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t length : lengths) {
        auto& prompt = prompts.emplace_back(static_cast<size_t>(length));
        for (int32_t& id : prompt) id = token(rng);
    }
    return prompts;
}

// Refuses an output path that could not be written at the end (its directory missing or not
// writable, or a directory in its place), before the run starts.
void check_writable(const std::string& flag, const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code error;
    if (fs::is_directory(path, error)) throw UsageError(fmt::format("{} {}: a directory", flag, path));
    const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
    if (!fs::is_directory(parent, error) || ::access(parent.c_str(), W_OK) != 0)
        throw UsageError(fmt::format("{} {}: the directory {} is missing or not writable", flag, path, parent.string()));
    if (fs::exists(path, error) && ::access(path.c_str(), W_OK) != 0)
        throw UsageError(fmt::format("{} {}: not writable", flag, path));
}

// Each sequence up to and including its first end-of-sequence token.
std::vector<std::vector<int32_t>> cut_at_eos(std::vector<std::vector<int32_t>> sequences, const std::vector<int32_t>& eos) {
    for (auto& tokens : sequences) {
        const auto it = std::find_first_of(tokens.begin(), tokens.end(), eos.begin(), eos.end());
        if (it != tokens.end()) tokens.erase(it + 1, tokens.end());
    }
    return sequences;
}

bool all_ended(const std::vector<std::vector<int32_t>>& sequences, const std::vector<int32_t>& eos) {
    return std::all_of(sequences.begin(), sequences.end(), [&](const std::vector<int32_t>& tokens) {
        return std::find_first_of(tokens.begin(), tokens.end(), eos.begin(), eos.end()) != tokens.end();
    });
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const size_t mid = values.size() / 2;
    return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

template <typename T>
std::vector<std::byte> as_bytes(const std::vector<T>& values) {
    std::vector<std::byte> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

// Milliseconds between consecutive events.
std::vector<double> intervals_ms(const std::vector<cudaEvent_t>& events) {
    std::vector<double> out;
    for (size_t i = 1; i < events.size(); ++i) {
        float ms = 0;
        transformer::check_cuda(cudaEventElapsedTime(&ms, events[i - 1], events[i]), "timing");
        out.push_back(ms);
    }
    return out;
}

int run(const Arguments& args, Clock::time_point start) {
    using namespace transformer;
    // Everything a file or an argument can get wrong is refused before the GPU is touched.
    const ModelConfig config = load_model_config(args.config);
    std::unique_ptr<Checkpoint> file;
    if (!args.weights.empty()) {
        file = std::make_unique<Checkpoint>(args.weights);
        file->check(config);
    }
    if (!args.dump.empty()) check_writable("--dump", args.dump);
    if (!args.report.empty()) check_writable("--report", args.report);
    const auto prompts = args.prompts.empty() ? random_prompts(args.prompt_lengths, config.vocab, args.prompt_seed)
                                              : read_prompts(args.prompts, config.vocab);
    std::vector<int64_t> lengths;
    for (const auto& p : prompts) lengths.push_back(static_cast<int64_t>(p.size()));
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    DecoderOptions options;
    options.max_context = args.max_context > 0 ? args.max_context : longest + std::max<int64_t>(args.steps, 1);
    if (args.steps > options.max_context - longest)
        throw UsageError(fmt::format("{} steps after a prompt of {} tokens pass --max-context {}", args.steps, longest,
                                     options.max_context));
    options.page_size = args.page_size;
    options.max_prefill_tokens = args.prefill_group_tokens;
    options.sampling = args.sampling;
    check_model_ops(config, args.dtype, args.config);
    Decoder::check(config, args.dtype, lengths, options);

    json report;
    auto phase = Clock::now();
    std::optional<tileops::Runtime> started;
    try {
        started.emplace();
    } catch (const std::exception& e) {  // no driver or no device: not the input's fault
        throw DeviceError(e.what());
    }
    tileops::Runtime& runtime = *started;
    report["runtime_start_s"] = seconds_since(phase);
    report["gpu"] = runtime.device().name;

    phase = Clock::now();
    const ModelWeights weights = file ? ModelWeights::load(config, *file, args.dtype)
                                      : ModelWeights::random(config, args.dtype, args.weight_seed);
    check_cuda(cudaDeviceSynchronize(), "loading the weights");
    report["weights_s"] = seconds_since(phase);
    report["weights_gb"] = static_cast<double>(weights.bytes()) / 1e9;

    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
    phase = Clock::now();
    Decoder decoder(runtime, config, weights, lengths, options, stream);
    report["prepare_s"] = seconds_since(phase);

    phase = Clock::now();
    std::vector<std::vector<float>> hidden;
    decoder.prefill(prompts, args.dump.empty() ? nullptr : &hidden);
    check_cuda(cudaStreamSynchronize(stream), "the prefill");
    report["prefill_s"] = seconds_since(phase);
    report["first_token_s"] = seconds_since(start);
    report["first_token_without_weights_s"] = report["first_token_s"].get<double>() - report["weights_s"].get<double>();
    const tileops::RuntimeStats stats = runtime.stats();
    report["kernels_compiled"] = stats.kernels_compiled;
    report["kernels_from_disk_cache"] = stats.disk_cache_hits;
    report["kernels_from_bundle"] = stats.bundle_hits;
    std::vector<float> prefill_logits;
    if (!args.dump.empty()) prefill_logits = decoder.last_logits();

    std::vector<cudaEvent_t> events(static_cast<size_t>(args.steps + 1));
    for (cudaEvent_t& e : events) check_cuda(cudaEventCreate(&e), "creating an event");
    check_cuda(cudaEventRecord(events[0], stream), "timing");
    // Every sequence past its end-of-sequence token ends the decoding; it is looked for every
    // kEosCheckSteps steps, as it costs a round trip to the GPU.
    constexpr int64_t kEosCheckSteps = 16;
    const bool stop_at_eos = !args.ignore_eos && !config.eos_token_ids.empty();
    int64_t steps_run = 0;
    while (steps_run < args.steps) {
        decoder.decode_step();
        check_cuda(cudaEventRecord(events[static_cast<size_t>(++steps_run)], stream), "timing");
        if (stop_at_eos && steps_run % kEosCheckSteps == 0 && all_ended(decoder.generated(), config.eos_token_ids))
            break;
    }
    const auto all_generated = decoder.generated();
    const auto generated = args.ignore_eos ? all_generated : cut_at_eos(all_generated, config.eos_token_ids);
    const std::vector<double> steps_ms =
        intervals_ms(std::vector<cudaEvent_t>(events.begin(), events.begin() + static_cast<ptrdiff_t>(steps_run + 1)));
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    report["decode_step_ms"] = median(steps_ms);
    report["decode_steps"] = steps_run;

    if (args.prefill_repeats > 0) {
        std::vector<cudaEvent_t> marks(static_cast<size_t>(args.prefill_repeats + 1));
        for (cudaEvent_t& e : marks) check_cuda(cudaEventCreate(&e), "creating an event");
        check_cuda(cudaEventRecord(marks[0], stream), "timing");
        for (size_t r = 1; r < marks.size(); ++r) {
            decoder.prefill(prompts);
            check_cuda(cudaEventRecord(marks[r], stream), "timing");
        }
        check_cuda(cudaStreamSynchronize(stream), "the prefills");
        report["prefill_ms"] = median(intervals_ms(marks));
        for (cudaEvent_t e : marks) cudaEventDestroy(e);
    }
    if (args.profile) {
        const auto breakdown = decoder.profile(prompts);
        double prefill_total = 0, decode_total = 0;
        for (const auto& [name, ms] : breakdown) (name.rfind("prefill", 0) == 0 ? prefill_total : decode_total) += ms;
        for (const auto& [name, ms] : breakdown) {
            const double total = name.rfind("prefill", 0) == 0 ? prefill_total : decode_total;
            fmt::print("  {:<45} {:10.3f} ms {:5.1f}%\n", name, ms, 100.0 * ms / total);
            report["profile_ms"][name] = ms;
        }
    }
    report["prompts"] = lengths.size();
    report["prompt_tokens"] = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    report["tokens"] = generated;

    for (size_t b = 0; b < generated.size() && b < 8; ++b) {
        const auto& t = generated[b];
        fmt::print("sequence {} ({} prompt tokens): {}{}\n", b, lengths[b],
                   fmt::join(t.begin(), t.begin() + static_cast<ptrdiff_t>(std::min<size_t>(t.size(), 32)), " "),
                   t.size() > 32 ? " ..." : "");
    }
    fmt::print("{} on {}: first token {:.3f} s after start ({:.3f} s without the weights), decode step {:.3f} ms{}\n",
               config.architecture == Architecture::llama ? "Llama" : "GPT-2", runtime.device().name,
               report["first_token_s"].get<double>(), report["first_token_without_weights_s"].get<double>(),
               report["decode_step_ms"].get<double>(),
               args.prefill_repeats > 0 ? fmt::format(", prefill {:.3f} ms", report["prefill_ms"].get<double>()) : "");

    if (!args.dump.empty()) {
        std::vector<OutputTensor> tensors;
        const int64_t total = report["prompt_tokens"].get<int64_t>();
        for (size_t l = 0; l < hidden.size(); ++l)
            tensors.push_back({fmt::format("hidden.{}", l), "F32", {total, config.hidden}, as_bytes(hidden[l])});
        tensors.push_back({"logits", "F32", {static_cast<int64_t>(lengths.size()), config.vocab}, as_bytes(prefill_logits)});
        std::vector<int32_t> flat;
        for (const auto& t : all_generated) flat.insert(flat.end(), t.begin(), t.end());
        tensors.push_back({"tokens", "I32", {static_cast<int64_t>(lengths.size()), steps_run + 1}, as_bytes(flat)});
        write_safetensors(args.dump, tensors);
    }
    if (!args.report.empty()) {
        std::ofstream out(args.report);
        out << report.dump(2) << "\n";
        if (!out) throw std::runtime_error(fmt::format("{}: cannot write the report", args.report));
    }
    cudaStreamDestroy(stream);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const auto start = Clock::now();
    Arguments args;
    try {
        args = parse_arguments(argc, argv);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "transformer_run: %s\n%s", e.what(), kUsage);
        return 2;
    }
    if (args.help) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    try {
        return run(args, start);
    } catch (const DeviceError& e) {
        std::fprintf(stderr, "transformer_run: %s\n", e.what());
        return 1;
    } catch (const tileops::InvalidArgument& e) {  // a shape the library's ops refuse
        std::fprintf(stderr, "transformer_run: %s\n", e.what());
        return 2;
    } catch (const tileops::Unsupported& e) {  // or do not run (e.g. attention with head_dim 80)
        std::fprintf(stderr, "transformer_run: %s\n", e.what());
        return 2;
    } catch (const std::invalid_argument& e) {  // a model file, a prompt or a size the model cannot take
        std::fprintf(stderr, "transformer_run: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "transformer_run: %s\n", e.what());
        return 1;
    }
}
