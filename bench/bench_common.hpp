// Timing helpers shared by the benchmark programs: CUDA-event timing with L2 flushed before each
// run, random device buffers, the device's copy bandwidth.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "tileops/device_info.hpp"
#include "tileops/tensor.hpp"
#include "autotune/timing.hpp"

namespace tileops::bench {

const cuda::DriverApi& cu();

double median(std::vector<double> values);

// Median milliseconds of `fn` over `repeats` runs on the legacy stream, after 3 warm-up runs,
// timed as the tuner times (tuning::KernelTimer: L2 flushed by a read before each timed run, so
// inputs come from HBM and no dirty line of an earlier run is written back inside the timed one).
double time_ms(const std::function<void()>& fn, tuning::KernelTimer& timer, int repeats);

// time_ms of two functions that are compared, their runs interleaved (a b, then b a, ...) after
// 3 warm-up runs each, so that neither side always runs first on a cooler or idler GPU or in the
// other's wake. Returns {a, b}.
std::pair<double, double> time_pair_ms(const std::function<void()>& a, const std::function<void()>& b,
                                       tuning::KernelTimer& timer, int repeats);

// A buffer of `bytes` filled with values in [-2, 2) as `dtype` stores them (never zeros); `seed`
// tells apart buffers of the same size. With `period` > 0 the values repeat every `period` bytes,
// so that gigabytes (a KV cache) are filled in milliseconds.
cuda::DeviceBuffer random_buffer(size_t bytes, DType dtype, uint64_t seed = 0, size_t period = 0);

// A device buffer holding `values` (e.g. sequence lengths or a page table).
cuda::DeviceBuffer int_buffer(const std::vector<int32_t>& values);

// A page table of `num_pages` entries: every page of the pool once, shuffled (pages of a sequence
// scattered over the pool, as a serving engine's allocator leaves them), or in order when
// `shuffled` is false (the benchmarks' --sequential-pages: what the scattering itself costs).
std::vector<int32_t> pool_pages(int64_t num_pages, bool shuffled = true);

// "64x128x8192" -> {64, 128, 8192} (a problem named on the command line, e.g. --only).
std::vector<int64_t> parse_dims(const std::string& text);

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& list);

// "16x4096,1x4096" -> {{16, 4096}, {1, 4096}}: shapes of `rank` positive dimensions, separated by
// commas. Throws std::invalid_argument naming `flag` and the item that is not such a shape.
std::vector<std::vector<int64_t>> parse_shape_list(const std::string& list, size_t rank, const std::string& flag);

// The device, its arch and SM count and the copy bandwidth, as the benchmarks print them first.
void print_device(const DeviceInfo& device, double copy_gbps);

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), over 1 GiB.
double measure_copy_bandwidth(tuning::KernelTimer& timer, int repeats);

// Host microseconds per call of `fn`, averaged over many back-to-back calls.
double host_us_per_call(const std::function<void()>& fn, int calls);

}  // namespace tileops::bench
