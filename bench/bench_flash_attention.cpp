// Times FlashAttention (forward, prefill) on the GPU: TFLOP/s = 4 * batch * heads * seqlen^2 *
// head_dim / time, halved when causal. bench/torch_flash_peers.py times torch SDPA's flash
// (FlashAttention-2) and cuDNN backends on the same cases; compare_flash_attention.py merges both.
//
//   bench_flash_attention [--json out.json] [--repeats N] [--quick] [--list] [--only CASE]...
//
// Cases (the flash attention issue): batch x seqlen in {16 x 1k, 4 x 4k, 2 x 8k, 1 x 16k} (16k
// tokens each) with 16 heads, head_dim 64 and 128, bf16 and fp16, causal and not; then GQA, 32
// query heads over 8 KV heads, D = 128, bf16, the same four, causal and not. --quick: D = 128
// bf16, 16 x 16 x 1k and 4 x 16 x 4k, causal and not. seqlen_k = seqlen_q, default scale.
// Layout BSHD, packed: q and out [batch, seqlen, heads, head_dim], k and v [batch, seqlen,
// kv_heads, head_dim]. Inputs uniform in [-2, 2) (random_buffer); the output is poisoned (NaN)
// before the runs and checked finite after them. Config: the runtime's choice (tuning database
// or heuristic), recorded with Runtime::explain. Timing as in bench_common.hpp (L2 flushed, median).
//
// CASE (--only, repeatable: runs these instead of the list, listed or not):
//   BATCHxHEADS[/KV_HEADS]xSEQLENxDIM[:bf16|:fp16][:causal|:noncausal]
// A part left out means both: --only 4x32/8x4096x128:bf16 runs that shape causal and noncausal.
// --list prints the cases, one a line, and exits (no GPU needed). torch_flash_peers.py takes the
// same --quick, --only and --list, so `diff <(bench_flash_attention --list) <(python3
// bench/torch_flash_peers.py --list)` checks that both programs time the same cases.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "tileops/tileops.hpp"
#include "util/host_dtype.hpp"

using namespace tileops;
using namespace tileops::bench;
using cuda::DeviceBuffer;

namespace {

struct Case {
    int64_t batch, heads, kv_heads, seqlen, head_dim;
    DType dtype;
    bool causal;

    // "4x16x4096x128" or, with GQA, "4x32/8x4096x128".
    std::string shape() const {
        const std::string h = kv_heads == heads ? fmt::format("{}", heads) : fmt::format("{}/{}", heads, kv_heads);
        return fmt::format("{}x{}x{}x{}", batch, h, seqlen, head_dim);
    }
    // The key both programs' JSON carry: "4x32/8x4096x128 bf16 causal".
    std::string key() const { return fmt::format("{} {} {}", shape(), dtype_name(dtype), causal ? "causal" : "noncausal"); }
    double flops() const {
        return 4.0 * batch * heads * static_cast<double>(seqlen) * seqlen * head_dim * (causal ? 0.5 : 1.0);
    }
    int64_t q_elements() const { return batch * seqlen * heads * head_dim; }
    int64_t kv_elements() const { return batch * seqlen * kv_heads * head_dim; }
};

// The issue's cases. Keep in step with issue_cases() in torch_flash_peers.py (same order).
std::vector<Case> issue_cases(bool quick) {
    using Lengths = std::vector<std::pair<int64_t, int64_t>>;  // (batch, seqlen)
    std::vector<Case> cases;
    if (quick) {
        for (auto [batch, seqlen] : Lengths{{16, 1024}, {4, 4096}})
            for (bool causal : {false, true}) cases.push_back({batch, 16, 16, seqlen, 128, DType::bf16, causal});
        return cases;
    }
    const Lengths lengths{{16, 1024}, {4, 4096}, {2, 8192}, {1, 16384}};
    for (DType dtype : {DType::bf16, DType::fp16})
        for (int64_t head_dim : {64, 128})
            for (auto [batch, seqlen] : lengths)
                for (bool causal : {false, true}) cases.push_back({batch, 16, 16, seqlen, head_dim, dtype, causal});
    for (auto [batch, seqlen] : lengths)
        for (bool causal : {false, true}) cases.push_back({batch, 32, 8, seqlen, 128, DType::bf16, causal});
    return cases;
}

std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> parts;
    for (size_t at = 0;;) {
        const size_t end = text.find(separator, at);
        parts.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
        if (end == std::string::npos) return parts;
        at = end + 1;
    }
}

