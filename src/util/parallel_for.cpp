#include "util/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tileops::util {

size_t chunk_count(size_t n, size_t grain) {
    grain = std::max<size_t>(grain, 1);
    return n == 0 ? 0 : (n + grain - 1) / grain;
}

void parallel_for_each(size_t n, size_t threads, const std::function<void(size_t)>& body) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    threads = std::min(threads, n);
    if (threads <= 1) {
        for (size_t i = 0; i < n; ++i) body(i);
        return;
    }
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t i = next++; i < n; i = next++) body(i);
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
}

void parallel_for_chunks(size_t n, size_t grain, const std::function<void(size_t, size_t, size_t)>& body) {
    const size_t chunks = chunk_count(n, grain);
    const size_t size = chunks == 0 ? 0 : (n + chunks - 1) / chunks;
    parallel_for_each(chunks, 0, [&](size_t chunk) {
        body(chunk, std::min(n, chunk * size), std::min(n, (chunk + 1) * size));
    });
}

}  // namespace tileops::util
