// Rows of any length at any alignment, at full vector width (the ragged row kernels).
//
// Why: a row's vectors must start at addresses aligned to a vector. A row of 50257 bf16 elements
// (GPT-2's vocabulary), or a row stride that is not a multiple of the vector, would otherwise
// force the whole problem down to one element an access, at a third of the bandwidth.
//
// So a ragged launch splits each row into its edges and its body. The head is the elements before
// the row's first aligned address (fewer than VEC), the tail those after its last whole vector
// (fewer than VEC); the body between them is whole aligned vectors, which the vector machinery
// (RowLayout, RowPrefetch, ResidentRow) loads and stores as it does an aligned row, from column
// head(row). The edges, at most 2 (VEC - 1) elements, are held as scalars by the first lanes of
// the row's group (in the first CTA of a cluster) and join the row's statistics and outputs there.
//
// Every row operand of a ragged launch (x, the residual, y, the residual sum) shares x's frame:
// the host launches it only when their offsets and strides agree modulo VEC. The weights and
// biases need not: where a row's head puts them off a vector, they are read element by element
// (load_side). Without RAGGED the head is 0 and the body the whole row, and the frame compiles away.
#pragma once

#include "common/types.cuh"

namespace tileops {

template <typename T, int VEC, bool RAGGED>
struct RowFrame {
    static_assert(!RAGGED || VEC > 1, "a ragged launch has vectors of more than one element");
    static constexpr bool kRagged = RAGGED;
    long long cols;
    // x's start and its row stride, each in elements modulo VEC (at most 15): the start in the
    // low byte, the stride in the next. One register: the 1024-thread kernels have 64.
    unsigned phase;

    __device__ __forceinline__ RowFrame(const T* x, long long x_stride, long long row_length)
        : cols(row_length),
          phase((static_cast<unsigned>(reinterpret_cast<unsigned long long>(x) / sizeof(T)) & (VEC - 1)) |
                (static_cast<unsigned>(x_stride) & (VEC - 1)) << 8) {}

    // Elements of `row` before its first aligned address (all of a row shorter than that).
    __device__ __forceinline__ int head(long long row) const {
        if constexpr (!RAGGED) {
            return 0;
        } else {
            const unsigned start = ((phase & 0xff) + static_cast<unsigned>(row) * (phase >> 8)) & (VEC - 1);
            const long long before_aligned = (VEC - start) & (VEC - 1);
            return static_cast<int>(before_aligned < cols ? before_aligned : cols);
        }
    }

    // Elements of `row`'s body: whole vectors from column head(row).
    __device__ __forceinline__ long long body(long long row) const {
        if constexpr (!RAGGED)
            return cols;
        else
            return (cols - head(row)) & ~static_cast<long long>(VEC - 1);
    }
};

// A row's edges as INPUTS scalar values (one per input row) in the lanes that hold them: lane l of
// LANES holds edge elements l, l + LANES, ... (head first, then tail, in column order). Without
// RAGGED it holds nothing. Kept small (a value and a 32-bit place an edge) because the 1024-thread
// kernels have 64 registers a thread and a row's edges are in flight while the previous row is
// worked on: the place is the column in the head, the column minus cols in the tail.
template <typename T, int VEC, int LANES, int INPUTS, bool RAGGED>
struct RowEdges {
    static constexpr int kPerLane = RAGGED ? (2 * (VEC - 1) + LANES - 1) / LANES : 0;
    static constexpr int kSlots = kPerLane > 0 ? kPerLane : 1;
    static constexpr int kNone = 1 << 30;  // no edge in this slot

    T value[INPUTS][kSlots];
    int place[kSlots];

    __device__ __forceinline__ bool present(int s) const { return place[s] != kNone; }
    __device__ __forceinline__ long long column(int s, long long cols) const {
        return place[s] >= 0 ? place[s] : cols + place[s];
    }

    // Reads the edges of `row` (a row past the end when !exists) of inputs bases[j] + row *
    // strides[j], for the thread at `lane` of its row group; `first_chunk`: its CTA holds the
    // row's first chunk (the edges' holder in a cluster).
    template <class Frame>
    __device__ __forceinline__ void load(const Frame& frame, long long row, bool exists, int lane, bool first_chunk,
                                         const T* const* bases, const long long* strides) {
        if constexpr (kPerLane > 0) {
            const int head = frame.head(row);
            const int count = exists && first_chunk ? static_cast<int>(frame.cols - frame.body(row)) : 0;
#pragma unroll
            for (int s = 0; s < kPerLane; ++s) {
                const int e = s * LANES + lane;
                place[s] = e >= count ? kNone : e < head ? e : e - count;
#pragma unroll
                for (int j = 0; j < INPUTS; ++j)
                    value[j][s] = present(s) ? bases[j][row * strides[j] + column(s, frame.cols)] : from_float<T>(0.0f);
            }
        }
    }

    // f(slot, column) for each edge this thread holds, in a row of `cols`.
    template <class F>
    __device__ __forceinline__ void for_each(long long cols, F&& f) const {
#pragma unroll
        for (int s = 0; s < kPerLane; ++s)
            if (present(s)) f(s, column(s, cols));
    }

    __device__ __forceinline__ Vec<T, 1> at(int input, int s) const { return Vec<T, 1>{{value[input][s]}}; }
};

// VEC elements from p: one vector access when p is aligned to one, else element by element (the
// weights and biases of a ragged row, whose offset need not be the row's).
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_side(const T* p, bool aligned) {
    if (aligned) return load_raw<T, VEC>(p);
    Vec<T, VEC> v;
#pragma unroll
    for (int k = 0; k < VEC; ++k) v.v[k] = p[k];
    return v;
}

// Whether p + head is aligned to a vector of VEC elements of T.
template <typename T, int VEC>
__device__ __forceinline__ bool vector_aligned(const T* p, int head) {
    return ((reinterpret_cast<unsigned long long>(p + head) / sizeof(T)) & (VEC - 1)) == 0;
}

}  // namespace tileops
