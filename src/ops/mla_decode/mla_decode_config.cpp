#include "ops/mla_decode/mla_decode_config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/kv_chunks.hpp"
#include "core/op_model.hpp"
#include "ops/mla_decode/split_heuristic.hpp"
#include "tileops/mla_decode.hpp"

namespace tileops::detail {
namespace {

// Must match the kernels: shared-memory rows of 576 elements, padded by 16 bytes (mla_decode_sm80.cuh)
// or swizzled in boxes of 64 dims (mla_decode_sm90.cuh, 1024 bytes of alignment slack).
constexpr size_t kPaddedRowBytes = (MlaDecode::kKeyDim + 8) * 2;
constexpr size_t kSwizzledRowBytes = MlaDecode::kKeyDim * 2;
// The seesaw kernel's shared memory (mla_decode_seesaw.cuh): alignment slack, Q's 512 dims, two
// 64-key tiles, two P tiles, 5 x 64 floats, 4 mbarriers.
constexpr size_t kSeesawSharedBytes = 1024 + 64 * 512 * 2 + 2 * 64 * 576 * 2 + 2 * 64 * 64 * 2 + 5 * 64 * 4 + 4 * 8;
// A split shorter than this spends more on its merge than it saves.
constexpr long long kMinTokensPerSplit = 256;
// The merge kernel holds a weight per split in shared memory (kMlaMaxSplits in mla_decode_common.cuh).
// The heuristic may use them all: one sequence of 8-32 heads is one block, and only about 130
// splits of it fill the SMs (64, the cap when the merge ran in the main kernel, left half idle).
constexpr long long kMaxConfigSplits = 256;

long long max_useful_splits(const MlaShape& s) {
    return std::clamp((s.max_kv_len + kMinTokensPerSplit - 1) / kMinTokensPerSplit, 1LL, kMaxConfigSplits);
}

bool one_of(long long value, std::initializer_list<long long> allowed) {
    return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

// Largest number of stages whose shared memory fits the device, at least 2.
long long stages_that_fit(const MlaShape& s, long long kernel, long long block_m, long long block_n, long long most,
                          const DeviceInfo& device) {
    if (device.max_shared_memory_per_block_optin <= 0) return most;
    for (long long stages = most; stages > 2; --stages) {
        const Config probe{{"kernel", kernel}, {"block_m", block_m}, {"block_n", block_n}, {"stages", stages}, {"splits", 1}};
        if (mla_launch(s, probe).shared_bytes <= static_cast<size_t>(device.max_shared_memory_per_block_optin))
            return stages;
    }
    return 2;
}

}  // namespace

MlaShape mla_shape(const MlaDecodeProblem& p) { return {p.batch, p.num_heads, p.q_len, p.max_kv_len}; }

MlaLaunch mla_launch(const MlaShape& shape, const Config& config) {
    const std::string op = "mla_decode";
    MlaLaunch l;
    l.kernel = static_cast<int>(config_value(config, "kernel", op));
    l.block_m = static_cast<int>(config_value(config, "block_m", op));
    l.block_n = static_cast<int>(config_value(config, "block_n", op));
    l.stages = static_cast<int>(config_value(config, "stages", op));
    l.splits = static_cast<int>(config_value(config, "splits", op));
    l.balanced = mla_balanced(shape);
    l.split_ctas = l.balanced ? l.splits + 1LL : l.splits;
    l.row_blocks = l.block_m > 0 ? (shape.rows() + l.block_m - 1) / l.block_m : 0;
    if (l.kernel == 2) {  // mla_decode_seesaw.cuh: two warpgroups, fixed tiles
        l.threads = 256;
        l.shared_bytes = kSeesawSharedBytes;
        return l;
    }
    const int warps = std::max(l.block_m, 0) / 16 * 2;
    l.threads = warps * 32;
    // Q tile, key ring, the warp pairs' score exchange (a float4 per lane and 8 keys), key flags.
    const size_t rows = static_cast<size_t>(std::max(l.block_m, 0) + std::max(l.stages, 0) * std::max(l.block_n, 0));
    const size_t tiles = l.kernel == 1 ? 1024 + rows * kSwizzledRowBytes : rows * kPaddedRowBytes;
    const size_t exchange = static_cast<size_t>(warps) * std::max(l.block_n, 0) / 8 * 32 * 16;
    const size_t flags = static_cast<size_t>(std::max(l.stages, 0) * std::max(l.block_n, 0));
    l.shared_bytes = (tiles + exchange + flags + 15) / 16 * 16;
    return l;
}

Config mla_heuristic(const MlaShape& s, const DeviceInfo& device) {
    const long long rows = s.rows();
    const long long block_m = rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
    // On sm_90a, 64-row blocks take the seesaw wgmma kernel (its tiles are fixed): tuned on the H100
    // it beat the other wgmma kernel by 20-45% wherever 64 rows were used (docs/perf/mla_decode.md).
    const long long kernel = device.arch() == "sm_90a" && block_m == 64 ? 2 : 0;
    const long long block_n = kernel == 2 ? 64 : 32;
    const long long stages = kernel == 2 ? 2 : stages_that_fit(s, kernel, block_m, block_n, 3, device);
    const Config base{{"kernel", kernel}, {"block_m", block_m}, {"block_n", block_n}, {"stages", stages}, {"splits", 1}};
    const MlaLaunch l = mla_launch(s, base);
    // CTAs an SM holds (shared memory; 64K registers at up to 255 a thread), then the fewest splits
    // whose last wave is at least 85% full (128 blocks on 132 SMs need none), else the fullest.
    const long long smem = std::max(device.max_shared_memory_per_block_optin, 1);
    const long long per_sm = std::clamp<long long>(std::min<long long>(smem / static_cast<long long>(l.shared_bytes + 1024),
                                                                       65536 / (l.threads * 255LL)),
                                                   1, 8);
    const long long slots = per_sm * std::max(device.sm_count, 1);
    const long long splits = splits_filling_waves(s.batch * l.row_blocks, slots, max_useful_splits(s), 0.85, false);
    return {{"kernel", kernel}, {"block_m", block_m}, {"block_n", block_n}, {"stages", stages}, {"splits", splits}};
}

std::vector<Config> mla_search_space(const MlaShape& s, const DeviceInfo& device) {
    const Config heuristic = mla_heuristic(s, device);
    std::vector<long long> block_ms{heuristic.at("block_m")};
    if (heuristic.at("block_m") > 16) block_ms.push_back(heuristic.at("block_m") / 2);
    std::vector<long long> split_options;
    for (long long splits = 1; splits <= max_useful_splits(s); splits *= 2) split_options.push_back(splits);
    if (std::find(split_options.begin(), split_options.end(), heuristic.at("splits")) == split_options.end())
        split_options.push_back(heuristic.at("splits"));
    // The wgmma kernels first (the seesaw one leading), so that a tune short of time has timed them.
    std::vector<Config> configs;
    if (device.arch() == "sm_90a") {
        for (long long splits : split_options)
            configs.push_back({{"kernel", 2}, {"block_m", 64}, {"block_n", 64}, {"stages", 2}, {"splits", splits}});
        for (long long block_n : {32, 64})
            for (long long stages : {3, 4})
                for (long long splits : split_options)
                    configs.push_back({{"kernel", 1}, {"block_m", 64}, {"block_n", block_n}, {"stages", stages},
                                       {"splits", splits}});
    }
    for (long long block_m : block_ms)
        for (long long block_n : {16, 32, 64})
            for (long long stages : {2, 3, 4})
                for (long long splits : split_options)
                    configs.push_back({{"kernel", 0}, {"block_m", block_m}, {"block_n", block_n}, {"stages", stages},
                                       {"splits", splits}});
    return configs;
}

std::optional<std::string> mla_invalid_reason(const MlaShape& s, const Config& config, const DeviceInfo& device) {
    for (const char* key : {"kernel", "block_m", "block_n", "stages", "splits"})
        if (config.find(key) == config.end()) return fmt::format("config has no '{}'", key);
    const MlaLaunch l = mla_launch(s, config);
    if (l.kernel != 0 && l.kernel != 1 && l.kernel != 2)
        return fmt::format("kernel = {} is not 0 (mma.sync), 1 (wgmma) or 2 (wgmma, seesaw)", l.kernel);
    if (l.kernel != 0 && device.arch() != "sm_90a")
        return fmt::format("kernel {} (wgmma) needs sm_90a, the device is {}", l.kernel, device.arch());
    if (l.kernel == 2 && (l.block_m != 64 || l.block_n != 64 || l.stages != 2))
        return fmt::format("kernel 2 (seesaw) takes block_m 64, block_n 64 and stages 2, got {}, {} and {}", l.block_m,
                           l.block_n, l.stages);
    if (l.kernel == 1 && (l.block_m != 64 || (l.block_n != 32 && l.block_n != 64)))
        return fmt::format("kernel 1 (wgmma) takes block_m 64 and block_n 32 or 64, got {} and {}", l.block_m, l.block_n);
    if (l.kernel == 1 && l.stages < 3)
        return fmt::format("kernel 1 (wgmma) needs stages >= 3 (P V of a tile overlaps the copy of the one after next), got {}",
                           l.stages);
    if (!one_of(l.block_m, {16, 32, 64})) return fmt::format("block_m = {} is not 16, 32 or 64", l.block_m);
    if (!one_of(l.block_n, {16, 32, 64})) return fmt::format("block_n = {} is not 16, 32 or 64", l.block_n);
    if (l.stages < 2 || l.stages > 8) return fmt::format("stages = {} is not in [2, 8]", l.stages);
    if (l.splits < 1 || l.splits > kMaxConfigSplits)
        return fmt::format("splits = {} is not in [1, {}]", l.splits, kMaxConfigSplits);
    if (l.row_blocks > 65535) return "row blocks exceed the grid's y limit (65535)";
    // Beside the dynamic bytes, the kernels hold what finding a CTA's chunk takes statically.
    if (device.max_shared_memory_per_block_optin > 0 &&
        l.shared_bytes + kKvChunkSharedBytes > static_cast<size_t>(device.max_shared_memory_per_block_optin))
        return fmt::format("needs {} bytes of shared memory, the device allows {}", l.shared_bytes + kKvChunkSharedBytes,
                           device.max_shared_memory_per_block_optin);
    if (device.cc_major > 0 && device.cc_major < 8) return "needs sm_80 or newer (mma.sync bf16, cp.async)";
    return std::nullopt;
}

size_t mla_workspace_bytes(const MlaShape& s, const MlaLaunch& l) {
    if (l.split_ctas <= 1) return 0;
    const size_t slots = static_cast<size_t>(s.batch * l.row_blocks);
    const size_t partial_rows = slots * static_cast<size_t>(l.split_ctas) * l.block_m;
    // Partial outputs, their lse, then (balanced) where each sequence's chunks are: two ints.
    const size_t sequence_chunks = l.balanced ? static_cast<size_t>(s.batch) * 2 * sizeof(int) : 0;
    return partial_rows * (MlaDecode::kLatentDim + 1) * sizeof(float) + sequence_chunks;
}

}  // namespace tileops::detail
