// Configs of the flash attention kernels: what each tunable means, the heuristic, the search
// space, what a config costs in shared memory.
//
// Tunables: kernel (1: sm_90a TMA + wgmma, flash_attention_sm90.cuh; 0: any sm_80+, cp.async +
// mma.sync, flash_attention_sm80.cuh), block_m (query rows per block; the sm_90 kernel's: 64 per
// consumer warpgroup, 128 or, at head dim 64, 192; 64, one consumer, runs two blocks an SM),
// block_n (keys per tile), warps (the sm_90 kernel's: a producer warpgroup and block_m / 64
// consumer warpgroups), stages (K/V tiles in the shared-memory ring) and, for the sm_90 kernel,
// pingpong (1: the consumer warpgroups take turns on the tensor cores, each one's softmax hidden
// behind the other's MMAs).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::detail {

constexpr int kFlashSm80 = 0;
constexpr int kFlashSm90 = 1;
// Shared memory a block may opt into on every sm_90 part (H100, H200, GH200): 227 KB.
constexpr size_t kSm90SharedBytes = 227 * 1024;

// What the config choice needs to know about a problem (tile sizes depend on the head dims only;
// sequence lengths and masks change the grid, not the config).
struct FlashShape {
    long long head_dim;    // of Q and K
    long long head_dim_v;  // of V and O
    int element_bytes;
    bool causal = false;
    long long seqlen_q = 0;  // the longest query sequence
};

struct FlashConfig {
    int kernel = kFlashSm80;
    int block_m = 128, block_n = 64, warps = 4, stages = 2;
    int pingpong = 0;  // sm_90 kernel only

    static FlashConfig from(const Config& config);  // throws InvalidArgument when a tunable is missing
    Config to_config() const;
    int threads() const { return warps * 32; }
    size_t shared_bytes(const FlashShape& shape) const;
    int q_buffers(const FlashShape& shape) const;  // sm_90 kernel: Q tiles in shared memory (1 or 2)
    // sm_90 kernel: the persistent blocks an SM runs: two with one consumer where their shared
    // memory fits beside each other (the launch bounds give them the registers), else one.
    int blocks_per_sm(const FlashShape& shape, const DeviceInfo& device) const;

private:
    size_t sm90_shared_bytes(const FlashShape& shape, int q_tiles) const;
};

Config flash_heuristic(const FlashShape& shape, const DeviceInfo& device);
std::vector<Config> flash_search_space(const FlashShape& shape, const DeviceInfo& device);
std::optional<std::string> flash_invalid_reason(const FlashShape& shape, const Config& config, const DeviceInfo& device);

// What a launch of the sm_90 kernel needs beside its function and geometry
// (LaunchPlan::details): the rows of its Q and K/V tensor maps' boxes.
struct FlashTmaLaunch {
    int block_m = 0, block_n = 0;
};

}  // namespace tileops::detail
