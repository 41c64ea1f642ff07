// An op's per-runtime state without a GPU: each runtime gets its own entry, a published launch is
// never rewritten while its runtime lives, entries of runtimes that are gone are reused, and more
// live runtimes than entries is a clear error.
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "runtime/op_state.hpp"
#include "tileops/error.hpp"

namespace {

using tileops::detail::kMaxRuntimesPerOp;
using tileops::detail::OpState;
using tileops::detail::ResolvedLaunch;
using tileops::detail::RuntimeEntry;

std::set<uint64_t> dead_runtimes;
bool is_live(uint64_t id) { return dead_runtimes.count(id) == 0; }

// What RuntimeImpl::resolve does, with a launch whose grid names the runtime.
const ResolvedLaunch& resolve(OpState& state, uint64_t id, int slot) {
    std::lock_guard lock(state.mutex);
    RuntimeEntry& entry = state.entry_locked(id, &is_live);
    auto& kernel = entry.slots[static_cast<size_t>(slot)];
    if (!kernel.ready.load()) {
        kernel.launch.grid[0] = static_cast<unsigned>(id);
        kernel.launch.grid[1] = static_cast<unsigned>(slot);
        kernel.ready.store(true, std::memory_order_release);
    }
    return kernel.launch;
}

}  // namespace

TEST_CASE("an op keeps one entry per runtime and finds each runtime's own launch", "[op_state]") {
    dead_runtimes.clear();
    OpState state;
    CHECK(state.find_launch(7, 0) == nullptr);
    resolve(state, 7, 0);
    resolve(state, 9, 3);
    resolve(state, 7, 3);
    const ResolvedLaunch* a0 = state.find_launch(7, 0);
    const ResolvedLaunch* a3 = state.find_launch(7, 3);
    const ResolvedLaunch* b3 = state.find_launch(9, 3);
    REQUIRE(a0 != nullptr);
    REQUIRE(a3 != nullptr);
    REQUIRE(b3 != nullptr);
    CHECK(a0->grid[0] == 7);
    CHECK(a3->grid[0] == 7);
    CHECK(a3->grid[1] == 3);
    CHECK(b3->grid[0] == 9);
    CHECK(state.find_launch(9, 0) == nullptr);  // resolved per vector slot
    CHECK(state.find_launch(8, 3) == nullptr);  // a runtime it never ran on
    // Runtime 9 resolving again leaves runtime 7's launches where they were.
    resolve(state, 9, 0);
    CHECK(state.find_launch(7, 0) == a0);
    CHECK(a0->grid[0] == 7);
}

TEST_CASE("an op reuses the entry of a runtime that is gone, and refuses more live runtimes than entries",
          "[op_state]") {
    dead_runtimes.clear();
    OpState state;
    for (uint64_t id = 1; id <= static_cast<uint64_t>(kMaxRuntimesPerOp); ++id) resolve(state, id, 1);
    {
        std::lock_guard lock(state.mutex);
        CHECK_THROWS_AS(state.entry_locked(100, &is_live), tileops::Unsupported);
        CHECK_THROWS_WITH(state.entry_locked(100, &is_live), Catch::Matchers::ContainsSubstring("at most 8 runtimes"));
    }
    dead_runtimes.insert(3);
    const ResolvedLaunch& reused = resolve(state, 100, 2);
    CHECK(reused.grid[0] == 100);
    CHECK(state.find_launch(3, 1) == nullptr);    // the dead runtime's launch is gone
    CHECK(state.find_launch(100, 1) == nullptr);  // and the new owner starts with empty slots
    for (uint64_t id : {1, 2, 4, 5, 6, 7, 8}) {
        const ResolvedLaunch* launch = state.find_launch(id, 1);
        REQUIRE(launch != nullptr);
        CHECK(launch->grid[0] == id);
    }
}

TEST_CASE("threads on different runtimes resolve and read one op without seeing each other's launches", "[op_state]") {
    dead_runtimes.clear();
    OpState state;
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (uint64_t id = 1; id <= 4; ++id)
        threads.emplace_back([&, id] {
            for (int round = 0; round < 2000; ++round) {
                const int slot = round % 5;
                const ResolvedLaunch* launch = state.find_launch(id, slot);
                if (launch == nullptr) launch = &resolve(state, id, slot);
                if (launch->grid[0] != id || launch->grid[1] != static_cast<unsigned>(slot)) ++wrong;
            }
        });
    for (std::thread& t : threads) t.join();
    CHECK(wrong.load() == 0);
}
