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

// A row team's rows: `hidden` elements of `element_bytes` a row; `max_held` bounds items x vec
// (elements a thread holds in registers).
struct RowTeamShape {
    long long hidden;
    long long element_bytes;
    long long max_held;
};

// The model of an op whose kernel is a row team, a team of threads a token row (the permute's
// gather, the unpermute). Its config: threads_per_row (1-1024), rows_per_block (1-64), items
// (vectors a thread holds, 1-8), vec (elements an access, a power of two up to 16 bytes). The
// heuristic takes a row in one pass of at most 256 threads with up to 4 vectors each.
class RowTeamModel : public OpModel {
public:
    Config heuristic(const DeviceInfo& device) const override;
    std::vector<Config> search_space(const DeviceInfo& device) const override;
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override;
    std::vector<int> vector_widths(const Config& config) const override;

protected:
    // shape_vec: the widest vector the row length and strides allow; tokens: the rows (blocks).
    RowTeamModel(const RowTeamShape& shape, int shape_vec, long long tokens)
        : team_(shape), shape_vec_(shape_vec), tokens_(tokens) {}
    int shape_vec() const noexcept { return shape_vec_; }

    // The launch geometry of a config: one block per rows_per_block tokens.
    struct Launch {
        long long threads_per_row, rows_per_block, items;
        unsigned grid, block;
    };
    Launch team_launch(const Config& config) const;

private:
    RowTeamShape team_;
    int shape_vec_;
    long long tokens_;
};

}  // namespace tileops::detail::moe
