#include "ops/decode_attention_config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ops/op_model.hpp"
#include "ops/split_heuristic.hpp"
#include "tileops/decode_attention.hpp"
#include "tileops/tensor.hpp"

namespace tileops::detail {
namespace {

long long next_power_of_two(long long n) {
    long long p = 1;
    while (p < n) p <<= 1;
    return p;
}

bool is_power_of_two_up_to(long long value, long long limit) {
    return value >= 1 && value <= limit && (value & (value - 1)) == 0;
}

// A split shorter than this spends more on its merge than it saves.
constexpr long long kMinTokensPerSplit = 128;
constexpr long long kMaxSplits = 256;

long long max_useful_splits(const DecodeShape& s) {
    return std::clamp((s.max_kv_len + kMinTokensPerSplit - 1) / kMinTokensPerSplit, 1LL, kMaxSplits);
}

}  // namespace

DecodeShape decode_shape(const DecodeAttentionProblem& p) {
    return {p.batch, p.num_heads, p.num_kv_heads, p.head_dim, p.q_len, p.max_kv_len, p.page_size,
            static_cast<int>(dtype_size(p.dtype))};
}

DecodeLaunch decode_launch(const DecodeShape& shape, const Config& config) {
    const std::string op = "decode_attention";
    DecodeLaunch l;
    l.rows = static_cast<int>(config_value(config, "rows", op));
    l.warps = static_cast<int>(config_value(config, "warps", op));
    l.unroll = static_cast<int>(config_value(config, "unroll", op));
    l.stages = static_cast<int>(config_value(config, "stages", op));
    l.splits = static_cast<int>(config_value(config, "splits", op));
    l.row_blocks = l.rows > 0 ? (shape.rows_per_kv_head() + l.rows - 1) / l.rows : 0;
    // Must match decode_attention.cuh: the ring (16 bytes per lane, key and value, per unroll step
    // and stage, plus a byte of flags per lane and stage), later the warps' partial results.
    const size_t ring = static_cast<size_t>(l.warps) * l.stages * 32 * (l.unroll * 2 * 16 + 1);
    const size_t partial = static_cast<size_t>(l.warps) * l.rows * (shape.head_dim + 2) * sizeof(float);
    const size_t merge = l.splits > 1 ? static_cast<size_t>(l.rows) * (l.splits + 1) * sizeof(float) : 0;
    l.dynamic_shared_bytes = std::max({ring, partial, merge});
    return l;
}

Config decode_heuristic(const DecodeShape& s, const DeviceInfo& device) {
    const long long rows = std::min(8LL, next_power_of_two(s.rows_per_kv_head()));
    // Loads run (stages - 1) x unroll steps ahead; many rows need registers for the scores. Two
    // stages of 8 warps beat deeper rings of fewer warps on the H100 (more CTAs fit per SM).
    const long long unroll = rows <= 2 ? 4 : 2;
    const long long stages = 2;
    const long long warps = 8;
    const long long ctas = s.batch * s.num_kv_heads * ((s.rows_per_kv_head() + rows - 1) / rows);
    // Two 8-warp CTAs fit on an SM. The fewest splits that fill every slot with a last wave at
    // least 85% full (a wave a fifth full cost the batch-8 benchmark shapes a quarter of their
    // bandwidth); otherwise the fullest last wave.
    const long long slots = 2LL * std::max(device.sm_count, 1);
    const long long splits = splits_filling_waves(ctas, slots, max_useful_splits(s), 0.85, true);
    return {{"rows", rows}, {"warps", warps}, {"unroll", unroll}, {"stages", stages}, {"splits", splits}};
}

std::vector<Config> decode_search_space(const DecodeShape& s, const DeviceInfo& device) {
    const Config heuristic = decode_heuristic(s, device);
    const long long rows0 = heuristic.at("rows");
    std::vector<long long> row_options{rows0};
    if (rows0 > 1) row_options.push_back(rows0 / 2);
    std::vector<long long> split_options;
    for (long long splits = 1; splits <= max_useful_splits(s); splits *= 2) split_options.push_back(splits);
    if (std::find(split_options.begin(), split_options.end(), heuristic.at("splits")) == split_options.end())
        split_options.push_back(heuristic.at("splits"));
    std::vector<Config> configs;
    for (long long rows : row_options)
        for (long long warps : {4, 8})
            for (long long unroll : {1, 2, 4})
                for (long long stages : {2, 4})
                    for (long long splits : split_options)
                        configs.push_back({{"rows", rows}, {"warps", warps}, {"unroll", unroll}, {"stages", stages},
                                           {"splits", splits}});
    return configs;
}

std::optional<std::string> decode_invalid_reason(const DecodeShape& s, const Config& config, const DeviceInfo& device) {
    for (const char* key : {"rows", "warps", "unroll", "stages", "splits"})
        if (config.find(key) == config.end()) return fmt::format("config has no '{}'", key);
    const DecodeLaunch l = decode_launch(s, config);
    if (!is_power_of_two_up_to(l.rows, 8)) return fmt::format("rows = {} is not 1, 2, 4 or 8", l.rows);
    if (!is_power_of_two_up_to(l.warps, 16)) return fmt::format("warps = {} is not a power of two <= 16", l.warps);
    if (!is_power_of_two_up_to(l.unroll, 8)) return fmt::format("unroll = {} is not 1, 2, 4 or 8", l.unroll);
    if (l.stages < 2 || l.stages > 8) return fmt::format("stages = {} is not in [2, 8]", l.stages);
    if (l.rows * l.unroll > 32) return fmt::format("rows x unroll = {} scores per lane would spill", l.rows * l.unroll);
    if (l.splits < 1 || l.splits > 1024) return fmt::format("splits = {} is not in [1, 1024]", l.splits);
    if (s.num_kv_heads * l.row_blocks > 65535) return "kv heads x row blocks exceeds the grid's y limit (65535)";
    const size_t shared = l.dynamic_shared_bytes + static_cast<size_t>(l.rows) * s.head_dim * sizeof(float);
    if (device.max_shared_memory_per_block_optin > 0 && shared > static_cast<size_t>(device.max_shared_memory_per_block_optin))
        return fmt::format("needs {} bytes of shared memory, the device allows {}", shared,
                           device.max_shared_memory_per_block_optin);
    return std::nullopt;
}

size_t decode_workspace_bytes(const DecodeShape& s, const DecodeLaunch& l) {
    if (l.splits <= 1) return 0;
    const size_t slots = static_cast<size_t>(s.batch * s.num_kv_heads * l.row_blocks);
    const size_t partial_rows = slots * l.splits * l.rows;
    return (partial_rows * (s.head_dim + 1) + slots) * sizeof(float);
}

}  // namespace tileops::detail
