// A long row held on chip while it is reduced, for the row ops' long-row kernels
// (rmsnorm_resident.cuh, layernorm_resident.cuh, softmax_resident.cuh).
//
// Why: a row of 256k bf16 elements (512 KB) fits in no CTA's registers, and clusters of more than
// two CTAs cannot be placed on all 132 SMs of an H100 (docs/perf/rows.md), so the
// register-only kernels leave SMs idle on such rows. Here each CTA of a cluster (two, typically)
// holds its chunk of one row in registers (ITEMS vectors a thread) and in shared memory (SLOTS
// vectors a thread), which together hold 256 KB a CTA, and the row is still read from memory once.
//
// The grid is persistent: a CTA walks the rows of its cluster's groups in steps of the grid. The
// next row's loads start as soon as the current row's outputs are written: each shared slot is
// refilled with cp.async right after its output is stored, and each register vector is reloaded
// after its output, so a CTA's loads of the next row overlap its stores of this one. The row's
// statistics are gathered in one pass as its vectors land (for_each_as_it_lands), so that pass
// overlaps the loads too, and the CTA has no memory traffic in flight only during its reductions.
//
// Item i of thread t is the vector at column first + (i * THREADS + t) * VEC of the CTA's chunk
// (RowLayout with ITEMS + SLOTS items): items 0..ITEMS-1 live in registers, the rest in slots.
// A thread reads back only the slots it filled itself, so waiting for its own copies suffices.
// With RAGGED the vectors are the row's body and the row's edges are held as scalars besides
// (common/row_frame.cuh): edges() for the current row, loaded with its vectors.
// The CTAs start at staggered moments (rows/stagger.cuh) so that their reductions, when they
// have no loads in flight, do not all fall at the same moments.
#pragma once

#include "arch/async_copy.cuh"
#include "common/types.cuh"
#include "common/row_frame.cuh"
#include "rows/row_layout.cuh"
#include "rows/stagger.cuh"

namespace tileops {

template <typename T, int THREADS, int VEC, int ITEMS, int SLOTS, int CLUSTER, bool RAGGED = false>
class ResidentRow {
public:
    using Layout = RowLayout<THREADS, 1, VEC, ITEMS + SLOTS, CLUSTER>;
    using Frame = RowFrame<T, VEC, RAGGED>;
    using Edges = RowEdges<T, VEC, THREADS, 1, RAGGED>;
    using Slot = Vec<T, VEC>;
    static constexpr int kSlotBytes = static_cast<int>(sizeof(Slot));
    static_assert(SLOTS > 0, "the resident kernels hold part of the row in shared memory");
    static_assert(kSlotBytes == 4 || kSlotBytes == 8 || kSlotBytes == 16, "cp.async copies 4, 8 or 16 bytes");
    // Dynamic shared memory of a CTA.
    static constexpr int kSharedBytes = SLOTS * THREADS * kSlotBytes;

    // Starts the loads of the CTA's first row. `shared` is the CTA's dynamic shared memory.
    __device__ __forceinline__ ResidentRow(void* shared, const T* x, long long stride, long long rows, long long cols)
        : slots_(static_cast<Slot*>(shared) + threadIdx.x), x_(x), stride_(stride), rows_(rows), frame_(x, stride, cols) {
        stagger_start<static_cast<long long>(ITEMS + SLOTS) * THREADS * kSlotBytes>(at_.group);
        auto no_side = [](long long) { return 0; };
        auto nothing_to_emit = [](long long, const Slot&, int) {};
        load_edges(edges_, at_);
        refill<0>(at_, no_side, nothing_to_emit, 0);
    }

    __device__ __forceinline__ bool has_row() const { return at_.row < rows_; }
    __device__ __forceinline__ long long row() const { return at_.row; }
    // Where the current row's body starts (its vectors' columns are relative to it).
    __device__ __forceinline__ int head() const { return frame_.head(at_.row); }
    __device__ __forceinline__ long long body() const { return frame_.body(at_.row); }
    __device__ __forceinline__ const Edges& edges() const { return edges_; }

    // Calls f(vector, in_row) for every vector the thread holds of the current row, each as soon
    // as it has landed (the slots in kGroups commit groups, oldest first, then the registers), so
    // the work on the first vectors overlaps the loads of the last. Vectors past the row are
    // zeros and come with in_row false.
    template <class F>
    __device__ __forceinline__ void for_each_as_it_lands(F&& f) const {
        visit<0>(f);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) f(held_[i], at_.column(i) < body());
    }

