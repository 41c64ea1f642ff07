// MoE permute: x's rows gathered in expert order, in two kernels and no host sync.
//
// moe_permute_route_kernel (launched first): the entries of topk_ids, read as one flat array of
// tokens x k, are split into `groups` runs of group_entries; a CTA a run. It takes its run in
// rounds of kMoeRouteThreads entries, an entry a thread, and ranks each entry among the earlier
// entries of its run with the same expert (stable): inside a warp by __match_any_sync, across the
// warps of a round by a scan of the warps' per-expert counts in shared memory, across rounds by a
// running count per expert. The rank goes to row_map (a scratch use: the gather kernel turns it
// into the row), the run's counts to the workspace. The last CTA to finish (a counter in the
// workspace, reset by it) replaces every run's count by the run's start within its expert (a
// prefix over the runs) and writes expert_offsets (a prefix over the experts' totals) or, masked,
// expert_counts (each total capped at the capacity).
//
// moe_permute_gather_kernel: a team of THREADS_PER_ROW threads a token (ROWS_PER_BLOCK tokens a
// block) finds the rows of the token's k entries (offset of the expert + start of the run + rank),
// writes them to row_map, and copies the token's row of x to each of them: x is read once, each
// permuted row written once. Elements are copied as raw bits (U: 16-bit or 8-bit unsigned). The
// scales of fp8 rows (scale_blocks a row, stored block-major as Quantize writes them and
// GemmFp8's block scaling reads them) go along with their rows.
//
// Ids outside [0, experts) are ranked nowhere, counted nowhere and get row_map -1; so do masked
// entries past their expert's capacity.
#pragma once

#include "common/types.cuh"
#include "moe_routing/moe_routing_args.cuh"

namespace tileops {

template <int MAX_EXPERTS>
__global__ void __launch_bounds__(kMoeRouteThreads) moe_permute_route_kernel(MoePermuteArgs args) {
    constexpr int kThreads = kMoeRouteThreads;
    constexpr int kWarps = kThreads / 32;
    static_assert(MAX_EXPERTS >= 32 && MAX_EXPERTS <= kMoeRouteMaxExperts && (MAX_EXPERTS & (MAX_EXPERTS - 1)) == 0,
                  "a power of two of experts, whole slices of the block");
    __shared__ int warp_count[kWarps][MAX_EXPERTS];  // a round's entries per warp and expert
    __shared__ int warp_start[kWarps][MAX_EXPERTS];  // where each warp's entries of an expert start
    __shared__ int running[MAX_EXPERTS];             // the run's entries per expert so far
    __shared__ int warp_total[kWarps];
    __shared__ bool last;

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int experts = args.experts;
    for (int e = tid; e < MAX_EXPERTS; e += kThreads) {
        running[e] = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) warp_count[w][e] = 0;
    }
    __syncthreads();

    const long long entries = args.tokens * args.k;
    const long long begin = static_cast<long long>(blockIdx.x) * args.group_entries;
    const long long end = begin + args.group_entries < entries ? begin + args.group_entries : entries;
    const unsigned below = (1u << lane) - 1u;
    for (long long base = begin; base < end; base += kThreads) {
        const long long i = base + tid;
        int e = -1;
        if (i < end) {
            const int id = args.ids[i];
            if (id >= 0 && id < experts) e = id;
        }
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        const bool leader = (peers & below) == 0;
        if (e >= 0 && leader) warp_count[warp][e] = __popc(peers);
        __syncthreads();
        for (int x = tid; x < experts; x += kThreads) {
            int start = running[x];
#pragma unroll
            for (int w = 0; w < kWarps; ++w) {
                warp_start[w][x] = start;
                start += warp_count[w][x];
            }
            running[x] = start;
        }
        __syncthreads();
        if (i < end) args.row_map[i] = e >= 0 ? warp_start[warp][e] + __popc(peers & below) : -1;
        if (e >= 0 && leader) warp_count[warp][e] = 0;  // the only entry of the warp's that was set
        __syncwarp();
    }

