// GPU timing shared by the autotuner and the benchmarks: CUDA events around one launch, L2
// flushed before each timed run (so a small problem is not flattered by the cache), warm-up,
// median and spread of the repeats.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

#include "runtime/device.hpp"
#include "tuning/l2_flush.hpp"

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
    // `flush_bytes`: scratch read before each timed run (use twice the L2 size; see L2Flusher).
    explicit KernelTimer(size_t flush_bytes, CUstream stream = nullptr);
    ~KernelTimer();
    KernelTimer(const KernelTimer&) = delete;
    KernelTimer& operator=(const KernelTimer&) = delete;

    // Microseconds of one run of `launch` (which must enqueue on the timer's stream).
    double time_once(const std::function<void()>& launch);
    TimingStats time(const std::function<void()>& launch, int warmup, int repeats);

private:
    runtime::DeviceBuffer flush_;
    L2Flusher flusher_;
    CUstream stream_;
    CUevent start_ = nullptr;
    CUevent stop_ = nullptr;
};

}  // namespace tileops::tuning
