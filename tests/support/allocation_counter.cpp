#include "support/allocation_counter.hpp"

#include <cstdint>
#include <cstdlib>
#include <new>

// The test program replaces the whole set of global allocation functions, so that every allocation
// is counted and every block is released by the function family that made it. All of them allocate
// with malloc or aligned_alloc and release with free: a variant left to the default (the runtime's,
// or AddressSanitizer's own when it is on) would pair its allocation with our free, which ASan
// reports as alloc-dealloc-mismatch (std::stable_sort takes its buffer with the nothrow new).

namespace {
thread_local uint64_t allocations = 0;
thread_local int counting = 0;

// One attempt; nullptr when the memory is not there.
void* try_allocate(std::size_t size, std::size_t alignment) noexcept {
    if (size == 0) size = 1;
    if (alignment <= __STDCPP_DEFAULT_NEW_ALIGNMENT__) return std::malloc(size);
    // aligned_alloc wants a size that is a multiple of the alignment.
    if (size > SIZE_MAX - (alignment - 1)) return nullptr;
    return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}

// What the throwing operator new does: call the new-handler until the memory comes, or throw.
// Each call counts as one allocation, whatever its form.
void* allocate(std::size_t size, std::size_t alignment) {
    if (counting > 0) ++allocations;
    for (;;) {
        if (void* p = try_allocate(size, alignment)) return p;
        std::new_handler handler = std::get_new_handler();
        if (handler == nullptr) throw std::bad_alloc();
        handler();
    }
}

// The nothrow forms are the throwing ones with the exception turned into nullptr ([new.delete]).
void* allocate_nothrow(std::size_t size, std::size_t alignment) noexcept {
    try {
        return allocate(size, alignment);
    } catch (...) {
        return nullptr;
    }
}

std::size_t alignment_of(std::align_val_t alignment) { return static_cast<std::size_t>(alignment); }
}  // namespace

// Allocation: plain, array; nothrow; aligned; aligned nothrow.
void* operator new(std::size_t size) { return allocate(size, 0); }
void* operator new[](std::size_t size) { return allocate(size, 0); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate_nothrow(size, 0); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate_nothrow(size, 0); }
void* operator new(std::size_t size, std::align_val_t al) { return allocate(size, alignment_of(al)); }
void* operator new[](std::size_t size, std::align_val_t al) { return allocate(size, alignment_of(al)); }
void* operator new(std::size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
    return allocate_nothrow(size, alignment_of(al));
}
void* operator new[](std::size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
    return allocate_nothrow(size, alignment_of(al));
}

// Deallocation: every form of every family frees (malloc and aligned_alloc blocks alike).
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace tileops::test {

AllocationCounter::AllocationCounter() : start_(allocations) { ++counting; }
AllocationCounter::~AllocationCounter() { --counting; }
uint64_t AllocationCounter::count() const { return allocations - start_; }

}  // namespace tileops::test
