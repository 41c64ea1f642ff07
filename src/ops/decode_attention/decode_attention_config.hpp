// Configs of the decode attention kernel: what each tunable means, the heuristic, the search
// space, what a config costs in shared memory and workspace.
//
// Two kernels (tunable `kernel`):
//   0, CUDA cores (decode_attention.cuh): rows (query rows per CTA: (query token, query head)
//      pairs of one KV head; 1, 2, 4 or 8), warps per CTA, unroll (16-byte key and value slices
//      per lane and iteration), stages (iterations in the shared-memory load ring; loads run
//      stages - 1 iterations ahead);
//   1, tensor cores (decode_attention_mma.cuh, sm_80+): 16 query rows per CTA, warps, tile (keys
//      per warp iteration, 16 or 32), stages. An fp8 cache streams its codes and each warp widens
//      a tile to 16 bits before its MMAs read it. Optional row_warps (0 when absent): 1 gives each
//      warp 16 rows of the CTA's 16 x warps, all warps reading every key from one ring, so a KV
//      head's keys are read once per 16 x warps rows instead of once per 16.
// Both: splits. At batch 1, the CTAs sharing the sequence's keys (1: no workspace, no merge); for
// a batch, the kernel cuts the keys of the whole batch into about batch x splits chunks of equal
// tokens by the lengths it reads on the device (decode.cuh), so a skewed batch keeps every SM
// streaming and the choice of splits does not depend on how the lengths are spread.
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
    int element_bytes;  // of q and the output
    bool fp8_cache;     // k and v are fp8 e4m3
    long long rows_per_kv_head() const { return num_heads / num_kv_heads * q_len; }
};
DecodeShape decode_shape(const DecodeAttentionProblem& problem);

// Whether the kernels cut the batch's keys by the lengths (decode.cuh, template flag BALANCED):
// every batch but a single sequence.
inline bool decode_balanced(const DecodeShape& shape) { return shape.batch > 1; }

constexpr int kDecodeCudaCores = 0, kDecodeTensorCores = 1;

// Which of the two kernels a launch runs (LaunchPlan::details): they take different parameters.
struct DecodeKernelChoice {
    int kernel = kDecodeCudaCores;
};
constexpr int kDecodeMmaRows = 16;  // the M of mma.sync m16n8k16

struct DecodeLaunch {
    int kernel, rows, warps, unroll, tile, stages, splits;  // unroll: kernel 0 only; tile: kernel 1 only
    bool row_warps;                  // kernel 1: the warps split the rows, not the keys
    bool balanced;                   // chunks sized by the lengths (batch > 1)
    long long split_ctas;            // CTAs per (kv head x row block, sequence): splits, or splits + 1 balanced
                                     // (the grid's x, or its y balanced: decode.cuh)
    long long row_blocks;            // CTAs along the query rows of one KV head
    size_t dynamic_shared_bytes;     // the load ring, reused for the warps' partial results
    size_t static_shared_bytes;      // the query tile
};
// Reads a config (throws InvalidArgument when a tunable is missing).
DecodeLaunch decode_launch(const DecodeShape& shape, const Config& config);

Config decode_heuristic(const DecodeShape& shape, const DeviceInfo& device);
std::vector<Config> decode_search_space(const DecodeShape& shape, const DeviceInfo& device);
std::optional<std::string> decode_invalid_reason(const DecodeShape& shape, const Config& config, const DeviceInfo& device);

// Bytes of split-KV workspace (0 without splits); the layout is the kernel's (decode_attention.cuh).
size_t decode_workspace_bytes(const DecodeShape& shape, const DecodeLaunch& launch);

}  // namespace tileops::detail
