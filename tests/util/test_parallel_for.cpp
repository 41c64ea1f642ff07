// util::parallel_for_each and parallel_for_chunks: every index visited exactly once (the chunks
// the same whatever the thread count), and nothing run for an empty range.
#include <atomic>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "util/parallel_for.hpp"

using tileops::util::chunk_count;
using tileops::util::parallel_for_chunks;

TEST_CASE("parallel_for_chunks visits every index once, in fixed chunks", "[util]") {
    const size_t n = GENERATE(size_t{1}, size_t{5}, size_t{10}, size_t{1000}, size_t{1} << 20, (size_t{1} << 20) + 7);
    const size_t grain = GENERATE(size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4096});
    CAPTURE(n, grain);
    const size_t chunks = chunk_count(n, grain);
    REQUIRE(chunks >= 1);
    std::vector<std::atomic<int>> visits(n);
    std::vector<size_t> begins(chunks, n + 1), ends(chunks, n + 1);
    std::atomic<size_t> calls{0};
    parallel_for_chunks(n, grain, [&](size_t chunk, size_t begin, size_t end) {
        ++calls;
        begins[chunk] = begin;
        ends[chunk] = end;
        for (size_t i = begin; i < end; ++i) ++visits[i];
    });
    CHECK(calls == chunks);
    size_t wrong = 0;
    for (auto& v : visits) wrong += v != 1;
    CHECK(wrong == 0);
    // Chunks are consecutive and cover [0, n).
    CHECK(begins.front() == 0);
    CHECK(ends.back() == n);
    size_t gaps = 0;
    for (size_t c = 1; c < chunks; ++c) gaps += begins[c] != ends[c - 1];
    CHECK(gaps == 0);
}

TEST_CASE("parallel_for_chunks runs nothing for an empty range", "[util]") {
    CHECK(chunk_count(0, 16) == 0);
    bool ran = false;
    parallel_for_chunks(0, 16, [&](size_t, size_t, size_t) { ran = true; });
    CHECK_FALSE(ran);
}

TEST_CASE("parallel_for_each runs every index once on the threads asked for", "[util]") {
    const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{1000});
    const size_t threads = GENERATE(size_t{0}, size_t{1}, size_t{3}, size_t{64});
    CAPTURE(n, threads);
    std::vector<std::atomic<int>> visits(n);
    std::vector<size_t> order;
    std::atomic<size_t> calls{0};
    tileops::util::parallel_for_each(n, threads, [&](size_t i) {
        ++calls;
        ++visits[i];
        if (threads == 1) order.push_back(i);  // one thread: the caller, in order
    });
    CHECK(calls == n);
    for (size_t i = 0; i < n; ++i) CHECK(visits[i] == 1);
    if (threads == 1) {
        std::vector<size_t> expected(n);
        for (size_t i = 0; i < n; ++i) expected[i] = i;
        CHECK(order == expected);
    }
}
