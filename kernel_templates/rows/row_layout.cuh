// Where a thread's share of a row lies, for the row-wise ops (rmsnorm, layernorm, softmax).
//
// A row is owned by THREADS_PER_ROW threads of a block (ROWS_PER_BLOCK rows per block), or, when
// CLUSTER > 1, by the same threads of each of CLUSTER CTAs, each holding one contiguous chunk.
// In register mode (ITEMS > 0) a thread holds ITEMS vectors of VEC elements; item i of thread t
// is vector (i * THREADS_PER_ROW + t) of its chunk, so that a row group reads consecutive
// vectors for each item (coalesced). Held vectors stay in their storage type (ITEMS x 16 bytes
// at most 128 bytes: 32 registers), converted to fp32 where used, so 1024-thread blocks don't spill.
//
// The rows of a block (or the row of a cluster) form a group. A block works on group
// blockIdx.x / CLUSTER, then on the groups that follow in steps of the grid: one group per block
// when the grid covers them all, several when the grid is persistent (see RowPrefetch).
#pragma once

#include "arch/async_copy.cuh"
#include "common/types.cuh"
#include "common/row_frame.cuh"

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
    static constexpr int kThreadsPerRow = THREADS_PER_ROW;
    static constexpr long long kChunk = static_cast<long long>(THREADS_PER_ROW) * VEC * ITEMS;  // per CTA

    long long group;   // the row group this block works on
    long long row;     // the row this thread works on (may be >= rows: then it only joins barriers)
    int lane;          // index of the thread within its row group
    long long first;   // first column of this CTA's chunk

    __device__ __forceinline__ RowLayout() {
        lane = threadIdx.x % THREADS_PER_ROW;
        first = CLUSTER > 1 ? static_cast<long long>(blockIdx.x % CLUSTER) * kChunk : 0;
        group = blockIdx.x / CLUSTER;
        row = row_of(group);
    }

    // Row groups of a problem of `rows` rows.
    static __device__ __forceinline__ long long groups(long long rows) {
        return (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    }

    // This thread's row in group `g`.
    __device__ __forceinline__ long long row_of(long long g) const {
        return g * ROWS_PER_BLOCK + static_cast<long long>(threadIdx.x / THREADS_PER_ROW);
    }

    // The block's next group (one grid further). Uniform across the block and the cluster.
    __device__ __forceinline__ void advance() {
        group += gridDim.x / CLUSTER;
        row = row_of(group);
    }

    // Column of item i's first element in register mode.
    __device__ __forceinline__ long long column(int i) const {
        return first + (static_cast<long long>(i) * THREADS_PER_ROW + lane) * VEC;
    }
};

// cp.async of 4 or 8 bytes (through L1: only 16-byte copies may bypass it); as cp_async_16.
template <int BYTES>
__device__ __forceinline__ void cp_async_small(void* shared, const void* global, bool read) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(address), "l"(global), "n"(BYTES),
                 "r"(read ? BYTES : 0)
                 : "memory");
}

// The loads of a persistent block's next row groups, in flight while it works on the current one.
// Each thread copies its ITEMS vectors of each of INPUTS input rows into shared memory with
// cp.async and reads back only what it copied itself, so waiting for its own copies is enough
// (no barrier): the loads stay in flight across the row's block and cluster barriers, where the
// CTA would otherwise have nothing to read. Two stages, two groups ahead: a stage is refilled with
// the group after next as soon as the thread has read it into registers (the same thread's
// ld.shared comes first in program order; the cp.async writes only after a round trip to memory).
// Slots: [stage][input][item][thread], consecutive threads in consecutive slots (no bank conflicts).
template <typename T, int VEC, int ITEMS, int INPUTS, int THREADS>
struct RowPrefetch {
    using Slot = Vec<T, VEC>;
    static constexpr int kBytes = static_cast<int>(sizeof(Slot));
    static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
    // Shared memory of one stage for the block (two stages are used).
    static constexpr int kStageBytes = INPUTS * ITEMS * THREADS * kBytes;

    Slot* slots;  // this thread's first slot

    __device__ __forceinline__ explicit RowPrefetch(void* shared) : slots(static_cast<Slot*>(shared) + threadIdx.x) {}

    __device__ __forceinline__ Slot* slot(int stage, int input, int item) const {
        return slots + ((stage * INPUTS + input) * ITEMS + item) * THREADS;
    }

