// The 32-bit shared-memory address of a generic pointer into shared memory: what PTX's
// shared-space instructions (cp.async, ldmatrix, mbarrier, TMA) take as their operand.
#pragma once

namespace tileops {

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
    return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

}  // namespace tileops
