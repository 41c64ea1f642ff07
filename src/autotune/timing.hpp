// GPU timing shared by the autotuner and the benchmarks: CUDA events around one launch, L2
// flushed before each timed run (so a small problem is not flattered by the cache), warm-up,
// median and spread of the repeats.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

#include "autotune/l2_flush.hpp"
#include "cuda/device.hpp"
#include "tileops/device_info.hpp"

namespace tileops::tuning {

struct TimingStats {
    std::vector<double> samples_us;
    double median_us = 0;
    double p25_us = 0;
    double p75_us = 0;
    double spread_us() const { return p75_us - p25_us; }  // interquartile range
};

TimingStats summarize(std::vector<double> samples_us);

class KernelTimer {
public:
    // Times on `device` (its context current), reading twice its L2 size before each timed run
    // (see L2Flusher).
    explicit KernelTimer(const DeviceInfo& device, CUstream stream = nullptr);
    ~KernelTimer();
    KernelTimer(const KernelTimer&) = delete;
    KernelTimer& operator=(const KernelTimer&) = delete;

    // Microseconds of one run of `launch` (which must enqueue on the timer's stream).
    double time_once(const std::function<void()>& launch);
    TimingStats time(const std::function<void()>& launch, int warmup, int repeats);

private:
    cuda::DeviceBuffer flush_;
    L2Flusher flusher_;
    CUstream stream_;
    CUevent start_ = nullptr;
    CUevent stop_ = nullptr;
};

}  // namespace tileops::tuning