int64_t positive(const std::string& text) {
    size_t used = 0;
    const int64_t value = text.empty() ? 0 : std::stoll(text, &used);
    if (used != text.size() || value <= 0) throw std::invalid_argument("'" + text + "' is not a positive integer");
    return value;
}

// The cases one --only argument names (syntax in the header).
std::vector<Case> parse_only(const std::string& text) {
    const std::vector<std::string> parts = split(text, ':');
    const std::vector<std::string> dims = split(parts[0], 'x');
    if (dims.size() != 4) throw std::invalid_argument("--only " + text + ": the shape is not BATCHxHEADS[/KV_HEADS]xSEQLENxDIM");
    const std::vector<std::string> heads = split(dims[1], '/');
    if (heads.size() > 2) throw std::invalid_argument("--only " + text + ": heads are HEADS or HEADS/KV_HEADS");
    std::vector<DType> dtypes{DType::bf16, DType::fp16};
    std::vector<bool> causals{false, true};
    for (size_t i = 1; i < parts.size(); ++i) {
        if (parts[i] == "bf16" || parts[i] == "fp16") dtypes = {parse_dtype(parts[i])};
        else if (parts[i] == "causal" || parts[i] == "noncausal") causals = {parts[i] == "causal"};
        else throw std::invalid_argument("--only " + text + ": '" + parts[i] + "' is not bf16, fp16, causal or noncausal");
    }
    const int64_t num_heads = positive(heads[0]);
    std::vector<Case> cases;
    for (DType dtype : dtypes)
        for (bool causal : causals)
            cases.push_back({positive(dims[0]), num_heads, heads.size() == 2 ? positive(heads[1]) : num_heads,
                             positive(dims[2]), positive(dims[3]), dtype, causal});
    return cases;
}

// q, k and v of every case of one dtype: one random buffer (no two of them alike), sliced.
struct Operands {
    DeviceBuffer qkv;
    int64_t q_elements = 0, kv_elements = 0;

    Operands(DType dtype, int64_t q_max, int64_t kv_max)
        : qkv(random_buffer(static_cast<size_t>(q_max + 2 * kv_max) * dtype_size(dtype), dtype)),
          q_elements(q_max),
          kv_elements(kv_max) {}
    const void* at(int64_t element) const {
        return static_cast<const char*>(qkv.data()) + static_cast<size_t>(element) * 2;  // bf16 and fp16
    }
    const void* q() const { return at(0); }
    const void* k() const { return at(q_elements); }
    const void* v() const { return at(q_elements + kv_elements); }
};

bool all_finite(const DeviceBuffer& out, int64_t elements, DType dtype) {
    std::vector<uint8_t> host(static_cast<size_t>(elements) * dtype_size(dtype));
    out.download(host.data(), host.size());
    for (size_t i = 0; i < host.size(); i += dtype_size(dtype))
        if (!std::isfinite(util::decode_value(dtype, &host[i]))) return false;
    return true;
}

