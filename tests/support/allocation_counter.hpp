// Counts heap allocations made by the current thread while a AllocationCounter is alive (the test
// program replaces the global operator new), so a test can prove the hot path allocates nothing.
#pragma once

#include <cstdint>

namespace tileops::test {

class AllocationCounter {
public:
    AllocationCounter();
    ~AllocationCounter();
    AllocationCounter(const AllocationCounter&) = delete;
    AllocationCounter& operator=(const AllocationCounter&) = delete;
    uint64_t count() const;

private:
    uint64_t start_;
};

}  // namespace tileops::test