    // Starts the copies of this thread's vectors of its row in `at`'s group into `stage`: input
    // j's row body starts at bases[j] + row * strides[j] + frame.head(row). Vectors past the body,
    // and rows past the end (a group past the last one included), are zero-filled without a read.
    template <class Layout, class Frame>
    __device__ __forceinline__ void copy(int stage, const Layout& at, long long rows, const Frame& frame,
                                         const T* const* bases, const long long* strides) const {
        const long long body = frame.body(at.row);
        const int head = frame.head(at.row);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long col = at.column(i);
            const bool read = at.row < rows && col < body;
#pragma unroll
            for (int j = 0; j < INPUTS; ++j) {
                const T* from = read ? bases[j] + at.row * strides[j] + head + col : bases[j];
                if constexpr (kBytes == 16)
                    cp_async_16(slot(stage, j, i), from, read);
                else
                    cp_async_small<kBytes>(slot(stage, j, i), from, read);
            }
        }
        cp_async_commit();
    }

    __device__ __forceinline__ Slot held(int stage, int input, int item) const { return *slot(stage, input, item); }
};

// Runs body(at, held, edges) for each row group of this block in register mode, `held` holding
// the thread's ITEMS vectors of each input row's body (zeros past it and for rows past the end)
// and `edges` its edges (RowEdges, ragged frames only); input j is the matrix at bases[j] with row
// stride strides[j]. With PREFETCH the grid is persistent and the next group's vectors are copied
// while body runs (dynamic shared memory: RowPrefetch::kStageBytes x 2 for the block), its edges
// loaded into registers; otherwise they are loaded when the group starts. Every thread of the
// block calls it (body may hold block and cluster barriers).
template <class Layout, typename T, int VEC, int ITEMS, int INPUTS, bool PREFETCH, class Frame, class Body>
__device__ __forceinline__ void for_each_row_group(long long rows, const Frame& frame, const T* const* bases,
                                                   const long long* strides, Body&& body) {
    constexpr bool kRagged = Frame::kRagged;
    using Edges = RowEdges<T, VEC, Layout::kThreadsPerRow, INPUTS, kRagged>;
    Layout at;
    const long long groups = Layout::groups(rows);
    Vec<T, VEC> held[INPUTS][ITEMS];
    Edges edges;
    auto load_edges = [&](Edges& e, const Layout& of) {
        e.load(frame, of.row, of.row < rows, of.lane, of.first == 0, bases, strides);
    };
    if constexpr (PREFETCH) {
        extern __shared__ __align__(16) unsigned char row_prefetch_slots[];
        const RowPrefetch<T, VEC, ITEMS, INPUTS, Layout::kThreads> prefetch(row_prefetch_slots);
        Layout ahead = at;  // the group whose copies the next refill starts
        prefetch.copy(0, ahead, rows, frame, bases, strides);
        ahead.advance();
        prefetch.copy(1, ahead, rows, frame, bases, strides);  // past the last group: no reads
        ahead.advance();
        load_edges(edges, at);
        for (int stage = 0; at.group < groups; stage ^= 1) {
            cp_async_wait<1>();  // this group's copies landed; the next group's may be in flight
#pragma unroll
            for (int j = 0; j < INPUTS; ++j)
#pragma unroll
                for (int i = 0; i < ITEMS; ++i) held[j][i] = prefetch.held(stage, j, i);
            prefetch.copy(stage, ahead, rows, frame, bases, strides);
            ahead.advance();
            Edges next_edges;  // in flight while this group is worked on
            if constexpr (kRagged) {
                Layout next = at;
                next.advance();
                load_edges(next_edges, next);
            }
            body(static_cast<const Layout&>(at), held, static_cast<const Edges&>(edges));
            if constexpr (kRagged) edges = next_edges;
            at.advance();
        }
        cp_async_wait<0>();  // no copy may still be writing when the block exits
    } else {
        for (; at.group < groups; at.advance()) {
            const long long body_cols = frame.body(at.row);
            const int head = frame.head(at.row);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long col = at.column(i);
#pragma unroll
                for (int j = 0; j < INPUTS; ++j) {
                    if (at.row < rows && col < body_cols) {
                        held[j][i] = load_raw<T, VEC>(bases[j] + at.row * strides[j] + head + col);
                    } else {
#pragma unroll
                        for (int k = 0; k < VEC; ++k) held[j][i].v[k] = from_float<T>(0.0f);
                    }
                }
            }
            load_edges(edges, at);
            body(static_cast<const Layout&>(at), held, static_cast<const Edges&>(edges));
        }
    }
}

}  // namespace tileops
