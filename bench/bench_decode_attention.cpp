// Times DecodeAttention on the GPU: achieved bandwidth = bytes of K and V the problem needs /
// time, against the device's measured copy bandwidth.
//
//   bench_decode_attention [--json out.json] [--repeats N] [--quick] [--sequential-pages] [--fp8-kv]
//                          [--only BATCHxHEADSxKV_HEADSxLEN[xPAGE]]
//
// Shapes (issue 6): batch {1, 8, 32, 128} x KV length {1k, 4k, 16k, 64k} x heads 32/8 and 32/32
// (D = 128, bf16, one query token), contiguous and paged (pages of 16 and 64 tokens, pages of a
// sequence scattered over the pool). Problems whose KV cache would exceed 24 GB are skipped.
// Every sequence has the full length. Timing as in bench_common.hpp (L2 flushed, median).
// --fp8-kv: the same problems over an fp8 e4m3 cache (half the bytes; bandwidth counts those).
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
    int64_t batch, heads, kv_heads, head_dim, len, page;
    bool heads_outer = false;  // contiguous KV as [batch, kv_heads, len, dim] (torch's layout) instead of [batch, len, kv_heads, dim]
    bool fp8 = false;          // an fp8 e4m3 cache (else bf16)
    std::string layout() const {
        const std::string base = page > 0 ? fmt::format("paged{}", page) : heads_outer ? "contiguous-bhsd" : "contiguous";
        return fp8 ? base + "-fp8" : base;
    }
    DType kv_dtype() const { return fp8 ? DType::fp8_e4m3 : DType::bf16; }
    double kv_bytes() const { return 2.0 * batch * len * kv_heads * head_dim * static_cast<double>(dtype_size(kv_dtype())); }
};

nlohmann::json run_case(Runtime& rt, const Case& c, tuning::KernelTimer& timer, int repeats, bool shuffle_pages) {
    DecodeAttentionProblem p;
    p.batch = c.batch;
    p.num_heads = c.heads;
    p.num_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.max_kv_len = c.len;
    p.dtype = DType::bf16;
    if (c.fp8) p.kv_dtype = DType::fp8_e4m3;
    std::vector<int32_t> table;
    if (c.page > 0) {
        p.page_size = c.page;
        p.max_pages_per_seq = (c.len + c.page - 1) / c.page;
        p.num_pages = c.batch * p.max_pages_per_seq;
        table = pool_pages(p.num_pages, shuffle_pages);
    }
    if (c.heads_outer) {
        p.kv_head_stride = c.len * c.head_dim;
        p.kv_token_stride = c.head_dim;
        p.kv_outer_stride = c.kv_heads * c.len * c.head_dim;
    }
    DecodeAttention op(p);
    const size_t kv_bytes = static_cast<size_t>(c.kv_bytes() / 2);
    DeviceBuffer q = random_buffer(static_cast<size_t>(c.batch * c.heads * c.head_dim) * 2, DType::bf16);
    // Random keys and values, as a real cache holds (a constant fill measured up to 15% apart from
    // the tuner's random operands on one shape, 128 x 32/8 x 1k); 8 MiB of them repeated.
    constexpr size_t kPeriod = size_t{8} << 20;
    DeviceBuffer k = random_buffer(kv_bytes, c.kv_dtype(), 1, kPeriod), v = random_buffer(kv_bytes, c.kv_dtype(), 2, kPeriod);
    DeviceBuffer out(static_cast<size_t>(c.batch * c.heads * c.head_dim) * 2);
    DeviceBuffer lengths = int_buffer(std::vector<int32_t>(static_cast<size_t>(c.batch), static_cast<int32_t>(c.len)));
    DeviceBuffer pages = table.empty() ? DeviceBuffer(4) : int_buffer(table);
    auto fn = [&] {
        if (c.page > 0)
            op.run(rt, {q.data(), k.data(), v.data(), lengths.data(), pages.data()}, {out.data()});
        else
            op.run(rt, {q.data(), k.data(), v.data(), lengths.data()}, {out.data()});
    };
    const double ms = time_ms(fn, timer, repeats);
    const double gbps = c.kv_bytes() / (ms * 1e-3) / 1e9;
    return {{"layout", c.layout()}, {"batch", c.batch}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
            {"head_dim", c.head_dim}, {"kv_len", c.len}, {"kv_bytes", c.kv_bytes()}, {"median_us", ms * 1e3},
            {"gbps", gbps}, {"config", rt.explain(op)}};
}

}  // namespace

