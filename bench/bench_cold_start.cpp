// What a process pays before its first kernel runs: Runtime() and, per op, the first prepare()
// with an empty kernel cache (NVRTC compiles), then again with the cache on disk (a new Runtime on
// the same cache directory: the kernels load from disk), and the first run() of an op with an
// empty cache (it compiles only the kernel its operands select). Wall-clock milliseconds; the
// cache directory is a fresh one under --work (removed at the end).
//
//   bench_cold_start --work DIR [--json out.json]
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

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, work;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--work" && i + 1 < argc) work = argv[++i];
        else {
            fmt::print(stderr, "usage: bench_cold_start --work DIR [--json out.json]\n");
            return 2;
        }
    }
    if (work.empty()) {
        fmt::print(stderr, "bench_cold_start: give --work DIR (a scratch directory for the kernel caches)\n");
        return 2;
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
    // The first run of a GEMM with an empty cache: only the kernel its operands select compiles.
    {
        RuntimeOptions first = options;
        first.cache_dir = run_cache.string();
        Runtime run_rt(first);
        Gemm gemm({.m = 4096, .n = 4096, .k = 4096, .dtype = DType::bf16, .layout = GemmLayout::nt});
        cuda::DeviceBuffer a = random_buffer(4096 * 4096 * 2, DType::bf16, 1), b = random_buffer(4096 * 4096 * 2, DType::bf16, 2),
                           d(4096 * 4096 * 2);
        const double first_run = ms_of([&] {
            gemm.run(run_rt, {a.data(), b.data()}, {d.data()});
            TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
        });
        out["first_gemm_run_ms"] = first_run;
        out["first_gemm_run_kernels_compiled"] = run_rt.stats().kernels_compiled;
        fmt::print("first run of gemm 4096^3 nt, empty cache: {:.1f} ms ({} kernels compiled)\n", first_run,
                   run_rt.stats().kernels_compiled);
    }
    fs::remove_all(cold_cache);
    fs::remove_all(run_cache);
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << '\n';
    return 0;
}