    // Calls f(column, vector, side_of(column)) for every vector of the row the thread holds (its
    // outputs; columns relative to head()), and replaces each one, right after, with the same
    // columns of the CTA's next row; then moves on to that row (its edges too: the current row's
    // edges must have been used by then). side_of loads what an output needs besides the row (the weights
    // of its columns, say): it is called one vector ahead, so its loads are in flight while the
    // previous output is worked out instead of each output waiting a round trip for them.
    template <class S, class F>
    __device__ __forceinline__ void emit_and_advance(S&& side_of, F&& f) {
        Layout next = at_;
        next.advance();
        refill<0>(next, side_of, f, side_at(side_of, ITEMS));
        at_ = next;
        // After the row's loads, so that the edges of only one row are held: the kernels use
        // them once the row has landed.
        load_edges(edges_, at_);
    }

private:
    __device__ __forceinline__ Slot& slot(int s) const { return slots_[s * THREADS]; }

    __device__ __forceinline__ void load_edges(Edges& edges, const Layout& of) const {
        const T* const bases[1] = {x_};
        const long long strides[1] = {stride_};
        edges.load(frame_, of.row, of.row < rows_, of.lane, of.first == 0, bases, strides);
    }

    // `col` counts from the row's start (its head included).
    __device__ __forceinline__ Slot load_or_zero(bool read, long long row, long long col) const {
        if (read) return load_raw<T, VEC>(x_ + row * stride_ + col);
        Slot zero;
#pragma unroll
        for (int k = 0; k < VEC; ++k) zero.v[k] = from_float<T>(0.0f);
        return zero;
    }

    // Copies the vector at (row, col) into slot s, or zero-fills it without a read.
    __device__ __forceinline__ void copy_slot(int s, bool read, long long row, long long col) const {
        const T* from = read ? x_ + row * stride_ + col : x_;
        if constexpr (kSlotBytes == 16)
            cp_async_16(&slot(s), from, read);
        else
            cp_async_small<kSlotBytes>(&slot(s), from, read);
    }

    // Slots are copied in kGroups commit groups of consecutive slots (few, so that cp.async's
    // wait counts stay small): group g holds slots [begin(g), begin(g + 1)).
    static constexpr int kGroups = SLOTS < 4 ? SLOTS : 4;
    static constexpr __host__ __device__ int begin(int g) { return g * SLOTS / kGroups; }

    template <int G, class F>
    __device__ __forceinline__ void visit(F& f) const {
        if constexpr (G < kGroups) {
            cp_async_wait<kGroups - 1 - G>();  // groups 0..G of this row have landed
#pragma unroll
            for (int s = begin(G); s < begin(G + 1); ++s) {
                const Slot held = slot(s);  // one 16-byte access (a reference would read element-wise)
                f(held, at_.column(ITEMS + s) < body());
            }
            visit<G + 1>(f);
        }
    }

    // From group G on: emits each slot's vector of the current row with f (in the row only) and
    // starts the copy of `to`'s vector at the same column into it (zero-fill past the row or the
    // last row); then does the same for the register vectors, reloading them directly. `side` is
    // the side data of group G's first slot; each slot's successor's is loaded before the slot's
    // output is worked out (a register vector's where it is used).
    template <int G, class S, class F, class Side>
    __device__ __forceinline__ void refill(const Layout& to, S& side_of, F& f, Side side) {
        // The bodies' bounds are read where they are used, not hoisted here: hoisted, they
        // changed the aligned kernels' code (and so their tuned timings).
        const bool exists = to.row < rows_;
        if constexpr (G < kGroups) {
#pragma unroll
            for (int s = begin(G); s < begin(G + 1); ++s) {
                // The slot is read into registers (one 16-byte access) before the copy that
                // overwrites it is issued, and that copy is issued before the output is worked
                // out: the next row's loads start as early as they can.
                const long long col = at_.column(ITEMS + s);
                const Side next_side = s + 1 < SLOTS ? side_at(side_of, ITEMS + s + 1) : Side{};
                const Slot held = slot(s);
                copy_slot(s, exists && col < frame_.body(to.row), to.row, frame_.head(to.row) + col);
                if (col < body()) f(col, held, side);
                side = next_side;
            }
            cp_async_commit();
            refill<G + 1>(to, side_of, f, side);
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const long long col = at_.column(i);
                if (col < body()) f(col, held_[i], side_of(col));
                held_[i] = load_or_zero(exists && col < frame_.body(to.row), to.row, frame_.head(to.row) + col);
            }
        }
    }

    // side_of at item i's column of the current row, or a default past the row.
    template <class S>
    __device__ __forceinline__ auto side_at(S& side_of, int i) const {
        const long long col = at_.column(i);
        return col < body() ? side_of(col) : decltype(side_of(col)){};
    }

    Layout at_;
    Slot held_[ITEMS > 0 ? ITEMS : 1];
    Slot* slots_;  // this thread's first slot
    const T* x_;
    long long stride_, rows_;
    Frame frame_;
    Edges edges_;  // the current row's edges
};

}  // namespace tileops
