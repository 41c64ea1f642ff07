// Configs of the decode attention kernel: what each tunable means, the heuristic, the search
// space, what a config costs in shared memory and workspace.
//
// Tunables: rows (query rows per CTA: (query token, query head) pairs of one KV head; 1, 2, 4
// or 8), warps per CTA, unroll (16-byte key and value slices per lane and iteration), stages
// (iterations in the shared-memory load ring; loads run stages - 1 iterations ahead), and splits
// (CTAs sharing one sequence's KV length; 1: no workspace, no merge).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops {
struct DecodeAttentionProblem;
}

namespace tileops::detail {

// What the config choice needs to know about a decode problem.
struct DecodeShape {
    long long batch, num_heads, num_kv_heads, head_dim, q_len, max_kv_len, page_size;
    int element_bytes;
    long long rows_per_kv_head() const { return num_heads / num_kv_heads * q_len; }
};
DecodeShape decode_shape(const DecodeAttentionProblem& problem);

struct DecodeLaunch {
    int rows, warps, unroll, stages, splits;
    long long row_blocks;            // CTAs along the query rows of one KV head
    size_t dynamic_shared_bytes;     // the load ring, reused for the warps' partial results
};
// Reads a config (throws InvalidArgument when a tunable is missing).
DecodeLaunch decode_launch(const DecodeShape& shape, const Config& config);

Config decode_heuristic(const DecodeShape& shape, const DeviceInfo& device);
std::vector<Config> decode_search_space(const DecodeShape& shape, const DeviceInfo& device);
std::optional<std::string> decode_invalid_reason(const DecodeShape& shape, const Config& config, const DeviceInfo& device);

// Bytes of split-KV workspace (0 without splits); the layout is the kernel's (decode_attention.cuh).
size_t decode_workspace_bytes(const DecodeShape& shape, const DecodeLaunch& launch);

}  // namespace tileops::detail
