// GEMM configs: the tunables of the three GEMM kernels, the heuristic default, the pruned search
// space and the checks that say why a config cannot run a problem on a device.
//
//   kernel 0 (gemm_sm80.cuh, any sm_80+): block_m, block_n, block_k, warps_m, warps_n, stages,
//            group_m, vec
//   kernel 1 (gemm_sm90.cuh, sm_90 only): block_m, block_n, block_k, stages, consumers (warpgroups
//            doing the MMAs; one more warpgroup loads with TMA), cluster (1, or 2: block pairs
//            sharing B tiles through TMA multicast), split_k (blocks sharing a tile's K steps,
//            for problems with fewer tiles than SMs), group_m, vec (always 8)
//   kernel 2 (gemm_skinny.cuh, any sm_80+, either layout, rows read in place at any alignment): block_m (rows of A per
//            block, 16/32/64), block_n (16/32/64), warps (splitting K), stages; block_k is 64,
//            group_m 1 and vec 8. For M <= 64, where reading B is the whole cost.
//   kernel 3 (gemm_gemv.cuh, any sm_80+, either layout, rows read in place at any alignment, CUDA
//            cores): block_m (rows of A per block, 1/2/4), block_n (NT: rows of B per block,
//            8-64; NN: 56/120/248 columns), warps (8 or 16), stages (16-byte chunks a lane loads
//            before it multiplies); block_k is 8 (one chunk), group_m 1 and vec 8. For M <= 4.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::detail {

enum GemmKernel : int { kGemmSm80 = 0, kGemmSm90 = 1, kGemmSkinny = 2, kGemmGemv = 3 };
// Whether a kernel reads rows off 16 bytes where they are (the others copy them first).
constexpr bool gemm_reads_in_place(int kernel) { return kernel == kGemmSkinny || kernel == kGemmGemv; }
// The gemv kernel is searched up to this M.
constexpr int64_t kGemmGemvMaxM = 4;
// Positions of k the gemv kernel stages of A at a time in layout NN (kGemvNnTileRows in gemm_gemv.cuh).
constexpr int64_t kGemmGemvNnTileRows = 1024;
// The skinny kernel is searched up to this M.
constexpr int64_t kGemmSkinnyMaxM = 64;
// Up to this M it is the heuristic's choice for rows off 16 bytes (GemmShape::rows_aligned false):
// reading them in place beat copying them for the TMA kernel at M = 1 and 16, and lost at 64
// (H100: 1 x 4096 x 4095 33.7 against 43.5 us, 16 x 14336 x 4095 98.4 against 141.0, 64 x 4096
// x 4095 108.8 against 43.6).
constexpr int64_t kGemmSkinnyInPlaceMaxM = 16;
constexpr int kGemmMaxSplitK = 16;
constexpr int kGemmSm90MaxStages = 16;  // the TMA kernel's deepest ring (small tiles)

struct GemmShape {
    int64_t batch, m, n, k;
    size_t in_bytes;   // element size of A and B
    bool b_nt;
    size_t out_bytes;  // element size of C and D
    // lda, ldb and the batch strides are multiples of 16 bytes: for aligned pointers the TMA and
    // sm_80 kernels load A and B where they are, else they copy them first (gemm_pack.cuh).
    bool rows_aligned = true;
};

struct GemmConfig {
    int kernel = kGemmSm80;
    int block_m = 128, block_n = 128, block_k = 32;
    int warps_m = 2, warps_n = 2;  // kernel 0
    int consumers = 2;             // kernel 1
    int pingpong = 0;              // kernel 1: the two consumers take whole block_m x block_n tiles in turn
    int cluster = 1;               // kernel 1
    int split_k = 1;               // kernel 1: blocks sharing each tile's K steps (gemm_reduce_splits)
    int warps = 8;                 // kernels 2 and 3: warps of a block
    int stages = 4;
    int group_m = 8;
    int vec = 8;

    static GemmConfig from(const Config& config);  // throws InvalidArgument naming a missing key
    Config to_config() const;
    // 64-bit: a config from a file may hold warp counts up to 2^20 each (kMaxConfigValue).
    int64_t threads() const {
        return kernel == kGemmSm90     ? (int64_t{consumers} + 1) * 128
               : gemm_reads_in_place(kernel) ? int64_t{warps} * 32
                                       : int64_t{warps_m} * warps_n * 32;
    }
    // Dynamic shared memory of a launch: the operand ring; kernel 1 adds its barriers and, for
    // 16-bit outputs, the output tile it stores with TMA; kernel 2 its warps' rings and the
    // block_m x block_n fp32 sums.
    unsigned shared_bytes(const GemmShape& shape) const;
};

