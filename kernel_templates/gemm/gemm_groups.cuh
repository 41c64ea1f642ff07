// Which output tile a GEMM block computes: the tiles of a batched GEMM, or those of a grouped one
// (mixture-of-experts layers: one problem per expert, the experts' rows of A one after another).
//
// GROUPS (a kernel template parameter; gemm_args.cuh): kGemmBatched: tiles walk the batch entries one after another.
// kGemmGroupsContiguous / kGemmGroupsMasked: A and D are one flat matrix of p.m rows whose groups
// are row ranges given on the device (GemmArgs::group_rows), and group g multiplies its rows by
// B's batch entry g. Since the host does not know the row counts, every block first turns them
// into a table in shared memory: table[g] = the first unit of group g, table[groups] = all units.
// A unit is UNIT_TILES vertically adjacent tiles of one group (a block pair's tiles) x one tile
// column; a block finds its unit's group by binary search in the table.
//
// Hostile row ranges stay in bounds: offsets are clamped to [0, m] and an end before its begin
// empties the group; counts to [0, capacity]. Offsets that are not non-decreasing make groups
// overlap: their rows of D are then written twice (unspecified values), never out of bounds.
#pragma once

#include "gemm/gemm_args.cuh"
#include "gemm/gemm_epilogue.cuh"

namespace tileops {

// One tile of work: the rows of A and D it covers and the batch entries its operands come from.
struct GemmTile {
    int ad_batch;        // batch entry of A, C and D (0 for groups: one flat matrix)
    int b_batch;         // batch entry of B (a group's)
    long long row0;      // the tile's first row of A and D
    long long row_end;   // rows from here on are not this tile's to store (M, or the group's end)
    int tile_n;          // the tile's column of tiles
};

// Rows [begin, end) of group g (clamped into the matrix, see above).
template <int GROUPS>
__device__ __forceinline__ void gemm_group_rows(const GemmArgs& p, int g, long long& begin, long long& end) {
    if constexpr (GROUPS == kGemmGroupsMasked) {
        begin = static_cast<long long>(g) * p.group_capacity;
        const long long count = p.group_rows[g];
        end = begin + (count < 0 ? 0 : count > p.group_capacity ? p.group_capacity : count);
    } else {
        const long long from = p.group_rows[g], to = p.group_rows[g + 1];
        begin = from < 0 ? 0 : from > p.m ? p.m : from;
        end = to < begin ? begin : to > p.m ? p.m : to;
    }
}

template <int BM, int UNIT_TILES, int GROUP_M, int GROUPS>
struct GemmSchedule {
    int tiles_n = 0;
    // Batched: units per batch entry and their rows of units.
    int units_m = 0;
    long long units_per_batch = 0;
    long long units = 0;  // of the whole launch
    const int* table = nullptr;  // grouped: in shared memory

    // Units of group g: its row tiles in units of UNIT_TILES, times the tile columns.
    __device__ __forceinline__ int group_units(const GemmArgs& p, int g) const {
        long long begin, end;
        gemm_group_rows<GROUPS>(p, g, begin, end);
        const long long tiles_m = (end - begin + BM - 1) / BM;
        return static_cast<int>((tiles_m + UNIT_TILES - 1) / UNIT_TILES) * tiles_n;
    }

    // Every thread of the block calls this; for groups, the first warp fills `shared_table` and the
    // caller synchronizes the block before calling finish() and using the schedule.
    __device__ void start(const GemmArgs& p, int block_n, int* shared_table) {
        tiles_n = static_cast<int>((p.n + block_n - 1) / block_n);
        if constexpr (GROUPS == kGemmBatched) {
            const int tiles_m = static_cast<int>((p.m + BM - 1) / BM);
            units_m = (tiles_m + UNIT_TILES - 1) / UNIT_TILES;
            units_per_batch = static_cast<long long>(units_m) * tiles_n;
            units = units_per_batch * p.batch;
        } else {
            table = shared_table;
            if (threadIdx.x >= 32) return;
            // Each lane sums a run of consecutive groups, the warp scans the sums, each lane writes
            // its run's starts.
            const int lane = static_cast<int>(threadIdx.x);
            const int per_lane = (p.groups + 31) / 32;
            const int first = lane * per_lane, last = min(first + per_lane, p.groups);
            int sum = 0;
            for (int g = first; g < last; ++g) sum += group_units(p, g);
            int inclusive = sum;
#pragma unroll
            for (int offset = 1; offset < 32; offset *= 2) {
                const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
                if (lane >= offset) inclusive += other;
            }
            int start = inclusive - sum;
            for (int g = first; g < last; ++g) {
                shared_table[g] = start;
                start += group_units(p, g);
            }
            if (lane == 31) shared_table[p.groups] = inclusive;
        }
    }

    // After the block has synchronized.
    __device__ __forceinline__ void finish(const GemmArgs& p) {
        if constexpr (GROUPS != kGemmBatched) units = table[p.groups];
    }

    // The tile of `unit` (< units) that block `rank` of a UNIT_TILES-block cluster computes.
    __device__ __forceinline__ GemmTile tile(const GemmArgs& p, long long unit, int rank) const {
        GemmTile t;
        int unit_m;
        if constexpr (GROUPS == kGemmBatched) {
            const long long batch = unit / units_per_batch;
            grouped_tile<GROUP_M>(unit % units_per_batch, units_m, tiles_n, unit_m, t.tile_n);
            t.ad_batch = t.b_batch = static_cast<int>(batch);
            t.row0 = static_cast<long long>(unit_m * UNIT_TILES + rank) * BM;
            t.row_end = p.m;
        } else {
            // The last group whose first unit is at or before `unit` (empty groups share their
            // start with the next one).
            int lo = 0, hi = p.groups - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (table[mid] <= unit) lo = mid; else hi = mid - 1;
            }
            long long begin;
            gemm_group_rows<GROUPS>(p, lo, begin, t.row_end);
            const int group_units_m = (table[lo + 1] - table[lo]) / tiles_n;
            grouped_tile<GROUP_M>(unit - table[lo], group_units_m, tiles_n, unit_m, t.tile_n);
            t.ad_batch = 0;
            t.b_batch = lo;
            t.row0 = begin + static_cast<long long>(unit_m * UNIT_TILES + rank) * BM;
        }
        return t;
    }
};

}  // namespace tileops
