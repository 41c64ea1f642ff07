// Configs of the MLA decode kernel (kernel_templates/mla_decode/): what each tunable means, the
// heuristic, the search space, what a config costs in shared memory and workspace.
//
// Tunables: kernel (0: mma.sync, sm_80+; 1: wgmma, sm_90a, 64 rows, 3+ stages; 2: wgmma with the seesaw
// schedule, sm_90a, 64 rows, 64 keys, 2 tile buffers), block_m (query rows per CTA:
// 16, 32 or 64; two warps per 16 rows), block_n (keys per tile: 16, 32 or 64; wgmma: 32 or 64), stages (key tiles in the cp.async ring), splits (CTAs sharing one
// sequence's keys, 1-256; more than 1: a workspace of partial results and a merge kernel). For a
// batch, the kernels cut the batch's keys into about batch x splits chunks of equal tokens by the
// lengths they read on the device (common/kv_chunks.cuh): a skewed batch keeps every SM busy, and
// the choice of splits does not depend on how the lengths are spread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops {
struct MlaDecodeProblem;
}

namespace tileops::detail {

// What the config choice needs to know about an MLA decode problem.
struct MlaShape {
    long long batch, num_heads, q_len, max_kv_len;
    long long rows() const { return num_heads * q_len; }
};
MlaShape mla_shape(const MlaDecodeProblem& problem);

// Whether the kernels cut the batch's keys by the lengths (common/kv_chunks.cuh): every batch
// but a single sequence. The launch plan (grid) and the kernel arguments both follow it.
inline bool mla_balanced(const MlaShape& shape) { return shape.batch > 1; }

struct MlaLaunch {
    int kernel, block_m, block_n, stages, splits;
    bool balanced;          // chunks sized by the lengths (batch > 1)
    long long split_ctas;       // CTAs per (row block, sequence): splits, or splits + 1 balanced
    long long row_blocks;   // CTAs along the rows of one sequence
    int threads;
    size_t shared_bytes;    // dynamic shared memory
};
// Reads a config (throws InvalidArgument when a tunable is missing).
MlaLaunch mla_launch(const MlaShape& shape, const Config& config);

Config mla_heuristic(const MlaShape& shape, const DeviceInfo& device);
std::vector<Config> mla_search_space(const MlaShape& shape, const DeviceInfo& device);
std::optional<std::string> mla_invalid_reason(const MlaShape& shape, const Config& config, const DeviceInfo& device);

// Bytes of split-KV workspace (0 without splits); the layout is the kernel's.
size_t mla_workspace_bytes(const MlaShape& shape, const MlaLaunch& launch);

}  // namespace tileops::detail