int main(int argc, char** argv) try {
    std::string json_path;
    int repeats = 20;
    bool quick = false;
    std::vector<int64_t> only;  // one problem (for profiling)
    bool shuffle_pages = true;  // --sequential-pages: each sequence's pages in pool order
    bool fp8_kv = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else if (arg == "--quick") quick = true;
        else if (arg == "--only" && i + 1 < argc) only = parse_dims(argv[++i]);
        else if (arg == "--sequential-pages") shuffle_pages = false;
        else if (arg == "--fp8-kv") fp8_kv = true;
        else {
            fmt::print(stderr, "usage: bench_decode_attention [--json out.json] [--repeats N] [--quick] "
                               "[--sequential-pages] [--fp8-kv] [--only BATCHxHEADSxKV_HEADSxLEN[xPAGE]]\n");
            return 2;
        }
    }
    if (!only.empty() && only.size() != 4 && only.size() != 5) {
        fmt::print(stderr, "bench_decode_attention: --only takes BATCHxHEADSxKV_HEADSxLEN[xPAGE]\n");
        return 2;
    }
    Runtime rt;
    const DeviceInfo& device = rt.device();
    tuning::KernelTimer timer(device);
    const double copy_gbps = measure_copy_bandwidth(timer, repeats);
    print_device(device, copy_gbps);
    std::vector<Case> cases;
    const std::vector<int64_t> batches = quick ? std::vector<int64_t>{1, 32} : std::vector<int64_t>{1, 8, 32, 128};
    const std::vector<int64_t> lens = quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{1024, 4096, 16384, 65536};
    for (int64_t page : {0, 16, 64})
        for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{32, 8}, {32, 32}})
            for (int64_t batch : batches)
                for (int64_t len : lens) {
                    if (page > 0 && kv_heads == 32) continue;  // paged: the GQA shapes
                    const Case c{batch, heads, kv_heads, 128, len, page};
                    if (c.kv_bytes() <= 24e9) cases.push_back(c);
                }
    // The same problems with the heads outside the sequence (torch's layout), to separate layout from kernel.
    for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{32, 8}, {32, 32}})
        for (int64_t batch : {1, 32}) cases.push_back({batch, heads, kv_heads, 128, 4096, 0, true});
    if (!only.empty()) cases = {{only[0], only[1], only[2], 128, only[3], only.size() == 5 ? only[4] : 0}};
    for (Case& c : cases) c.fp8 = fp8_kv;
    nlohmann::json json;
    json["device"] = device.name;
    json["arch"] = device.arch();
    json["copy_gbps"] = copy_gbps;
    fmt::print("{:<11} {:>5} {:>7} {:>6} {:>9} {:>10} {:>7} {:>7}\n", "layout", "batch", "heads", "kv_len", "KV MB",
               "time us", "GB/s", "% copy");
    for (const Case& c : cases) {
        nlohmann::json r = run_case(rt, c, timer, repeats, shuffle_pages);
        r["fraction_of_copy"] = r["gbps"].get<double>() / copy_gbps;
        fmt::print("{:<11} {:>5} {:>7} {:>6} {:>9.1f} {:>10.1f} {:>7.0f} {:>6.1f}%   {}\n", c.layout(), c.batch,
                   fmt::format("{}/{}", c.heads, c.kv_heads), c.len, c.kv_bytes() / 1e6, r["median_us"].get<double>(),
                   r["gbps"].get<double>(), 100 * r["fraction_of_copy"].get<double>(), r["config"].get<std::string>());
        json["cases"].push_back(r);
        if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << '\n';  // keep what a cut run measured
    }
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode_attention: {}\n", e.what());
    return 1;
}
