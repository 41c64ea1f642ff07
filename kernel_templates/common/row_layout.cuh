// Where a thread's share of a row lies, for the row-wise ops (rmsnorm, layernorm, softmax).
//
// A row is owned by THREADS_PER_ROW threads of a block (ROWS_PER_BLOCK rows per block), or, when
// CLUSTER > 1, by the same threads of each of CLUSTER CTAs, each holding one contiguous chunk.
// In register mode (ITEMS > 0) a thread holds ITEMS vectors of VEC elements; item i of thread t
// is vector (i * THREADS_PER_ROW + t) of its chunk, so that a row group reads consecutive
// vectors for each item (coalesced). Held vectors stay in their storage type (ITEMS x 16 bytes
// at most 128 bytes: 32 registers), converted to fp32 where used, so 1024-thread blocks don't spill.
#pragma once

namespace tileops {

template <int THREADS_PER_ROW, int ROWS_PER_BLOCK, int VEC, int ITEMS, int CLUSTER>
struct RowLayout {
    static_assert(THREADS_PER_ROW >= 1 && THREADS_PER_ROW <= 1024 && (THREADS_PER_ROW & (THREADS_PER_ROW - 1)) == 0,
                  "THREADS_PER_ROW must be a power of two in [1, 1024]");
    static_assert(THREADS_PER_ROW * ROWS_PER_BLOCK <= 1024, "at most 1024 threads per block");
    static_assert(THREADS_PER_ROW >= 32 || ROWS_PER_BLOCK * THREADS_PER_ROW % 32 == 0,
                  "sub-warp row groups must fill whole warps");
    static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
    static_assert(ITEMS >= 0, "ITEMS must be >= 0");
    static_assert(CLUSTER == 1 || (ROWS_PER_BLOCK == 1 && ITEMS > 0), "a cluster holds one row in registers");
    static constexpr int kThreads = THREADS_PER_ROW * ROWS_PER_BLOCK;
    static constexpr long long kChunk = static_cast<long long>(THREADS_PER_ROW) * VEC * ITEMS;  // per CTA

    long long row;     // the row this thread works on (may be >= rows: then it only joins barriers)
    int lane;          // index of the thread within its row group
    long long first;   // first column of this CTA's chunk

    __device__ __forceinline__ RowLayout() {
        lane = threadIdx.x % THREADS_PER_ROW;
        if constexpr (CLUSTER > 1) {
            row = blockIdx.x / CLUSTER;
            first = static_cast<long long>(blockIdx.x % CLUSTER) * kChunk;
        } else {
            row = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + threadIdx.x / THREADS_PER_ROW;
            first = 0;
        }
    }

    // Column of item i's first element in register mode.
    __device__ __forceinline__ long long column(int i) const {
        return first + (static_cast<long long>(i) * THREADS_PER_ROW + lane) * VEC;
    }
};

}  // namespace tileops