// The sm_80 kernel's default for a problem (the heuristic on GPUs other than sm_90).
GemmConfig gemm_sm80_heuristic(const GemmShape& shape, const DeviceInfo& device);
// The gemv kernel's default (M <= 4, sm_80+), where it can run the problem.
std::optional<GemmConfig> gemm_gemv_heuristic(const GemmShape& shape, const DeviceInfo& device);
GemmConfig gemm_heuristic(const GemmShape& shape, const DeviceInfo& device);
std::vector<GemmConfig> gemm_search_space(const GemmShape& shape, const DeviceInfo& device);
std::optional<std::string> gemm_invalid_reason(const GemmConfig& config, const GemmShape& shape,
                                               const DeviceInfo& device);

// Whether kernel 1 stages the output tile in shared memory and stores it with TMA, in boxes of 64
// columns (gemm_sm90_tma_store in gemm_sm90.cuh): 16-bit outputs in tiles of a multiple of 64
// columns, and tiles of 96, 160 or 224 (their last 32 columns from registers) whose ring leaves
// room for the boxes; other tiles are stored from registers. A 16-bit D must have 16-byte aligned
// rows for kernel 1 (GemmModel's vec).
bool gemm_sm90_stores_with_tma(const GemmShape& shape, const GemmConfig& config);

// The workspace of kernel 1 with split_k > 1: a counter per tile (padded to 256 bytes), then
// split_k fp32 partial tiles per tile; empty otherwise. The one description both the size
// (OpModel::workspace_bytes) and the pointers handed to the kernel are computed from.
struct GemmSplitWorkspace {
    size_t counters_bytes = 0;
    size_t partials_bytes = 0;
    static GemmSplitWorkspace of(const GemmConfig& config, const GemmShape& shape);
    size_t bytes() const noexcept { return counters_bytes + partials_bytes; }
    int* counters(void* workspace) const noexcept { return static_cast<int*>(workspace); }
    float* partials(void* workspace) const noexcept {
        return reinterpret_cast<float*>(static_cast<char*>(workspace) + counters_bytes);
    }
};

// What a GEMM launch needs beside its function and geometry (LaunchPlan::details): for kernel 1
// (TMA + wgmma), the tile its tensor maps' boxes are cut to; its workspace's layout.
struct GemmLaunch {
    bool tma = false;  // kernel 1
    int block_m = 0, block_n = 0;
    int split_k = 1;
    bool paired = false;  // blocks run in pairs, each loading half of a B tile (multicast)
    GemmSplitWorkspace split;  // at the workspace's start
    // A launch that copies A and B into the workspace first (gemm_pack.cuh): where the copies
    // start (256-byte aligned) and the workspace's whole size.
    bool packs = false;
    size_t pack_a_offset = 0, pack_b_offset = 0;
    size_t workspace_bytes = 0;
};

// Blocks of a launch: tiles x batch for kernels 0 and 2; kernel 1 is persistent (at most one block per SM).
int64_t gemm_tiles(const GemmConfig& config, const GemmShape& shape);

// The share of the GPU's tile slots a launch keeps busy, from 0 to 1: its work units (tiles x
// split_k) over the whole waves they take at one unit an SM, times the share of the tiles' area
// inside the matrix. A config tuned on one shape keeps its speed on a near one only where this
// stays put: 144 tiles on 132 SMs take two waves where 128 took one.
double gemm_slot_fill(const GemmConfig& config, const GemmShape& shape, const DeviceInfo& device);

// The name expression of kernel 0 or 1 (gemm_sm80_kernel, gemm_sm90_kernel) for a config:
// `types` is "T, TOut, B_NT", `epilogue` "HAS_C, BIAS, ACT" (C++ template arguments); `groups`
// the grouped schedule (gemm_groups.cuh; 0, batched, leaves the argument at its default so that
// batched kernels keep their names and cached binaries).
std::string gemm_kernel_name(const GemmConfig& config, const std::string& types, const std::string& epilogue,
                             bool tma_store, int groups);

}  // namespace tileops::detail
