#include "support/allocation_counter.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local uint64_t allocations = 0;
thread_local int counting = 0;
}  // namespace

void* operator new(std::size_t size) {
    if (counting > 0) ++allocations;
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace tileops::test {

AllocationCounter::AllocationCounter() : start_(allocations) { ++counting; }
AllocationCounter::~AllocationCounter() { --counting; }
uint64_t AllocationCounter::count() const { return allocations - start_; }

}  // namespace tileops::test