    // This run's counts, then the counter: the last CTA sees every run's.
    int* const counts = args.workspace + kMoeWorkspaceHeader;
    int* const run_counts = counts + static_cast<long long>(blockIdx.x) * experts;
    for (int x = tid; x < experts; x += kThreads) run_counts[x] = running[x];
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(reinterpret_cast<unsigned*>(args.workspace), 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();

    // Each run's start within its expert; the experts' totals.
    for (int x = tid; x < experts; x += kThreads) {
        int total = 0;
        for (int g = 0; g < args.groups; ++g) {
            int* const at = counts + static_cast<long long>(g) * experts + x;
            const int c = __ldcg(at);
            *at = total;
            total += c;
        }
        running[x] = total;
    }
    __syncthreads();

    if (args.capacity > 0) {
        for (int x = tid; x < experts; x += kThreads)
            args.expert_info[x] = running[x] < args.capacity ? running[x] : args.capacity;
    } else {
        // Exclusive prefix over the experts: each thread a slice of consecutive experts.
        constexpr int kSlice = MAX_EXPERTS > kThreads ? MAX_EXPERTS / kThreads : 1;
        const int first = tid * kSlice;
        int sum = 0;
#pragma unroll
        for (int s = 0; s < kSlice; ++s)
            if (first + s < experts) sum += running[first + s];
        int inclusive = sum;
#pragma unroll
        for (int offset = 1; offset < 32; offset *= 2) {
            const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (lane >= offset) inclusive += other;
        }
        if (lane == 31) warp_total[warp] = inclusive;
        __syncthreads();
        int offset = inclusive - sum;
        for (int w = 0; w < warp; ++w) offset += warp_total[w];
#pragma unroll
        for (int s = 0; s < kSlice; ++s)
            if (first + s < experts) {
                args.expert_info[first + s] = offset;
                offset += running[first + s];
            }
        if (first < experts && first + kSlice >= experts) args.expert_info[experts] = offset;
    }
    if (tid == 0) atomicExch(reinterpret_cast<unsigned*>(args.workspace), 0u);
}

template <typename U, int VEC, int THREADS_PER_ROW, int ROWS_PER_BLOCK, int ITEMS>
__global__ void __launch_bounds__(THREADS_PER_ROW* ROWS_PER_BLOCK, 1) moe_permute_gather_kernel(MoePermuteArgs args) {
    static_assert((THREADS_PER_ROW * ROWS_PER_BLOCK) % 32 == 0, "whole warps");
    constexpr int kStep = THREADS_PER_ROW * VEC;  // elements between a thread's vectors
    constexpr long long kChunk = static_cast<long long>(kStep) * ITEMS;
    __shared__ long long dest[ROWS_PER_BLOCK][kMoeMaxTopK];

    const int lane = static_cast<int>(threadIdx.x) % THREADS_PER_ROW;
    const int slot = static_cast<int>(threadIdx.x) / THREADS_PER_ROW;
    const long long token = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + slot;
    const bool live = token < args.tokens;
    const int k = args.k, experts = args.experts;
    const int* const run_start = args.workspace + kMoeWorkspaceHeader;

    if (live)
        for (int j = lane; j < k; j += THREADS_PER_ROW) {
            const long long i = token * k + j;
            const int id = args.ids[i];
            const int rank = args.row_map[i];
            long long row = -1;
            if (id >= 0 && id < experts && rank >= 0) {
                const long long group = i / args.group_entries;
                const int r = run_start[group * experts + id] + rank;
                if (args.capacity == 0)
                    row = args.expert_info[id] + r;
                else if (r < args.capacity)
                    row = static_cast<long long>(id) * args.capacity + r;
            }
            args.row_map[i] = static_cast<int>(row);
            dest[slot][j] = row;
        }
    __syncthreads();
    if (!live) return;

    if (args.scale_blocks > 0)
        for (int j = 0; j < k; ++j) {
            const long long row = dest[slot][j];
            if (row < 0) continue;
            for (int b = lane; b < args.scale_blocks; b += THREADS_PER_ROW)
                args.out_scales[b * args.out_rows + row] = args.scales[b * args.scales_stride + token];
        }

    const U* __restrict__ x = static_cast<const U*>(args.x) + token * args.x_stride + lane * VEC;
    U* __restrict__ out = static_cast<U*>(args.out) + lane * VEC;
    const long long left = args.hidden - static_cast<long long>(lane) * VEC;
    for (long long base = 0; base < args.hidden; base += kChunk) {
        Vec<U, VEC> v[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (base + i * kStep < left) v[i] = load_raw<U, VEC>(x + base + i * kStep);
        for (int j = 0; j < k; ++j) {
            const long long row = dest[slot][j];
            if (row < 0) continue;
            U* const to = out + row * args.out_stride + base;
#pragma unroll
            for (int i = 0; i < ITEMS; ++i)
                if (base + i * kStep < left) store_raw<U, VEC>(to + i * kStep, v[i]);
        }
    }
}

}  // namespace tileops
