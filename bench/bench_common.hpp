// Timing helpers shared by the benchmark programs: CUDA-event timing with L2 flushed before each
// run, random device buffers, the device's copy bandwidth.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "tileops/tensor.hpp"

namespace tileops::bench {

const runtime::DriverApi& cu();

double median(std::vector<double> values);

// Median milliseconds of `fn` over `repeats` runs on the legacy stream, after 3 warm-up runs,
// with `flush` (larger than L2) read before each timed run so that inputs come from HBM and no
// dirty line of an earlier run is left to write back inside the timed one.
double time_ms(const std::function<void()>& fn, runtime::DeviceBuffer& flush, int repeats);

// A buffer of `bytes` filled with values in [-2, 2) as `dtype` stores them (never zeros).
runtime::DeviceBuffer random_buffer(size_t bytes, DType dtype);

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), over 1 GiB.
double measure_copy_bandwidth(int repeats);

// Host microseconds per call of `fn`, averaged over many back-to-back calls.
double host_us_per_call(const std::function<void()>& fn, int calls);

}  // namespace tileops::bench
