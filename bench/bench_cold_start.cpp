// What a process pays before its first kernel runs: Runtime() and, per op, the first prepare()
// with an empty kernel cache (NVRTC compiles), then again with the cache on disk (a new Runtime on
// the same cache directory: the kernels load from disk), and the first run() of an op with an
// empty cache (it compiles only the kernel its operands select). Wall-clock milliseconds; the
// cache directory is a fresh one under --work (removed at the end).
//
// --layer: a serving process's start instead. The CUDA context alone (driver load, cuInit, the
// device's primary context), then Runtime(), then one prepare() of all the ops one Llama-3-8B layer runs
// (a 512-token prefill and a decode step of 8 sequences, bf16, paged KV) on the cache directory
// DIR/layer-cache, kept between runs: run it twice, and the second run is the warm start.
//
//   bench_cold_start --work DIR [--layer] [--json out.json]
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using namespace tileops::bench;
namespace fs = std::filesystem;

namespace {

double ms_of(const std::function<void()>& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

struct Case {
    std::string name;
    std::function<std::unique_ptr<Op>()> make;
};

std::vector<Case> cases() {
    return {
        {"gemm 4096x4096x4096 nt bf16",
         [] {
             return std::make_unique<Gemm>(
                 GemmProblem{.m = 4096, .n = 4096, .k = 4096, .dtype = DType::bf16, .layout = GemmLayout::nt});
         }},
        {"rmsnorm 4096x4096 bf16", [] { return std::make_unique<RmsNorm>(RmsNormProblem{.rows = 4096, .cols = 4096}); }},
        {"flash 1x32x8x128x4096x4096 causal bf16",
         [] {
             return std::make_unique<FlashAttention>(FlashAttentionProblem{
                 .batch = 1, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128, .seqlen_q = 4096, .causal = true});
         }},
        {"decode 8x32x8x128x1x4096 page16 bf16",
         [] {
             return std::make_unique<DecodeAttention>(DecodeAttentionProblem{.batch = 8, .max_kv_len = 4096,
                                                                               .page_size = 16, .num_pages = 2048,
                                                                               .max_pages_per_seq = 256});
         }},
    };
}

// Every op of one Llama-3-8B layer over `tokens` rows: with `prefill`, one sequence of `tokens`
// (flash attention, varlen), else a decode step of `tokens` sequences (paged decode attention).
std::vector<std::unique_ptr<Op>> llama3_8b_layer(int64_t tokens, bool prefill) {
    constexpr int64_t hidden = 4096, heads = 32, kv_heads = 8, head_dim = 128, intermediate = 14336;
    constexpr int64_t qkv_cols = (heads + 2 * kv_heads) * head_dim, page_size = 16, num_pages = 4096;
    std::vector<std::unique_ptr<Op>> ops;
    RmsNormProblem norm{.rows = tokens, .cols = hidden, .eps = 1e-5f};
    ops.push_back(std::make_unique<RmsNorm>(norm));
    norm.residual = true;
    ops.push_back(std::make_unique<RmsNorm>(norm));
    for (const auto& [n, k] : {std::pair{qkv_cols, hidden}, {hidden, heads * head_dim}, {2 * intermediate, hidden},
                               {hidden, intermediate}})
        ops.push_back(std::make_unique<Gemm>(GemmProblem{.m = tokens, .n = n, .k = k, .dtype = DType::bf16, .layout = GemmLayout::nt}));
    ops.push_back(std::make_unique<Elementwise>(ElementwiseProblem{.op = ElementwiseOp::silu_mul, .rows = tokens, .cols = intermediate,
                                                                   .a_stride = 2 * intermediate, .b_stride = 2 * intermediate}));
    RopeProblem rope{.num_tokens = tokens, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = head_dim};
    rope.theta = 500000.0, rope.scaling = RopeScaling::llama3();
    rope.q_stride = rope.k_stride = rope.v_stride = rope.q_out_stride = rope.k_out_stride = qkv_cols;
    rope.append_kv = true, rope.page_size = page_size, rope.num_pages = num_pages;
    ops.push_back(std::make_unique<Rope>(rope));
    if (prefill) {
        FlashAttentionProblem fa{.batch = 1, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = head_dim,
                                 .seqlen_q = tokens, .seqlen_k = tokens, .causal = true};
        fa.varlen = true, fa.total_q = fa.total_k = tokens;
        fa.q_seq_stride = fa.k_seq_stride = fa.v_seq_stride = qkv_cols;
        ops.push_back(std::make_unique<FlashAttention>(fa));
    } else {
        DecodeAttentionProblem da{.batch = tokens, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = head_dim,
                                  .max_kv_len = 4096};
        da.page_size = page_size, da.num_pages = num_pages, da.max_pages_per_seq = 4096 / page_size;
        da.q_batch_stride = qkv_cols;
        ops.push_back(std::make_unique<DecodeAttention>(da));
    }
    return ops;
}

// The --layer measurement (see the top of the file).
nlohmann::json layer_start(const fs::path& cache) {
    nlohmann::json out;
    CUdevice device = 0;
    CUcontext context = nullptr;
    out["cuda_context_ms"] = ms_of([&] {
        TILEOPS_CU_CHECK(cu().cuDeviceGet(&device, 0));
        TILEOPS_CU_CHECK(cu().cuDevicePrimaryCtxRetain(&context, device));
        TILEOPS_CU_CHECK(cu().cuCtxSetCurrent(context));
    });
    RuntimeOptions options;
    options.cache_dir = cache.string();
    std::unique_ptr<Runtime> rt;
    out["runtime_ms"] = ms_of([&] { rt = std::make_unique<Runtime>(options); });
    std::vector<std::unique_ptr<Op>> ops = llama3_8b_layer(512, true);
    for (auto& op : llama3_8b_layer(8, false)) ops.push_back(std::move(op));
    out["ops"] = ops.size();
    std::vector<const Op*> layer;
    for (const auto& op : ops) layer.push_back(op.get());
    out["prepare_ms"] = ms_of([&] { rt->prepare(layer); });  // all its kernels compile together
    const RuntimeStats stats = rt->stats();
    out["kernels_compiled"] = stats.kernels_compiled;
    out["disk_cache_hits"] = stats.disk_cache_hits;
    out["device"] = rt->device().name;
    fmt::print("CUDA context {:.1f} ms, Runtime() {:.1f} ms, prepare of {} ops of a Llama-3-8B layer {:.1f} ms "
               "({} kernels compiled, {} from disk) on {}\n",
               out["cuda_context_ms"].get<double>(), out["runtime_ms"].get<double>(), ops.size(),
               out["prepare_ms"].get<double>(), stats.kernels_compiled, stats.disk_cache_hits, rt->device().name);
    rt.reset();
    TILEOPS_CU_CHECK(cu().cuDevicePrimaryCtxRelease(device));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, work;
    bool layer = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--layer") layer = true;
        else if (arg == "--work" && i + 1 < argc) work = argv[++i];
        else {
            fmt::print(stderr, "usage: bench_cold_start --work DIR [--layer] [--json out.json]\n");
            return 2;
        }
    }
    if (work.empty()) {
        fmt::print(stderr, "bench_cold_start: give --work DIR (a scratch directory for the kernel caches)\n");
        return 2;
    }
    if (layer) {
        const nlohmann::json out = layer_start(fs::path(work) / "layer-cache");
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << '\n';
        return 0;
    }
    const fs::path cold_cache = fs::path(work) / "cold-start-cache", run_cache = fs::path(work) / "first-run-cache";
    fs::remove_all(cold_cache);
    fs::remove_all(run_cache);
    nlohmann::json out;
    RuntimeOptions options;
    options.cache_dir = cold_cache.string();
    std::unique_ptr<Runtime> rt;
    out["runtime_ms"] = ms_of([&] { rt = std::make_unique<Runtime>(options); });
    fmt::print("Runtime(): {:.1f} ms ({})\n", out["runtime_ms"].get<double>(), rt->device().name);
    out["device"] = rt->device().name;
    for (const Case& c : cases()) {
        auto op = c.make();
        const double cold = ms_of([&] { rt->prepare(*op); });
        const uint64_t compiled = rt->stats().kernels_compiled;
        Runtime warm_rt(options);  // same cache directory: kernels come from disk
        auto again = c.make();
        const double warm = ms_of([&] { warm_rt.prepare(*again); });
        out["prepare"][c.name] = {{"empty_cache_ms", cold}, {"disk_cache_ms", warm}, {"kernels_compiled_so_far", compiled}};
        fmt::print("{:<42} prepare: empty cache {:8.1f} ms, from disk {:6.1f} ms\n", c.name, cold, warm);
    }
    // The first run of a GEMM with an empty cache: only the kernel its operands select compiles;
    // with background compiling on, only a stand-in while the chosen kernel compiles beside it.
    for (const bool background : {false, true}) {
        RuntimeOptions first = options;
        first.cache_dir = (run_cache / (background ? "background" : "foreground")).string();
        first.background_compile = background;
        Runtime run_rt(first);
        Gemm gemm({.m = 4096, .n = 4096, .k = 4096, .dtype = DType::bf16, .layout = GemmLayout::nt});
        cuda::DeviceBuffer a = random_buffer(4096 * 4096 * 2, DType::bf16, 1), b = random_buffer(4096 * 4096 * 2, DType::bf16, 2),
                           d(4096 * 4096 * 2);
        const double first_run = ms_of([&] {
            gemm.run(run_rt, {a.data(), b.data()}, {d.data()});
            TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
        });
        const std::string key = background ? "first_gemm_run_background_compile" : "first_gemm_run";
        out[key + "_ms"] = first_run;
        out[key + "_kernels_compiled"] = run_rt.stats().kernels_compiled;
        fmt::print("first run of gemm 4096^3 nt, empty cache{}: {:.1f} ms ({} kernels compiled)\n",
                   background ? ", background compile on" : "", first_run, run_rt.stats().kernels_compiled);
    }
    fs::remove_all(cold_cache);
    fs::remove_all(run_cache);
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << '\n';
    return 0;
}
