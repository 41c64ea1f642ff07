// Times MlaDecode (DeepSeek multi-head latent attention decode) on the GPU: TFLOP/s =
// 2 x batch x heads x q_len x kv_len x (576 + 512) / time, and the latent cache read
// (batch x kv_len x 576 x 2 bytes) per second against the device's copy bandwidth.
//
//   bench_mla_decode [--json out.json] [--repeats N] [--sequential-pages] [--only BATCHxHEADSxLEN[xPAGE]]
//
// Shapes (issue 6): 128 heads, batch 64 and 128, KV length 4k and 8k, paged (64-token pages
// scattered over the pool) and contiguous; plus small batches and 16 / 32 / 64 heads (the heads one
// GPU holds under tensor parallelism), where the KV length is split over CTAs. bf16, one query token.
// Timing as in bench_common.hpp (L2 flushed, median). bench/torch_mla_peers.py times torch on the
// contiguous problems.
#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using namespace tileops::bench;
using cuda::DeviceBuffer;

namespace {

struct Case {
    int64_t batch, heads, len, page;
    std::string layout() const { return page > 0 ? fmt::format("paged{}", page) : "contiguous"; }
    double flops() const { return 2.0 * batch * heads * len * (MlaDecode::kKeyDim + MlaDecode::kLatentDim); }
    double kv_bytes() const { return 2.0 * batch * len * MlaDecode::kKeyDim; }
};

nlohmann::json run_case(Runtime& rt, const Case& c, tuning::KernelTimer& timer, int repeats, bool shuffle_pages) {
    MlaDecodeProblem p;
    p.batch = c.batch;
    p.num_heads = c.heads;
    p.max_kv_len = c.len;
    p.dtype = DType::bf16;
    std::vector<int32_t> table;
    if (c.page > 0) {
        p.page_size = c.page;
        p.max_pages_per_seq = (c.len + c.page - 1) / c.page;
        p.num_pages = c.batch * p.max_pages_per_seq;
        table = pool_pages(p.num_pages, shuffle_pages);
    }
    MlaDecode op(p);
    DeviceBuffer q = random_buffer(static_cast<size_t>(c.batch * c.heads * MlaDecode::kKeyDim) * 2, DType::bf16);
    DeviceBuffer kv = random_buffer(static_cast<size_t>(c.kv_bytes()), DType::bf16);
    DeviceBuffer out(static_cast<size_t>(c.batch * c.heads * MlaDecode::kLatentDim) * 2);
    DeviceBuffer lengths = int_buffer(std::vector<int32_t>(static_cast<size_t>(c.batch), static_cast<int32_t>(c.len)));
    DeviceBuffer pages = table.empty() ? DeviceBuffer(4) : int_buffer(table);
    auto fn = [&] {
        if (c.page > 0) op.run(rt, {q.data(), kv.data(), lengths.data(), pages.data()}, {out.data()});
        else op.run(rt, {q.data(), kv.data(), lengths.data()}, {out.data()});
    };
    const double ms = time_ms(fn, timer, repeats);
    return {{"layout", c.layout()}, {"batch", c.batch}, {"heads", c.heads}, {"kv_len", c.len},
            {"median_us", ms * 1e3}, {"tflops", c.flops() / (ms * 1e-3) / 1e12},
            {"kv_gbps", c.kv_bytes() / (ms * 1e-3) / 1e9}, {"config", rt.explain(op)}};
}

}  // namespace

int main(int argc, char** argv) try {
    std::string json_path;
    int repeats = 20;
    std::vector<int64_t> only;  // one problem (for profiling)
    bool shuffle_pages = true;  // --sequential-pages: each sequence's pages in pool order
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else if (arg == "--only" && i + 1 < argc) only = parse_dims(argv[++i]);
        else if (arg == "--sequential-pages") shuffle_pages = false;
        else {
            fmt::print(stderr, "usage: bench_mla_decode [--json out.json] [--repeats N] [--sequential-pages] [--only BATCHxHEADSxLEN[xPAGE]]\n");
            return 2;
        }
    }
    if (!only.empty() && only.size() != 3 && only.size() != 4) {
        fmt::print(stderr, "bench_mla_decode: --only takes BATCHxHEADSxLEN[xPAGE]\n");
        return 2;
    }
    Runtime rt;
    const DeviceInfo& device = rt.device();
    tuning::KernelTimer timer(device);
    const double copy_gbps = measure_copy_bandwidth(timer, repeats);
    print_device(device, copy_gbps);
    std::vector<Case> cases;
    for (int64_t page : {64, 0})
        for (int64_t batch : {64, 128})
            for (int64_t len : {4096, 8192}) cases.push_back({batch, 128, len, page});
    for (int64_t heads : {16, 32, 64}) cases.push_back({64, heads, 4096, 64});
    for (int64_t batch : {1, 8}) cases.push_back({batch, 128, 4096, 64});
    cases.push_back({1, 16, 32768, 64});
    if (!only.empty()) cases = {{only[0], only[1], only[2], only.size() == 4 ? only[3] : 0}};
    nlohmann::json json;
    json["device"] = device.name;
    json["arch"] = device.arch();
    json["copy_gbps"] = copy_gbps;
    fmt::print("{:<11} {:>5} {:>5} {:>6} {:>10} {:>8} {:>8}\n", "layout", "batch", "heads", "kv_len", "time us", "TFLOP/s",
               "KV GB/s");
    for (const Case& c : cases) {
        nlohmann::json r = run_case(rt, c, timer, repeats, shuffle_pages);
        fmt::print("{:<11} {:>5} {:>5} {:>6} {:>10.1f} {:>8.1f} {:>8.0f}   {}\n", c.layout(), c.batch, c.heads, c.len,
                   r["median_us"].get<double>(), r["tflops"].get<double>(), r["kv_gbps"].get<double>(),
                   r["config"].get<std::string>());
        json["cases"].push_back(r);
        if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << '\n';  // keep what a cut run measured
    }
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_mla_decode: {}\n", e.what());
    return 1;
}
