// What the MoE routing ops share: the limits on their sizes, and the configs of the kernels that
// move rows (the permute's gather and the unpermute): a team of threads a token row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op_model.hpp"

namespace tileops::detail::moe {

long long ceil_div(long long a, long long b);
long long next_pow2(long long n);

// Problem checks by name: "tileops::<op>: <name> must be in [low, high], got v".
void check_tokens(const char* op, int64_t tokens);
void check_hidden(const char* op, int64_t hidden);
void check_experts(const char* op, int64_t experts);
void check_k(const char* op, int64_t k);
// tokens x k (the permuted rows) must fit the int32 row_map.
void check_entries(const char* op, int64_t tokens, int64_t k);

// A row team's config: threads_per_row (1-1024), rows_per_block (1-64), items (vectors a thread
// holds, 1-8), vec (elements an access, a power of two up to 16 bytes). `hidden` elements of
// `element_bytes` a row; `max_held` bounds items x vec (elements a thread holds in registers).
struct RowTeamShape {
    long long hidden;
    long long element_bytes;
    long long max_held;
};
Config row_team_heuristic(const RowTeamShape& shape, int shape_vec);
std::vector<Config> row_team_candidates(const RowTeamShape& shape, int shape_vec);
std::optional<std::string> row_team_invalid_reason(const RowTeamShape& shape, const Config& config,
                                                   const DeviceInfo& device, const std::string& op, long long tokens);

// The launch geometry of a row team's kernel: one block per rows_per_block tokens.
struct RowTeamLaunch {
    long long threads_per_row, rows_per_block, items;
};
RowTeamLaunch row_team_launch(const Config& config);

}  // namespace tileops::detail::moe
