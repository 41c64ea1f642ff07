#include "bench_common.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <numeric>
#include <cstdint>

#include <fmt/format.h>

#include "util/host_dtype.hpp"

namespace tileops::bench {

using cuda::DeviceBuffer;

const cuda::DriverApi& cu() { return cuda::driver(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double time_ms(const std::function<void()>& fn, tuning::KernelTimer& timer, int repeats) {
    return timer.time(fn, 3, repeats).median_us * 1e-3;
}

std::pair<double, double> time_pair_ms(const std::function<void()>& a, const std::function<void()>& b,
                                       tuning::KernelTimer& timer, int repeats) {
    for (int i = 0; i < 3; ++i) {
        timer.time_once(a);
        timer.time_once(b);
    }
    std::vector<double> a_us, b_us;
    for (int i = 0; i < repeats; ++i) {
        if (i % 2 == 0) {
            a_us.push_back(timer.time_once(a));
            b_us.push_back(timer.time_once(b));
        } else {
            b_us.push_back(timer.time_once(b));
            a_us.push_back(timer.time_once(a));
        }
    }
    return {median(std::move(a_us)) * 1e-3, median(std::move(b_us)) * 1e-3};
}

DeviceBuffer random_buffer(size_t bytes, DType dtype, uint64_t seed, size_t period) {
    // Values in [-2, 2) as the dtype stores them; never zeros. With a period, only the first
    // `period` bytes are drawn on the host and device-to-device copies repeat them.
    const size_t element = dtype_size(dtype);
    const size_t block = period == 0 ? bytes : std::min(bytes, std::max(period / element, size_t{1}) * element);
    std::vector<uint8_t> host(block);
    uint64_t state = 0x9e3779b97f4a7c15ULL ^ bytes ^ (seed * 0xbf58476d1ce4e5b9ULL);
    for (size_t i = 0; i < block / element; ++i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = static_cast<float>((state >> 40) & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
        util::encode_value(dtype, f, &host[i * element]);
    }
    DeviceBuffer buffer(bytes);
    buffer.upload(host.data(), block);
    for (size_t filled = block; filled < bytes;) {
        const size_t n = std::min(filled, bytes - filled);
        TILEOPS_CU_CHECK(cu().cuMemcpyDtoDAsync(buffer.get() + filled, buffer.get(), n, nullptr));
        filled += n;
    }
    TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
    return buffer;
}

double measure_copy_bandwidth(tuning::KernelTimer& timer, int repeats) {
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer src(bytes), dst(bytes);
    src.fill_bytes(1);
    double ms = time_ms([&] { TILEOPS_CU_CHECK(cu().cuMemcpyDtoDAsync(dst.get(), src.get(), bytes, nullptr)); }, timer,
                        repeats);
    return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

double host_us_per_call(const std::function<void()>& fn, int calls) {
    for (int i = 0; i < 100; ++i) fn();
    TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
    std::vector<double> rounds;
    for (int round = 0; round < 7; ++round) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) fn();
        auto stop = std::chrono::steady_clock::now();
        TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
        rounds.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / calls);
    }
    return median(rounds);
}

cuda::DeviceBuffer int_buffer(const std::vector<int32_t>& values) {
    cuda::DeviceBuffer buffer(values.size() * sizeof(int32_t));
    buffer.upload(values.data(), buffer.size());
    return buffer;
}

std::vector<int32_t> pool_pages(int64_t num_pages, bool shuffled) {
    std::vector<int32_t> table(static_cast<size_t>(num_pages));
    std::iota(table.begin(), table.end(), 0);
    if (shuffled) std::shuffle(table.begin(), table.end(), std::mt19937_64(42));
    return table;
}

std::vector<int64_t> parse_dims(const std::string& text) {
    std::vector<int64_t> dims;
    for (size_t at = 0; at <= text.size();) {
        const size_t x = std::min(text.find('x', at), text.size());
        dims.push_back(std::stoll(text.substr(at, x - at)));
        at = x + 1;
    }
    return dims;
}

std::vector<std::string> split_list(const std::string& list) {
    std::vector<std::string> items;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        if (comma > start) items.push_back(list.substr(start, comma - start));
        start = comma + 1;
    }
    return items;
}

std::vector<std::vector<int64_t>> parse_shape_list(const std::string& list, size_t rank, const std::string& flag) {
    std::vector<std::vector<int64_t>> shapes;
    for (const std::string& item : split_list(list)) {
        std::vector<int64_t> dims;
        try {
            dims = parse_dims(item);
        } catch (const std::logic_error&) {  // std::stoll: not a number, or out of range
            dims.clear();
        }
        if (dims.size() != rank || *std::min_element(dims.begin(), dims.end()) < 1)
            throw std::invalid_argument(fmt::format("{}: '{}' is not {} positive dimensions joined by 'x'", flag, item, rank));
        shapes.push_back(std::move(dims));
    }
    return shapes;
}

void print_device(const DeviceInfo& device, double copy_gbps) {
    fmt::print("device: {} ({}), {} SMs; device-to-device copy {:.0f} GB/s\n", device.name, device.arch(), device.sm_count,
               copy_gbps);
}

}  // namespace tileops::bench
