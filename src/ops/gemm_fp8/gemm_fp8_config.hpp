// FP8 GEMM configs (kernel_templates/gemm_fp8/gemm_fp8_sm90.cuh): block_m, block_n, consumers
// (warpgroups doing the MMAs; one more loads with TMA), stages (of 128 elements of K), group_m.
// The heuristic, the search space and the checks that say why a config cannot run a problem.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::detail {

struct GemmFp8Shape {
    int64_t batch, m, n, k;
    bool block_scales;  // 128 x 128 blocks of B: a tile's columns must lie in one block
    size_t out_bytes;   // element size of C and D
};

struct GemmFp8Config {
    int block_m = 128, block_n = 128, consumers = 2, stages = 4, group_m = 8;

    static GemmFp8Config from(const Config& config);  // throws InvalidArgument naming a missing key
    Config to_config() const;
    int threads() const { return (consumers + 1) * 128; }
    // The ring, its barriers, alignment slack, for a 16-bit D the output boxes it stores with TMA,
    // and with block scales their slot a stage.
    unsigned shared_bytes(const GemmFp8Shape& shape) const;
};

// Why `device` cannot run the FP8 GEMMs (dense and grouped), or nothing.
std::optional<std::string> gemm_fp8_unsupported_reason(const DeviceInfo& device);
GemmFp8Config gemm_fp8_heuristic(const GemmFp8Shape& shape, const DeviceInfo& device);
std::vector<GemmFp8Config> gemm_fp8_search_space(const GemmFp8Shape& shape, const DeviceInfo& device);
std::optional<std::string> gemm_fp8_invalid_reason(const GemmFp8Config& config, const GemmFp8Shape& shape,
                                                   const DeviceInfo& device);
int64_t gemm_fp8_tiles(const GemmFp8Config& config, const GemmFp8Shape& shape);

// The kernel's name expression (gemm_fp8_sm90_kernel): `out_type` D's device type, `epilogue`
// "HAS_C, BIAS, ACT" (C++ template arguments); `groups` the grouped schedule (gemm_groups.cuh; 0,
// batched, leaves the argument at its default, so batched kernels keep their names).
std::string gemm_fp8_kernel_name(const GemmFp8Config& config, const std::string& out_type, int scaling,
                                 const std::string& epilogue, bool tma_store, int groups);

// Whether a launch whose D rows are 16-byte aligned stores D with TMA (two 64 x 64 boxes per
// consumer in shared memory): 16-bit outputs in tiles of a multiple of 64 columns (the kernel
// asserts it; 96-224-wide tiles store from registers).
bool gemm_fp8_stores_with_tma(const GemmFp8Shape& shape, const GemmFp8Config& config);

}  // namespace tileops::detail
