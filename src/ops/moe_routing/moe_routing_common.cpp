#include "ops/moe_routing/moe_routing_common.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/validation.hpp"
#include "tileops/error.hpp"
#include "tileops/moe_routing.hpp"

namespace tileops::detail::moe {
namespace {

constexpr long long kMaxItems = 8;
constexpr long long kMaxRowsPerBlock = 64;  // the kernels keep k row indices a token in shared memory
constexpr long long kMaxGrid = std::numeric_limits<int32_t>::max();

}  // namespace

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

long long next_pow2(long long n) {
    long long p = 1;
    while (p < n && p < (1LL << 40)) p <<= 1;
    return p;
}

void check_tokens(const char* op, int64_t tokens) { check_in_range(op, "tokens", tokens, 1, kMaxGrid); }
void check_hidden(const char* op, int64_t hidden) { check_in_range(op, "hidden", hidden, 1, int64_t{1} << 40); }
void check_experts(const char* op, int64_t experts) { check_in_range(op, "experts", experts, 1, kMoeMaxExperts); }
void check_k(const char* op, int64_t k) { check_in_range(op, "k", k, 1, kMoeMaxK); }

void check_entries(const char* op, int64_t tokens, int64_t k) {
    if (tokens * k > std::numeric_limits<int32_t>::max())
        throw InvalidArgument(fmt::format("tileops::{}: tokens x k = {} x {} does not fit the int32 row_map", op,
                                          tokens, k));
}

Config RowTeamModel::heuristic(const DeviceInfo&) const {
    const RowTeamShape& shape = team_;
    const long long vec = shape_vec_;
    const long long vectors = ceil_div(shape.hidden, vec);
    const long long cap = std::clamp<long long>(shape.max_held / vec, 1, 4);
    // About a row in one pass of up to 256 threads, a few vectors a thread.
    const long long items = std::clamp<long long>(ceil_div(vectors, 256), 1, cap);
    long long tpr = ceil_div(vectors, items);
    tpr = tpr >= 32 ? std::min<long long>(ceil_div(tpr, 32) * 32, 256) : std::max<long long>(4, next_pow2(tpr));
    const long long rpb = std::clamp<long long>(256 / tpr, 1, kMaxRowsPerBlock);
    return {{"threads_per_row", tpr}, {"rows_per_block", rpb}, {"items", items}, {"vec", vec}};
}

std::vector<Config> RowTeamModel::search_space(const DeviceInfo& device) const {
    const RowTeamShape& shape = team_;
    std::vector<Config> candidates{heuristic(device)};
    for (long long vec = shape_vec_; vec >= std::max(1, shape_vec_ / 2); vec /= 2)
        for (long long tpr : {4, 8, 16, 32, 64, 128, 256, 512})
            for (long long items : {1, 2, 4, 8}) {
                if (items * vec > shape.max_held) continue;
                if ((tpr > 32 || items > 1) && tpr * items * vec > 2 * shape.hidden) continue;  // mostly idle
                for (long long block : {128, 256}) {
                    if (tpr > block) continue;
                    candidates.push_back({{"threads_per_row", tpr},
                                          {"rows_per_block", std::min(kMaxRowsPerBlock, block / tpr)},
                                          {"items", items},
                                          {"vec", vec}});
                }
            }
    return valid_configs(candidates, device);
}

std::optional<std::string> RowTeamModel::invalid_reason(const Config& config, const DeviceInfo& device) const {
    const RowTeamShape& shape = team_;
    long long tpr = 0, rpb = 0, items = 0, vec = 0;
    if (auto why = read_tunables(config, op_name(),
                                 {{"threads_per_row", &tpr}, {"rows_per_block", &rpb}, {"items", &items}, {"vec", &vec}}))
        return why;
    if (tpr < 1 || tpr > 1024) return fmt::format("threads_per_row = {} is not in [1, 1024]", tpr);
    if (rpb < 1 || rpb > kMaxRowsPerBlock)
        return fmt::format("rows_per_block = {} is not in [1, {}]", rpb, kMaxRowsPerBlock);
    if (auto why = block_threads_reason(tpr * rpb, device)) return why;
    if (auto why = vector_width_reason(vec, 16 / shape.element_bytes)) return why;
    if (items < 1 || items > kMaxItems) return fmt::format("items = {} is not in [1, {}]", items, kMaxItems);
    if (items * vec > shape.max_held)
        return fmt::format("items x vec = {} x {} holds more than {} elements a thread (it would spill)", items, vec,
                           shape.max_held);
    if (ceil_div(tokens_, rpb) > kMaxGrid) return "too many blocks";
    return std::nullopt;
}

std::vector<int> RowTeamModel::vector_widths(const Config& config) const {
    return halving_widths(std::min(static_cast<int>(config.at("vec")), shape_vec_));
}

RowTeamModel::Launch RowTeamModel::team_launch(const Config& config) const {
    const long long tpr = config.at("threads_per_row"), rpb = config.at("rows_per_block");
    return {tpr, rpb, config.at("items"), static_cast<unsigned>(ceil_div(tokens_, rpb)), static_cast<unsigned>(tpr * rpb)};
}

}  // namespace tileops::detail::moe