nlohmann::json run_case(Runtime& rt, const Case& c, const Operands& in, DeviceBuffer& out, tuning::KernelTimer& timer,
                        int repeats) {
    FlashAttentionProblem p;
    p.batch = c.batch;
    p.num_heads = c.heads;
    p.num_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.seqlen_q = c.seqlen;
    p.dtype = c.dtype;
    p.causal = c.causal;
    p.layout = AttentionLayout::bshd;
    FlashAttention op(p);
    rt.prepare(op);  // compile before the warm-up runs
    out.fill_bytes(0xff);  // NaN in bf16 and fp16
    const double ms = time_ms([&] { op.run(rt, {in.q(), in.k(), in.v()}, {out.data()}); }, timer, repeats);
    return {{"median_us", ms * 1e3}, {"tflops", c.flops() / (ms * 1e-3) / 1e12}, {"config", rt.explain(op)},
            {"output_finite", all_finite(out, c.q_elements(), c.dtype)}};
}

}  // namespace

int main(int argc, char** argv) try {
    std::string json_path;
    int repeats = 20;
    bool quick = false, list = false;
    std::vector<Case> cases;  // from --only
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else if (arg == "--quick") quick = true;
        else if (arg == "--list") list = true;
        else if (arg == "--only" && i + 1 < argc) {
            for (const Case& c : parse_only(argv[++i])) cases.push_back(c);
        } else {
            fmt::print(stderr, "usage: bench_flash_attention [--json out.json] [--repeats N] [--quick] [--list] "
                               "[--only BATCHxHEADS[/KV_HEADS]xSEQLENxDIM[:bf16|:fp16][:causal|:noncausal]]...\n");
            return 2;
        }
    }
    if (cases.empty()) cases = issue_cases(quick);
    if (list) {
        for (const Case& c : cases) fmt::print("{}\n", c.key());
        return 0;
    }
    Runtime rt;
    const DeviceInfo& device = rt.device();
    fmt::print("device: {} ({}), {} SMs; layout bshd\n", device.name, device.arch(), device.sm_count);
    std::map<DType, int64_t> q_max, kv_max;  // the largest operands of each dtype
    for (const Case& c : cases) {
        q_max[c.dtype] = std::max(q_max[c.dtype], c.q_elements());
        kv_max[c.dtype] = std::max(kv_max[c.dtype], c.kv_elements());
    }
    std::map<DType, Operands> inputs;
    int64_t out_max = 0;
    for (auto [dtype, elements] : q_max) {
        inputs.try_emplace(dtype, dtype, elements, kv_max[dtype]);
        out_max = std::max(out_max, elements);
    }
    DeviceBuffer out(static_cast<size_t>(out_max) * 2);
    tuning::KernelTimer timer(device);
    nlohmann::json json;
    json["device"] = device.name;
    json["arch"] = device.arch();
    json["layout"] = "bshd";
    json["inputs"] = "uniform in [-2, 2)";
    json["repeats"] = repeats;
    fmt::print("{:<30} {:>10} {:>8}\n", "case", "time us", "TFLOP/s");
    for (const Case& c : cases) {
        nlohmann::json r = {{"case", c.key()},         {"batch", c.batch},       {"heads", c.heads},
                            {"kv_heads", c.kv_heads},  {"seqlen", c.seqlen},     {"head_dim", c.head_dim},
                            {"dtype", dtype_name(c.dtype)}, {"causal", c.causal}, {"flops", c.flops()}};
        try {
            r.update(run_case(rt, c, inputs.at(c.dtype), out, timer, repeats));
            const std::string config = r["config"].get<std::string>();
            const size_t from = config.find("config {");
            fmt::print("{:<30} {:>10.1f} {:>8.1f}   {}{}\n", c.key(), r["median_us"].get<double>(),
                       r["tflops"].get<double>(), r["output_finite"].get<bool>() ? "" : "NON-FINITE OUTPUT; ",
                       from == std::string::npos ? config : config.substr(from));
        } catch (const std::exception& e) {  // keep going: one failing case must not hide the others
            const std::string error = e.what();
            r["error"] = error;
            fmt::print("{:<30} error: {}\n", c.key(), error.substr(0, error.find('\n')));  // the JSON has all of it
        }
        json["cases"].push_back(r);
        if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << '\n';  // keep what a cut run measured
    }
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_flash_attention: {}\n", e.what());
    return 1;
}
