#include "autotune/timing.hpp"

#include <algorithm>

#include "cuda/driver.hpp"

namespace tileops::tuning {

TimingStats summarize(std::vector<double> samples_us) {
    TimingStats stats;
    std::sort(samples_us.begin(), samples_us.end());
    if (!samples_us.empty()) {
        const size_t n = samples_us.size();
        stats.median_us = samples_us[n / 2];
        stats.p25_us = samples_us[n / 4];
        stats.p75_us = samples_us[std::min(n - 1, (3 * n) / 4)];
    }
    stats.samples_us = std::move(samples_us);
    return stats;
}

KernelTimer::KernelTimer(const DeviceInfo& device, CUstream stream)
    : flush_(2 * static_cast<size_t>(std::max(device.l2_bytes, 1 << 20))), flusher_(device.arch()), stream_(stream) {
    const auto& cu = cuda::driver();
    // The flush only reads the buffer, but reading memory never written is what initcheck
    // reports (millions of times); written once here, on the timer's stream, before any flush.
    TILEOPS_CU_CHECK(cu.cuMemsetD8Async(flush_.get(), 0, flush_.size(), stream_));
    TILEOPS_CU_CHECK(cu.cuEventCreate(&start_, CU_EVENT_DEFAULT));
    TILEOPS_CU_CHECK(cu.cuEventCreate(&stop_, CU_EVENT_DEFAULT));
}

KernelTimer::~KernelTimer() {
    const auto& cu = cuda::driver();
    if (start_ != nullptr) cu.cuEventDestroy(start_);
    if (stop_ != nullptr) cu.cuEventDestroy(stop_);
}

double KernelTimer::time_once(const std::function<void()>& launch) {
    const auto& cu = cuda::driver();
    flusher_.flush(flush_, stream_);
    TILEOPS_CU_CHECK(cu.cuEventRecord(start_, stream_));
    launch();
    TILEOPS_CU_CHECK(cu.cuEventRecord(stop_, stream_));
    TILEOPS_CU_CHECK(cu.cuEventSynchronize(stop_));
    float ms = 0;
    TILEOPS_CU_CHECK(cu.cuEventElapsedTime(&ms, start_, stop_));
    return 1e3 * ms;
}

TimingStats KernelTimer::time(const std::function<void()>& launch, int warmup, int repeats) {
    for (int i = 0; i < warmup; ++i) time_once(launch);
    std::vector<double> samples;
    samples.reserve(static_cast<size_t>(repeats));
    for (int i = 0; i < repeats; ++i) samples.push_back(time_once(launch));
    return summarize(std::move(samples));
}

}  // namespace tileops::tuning
