// cp.async (sm_80+): 16-byte copies from global to shared memory that run in the background,
// tracked in commit groups, so a warp keeps several stages of loads in flight while it computes.
#pragma once

namespace tileops {

// Copies 16 bytes from `global` to `shared`; when `read` is false nothing is read and the 16
// bytes are zero-filled (so masked-out loads need no branch and never touch memory).
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, bool read) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(read ? 16 : 0)
                 : "memory");
}

// Closes the current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most PENDING groups are still in flight; the calling thread then sees the data
// of the older groups (other threads' copies need a barrier too).
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

}  // namespace tileops
