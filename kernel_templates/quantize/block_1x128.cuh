// 1x128-block quantization: one scale per row and 128-column block, stored block-major
// (scales[block * scale_stride + row]).
//
// A team of LANES consecutive lanes (a power of two <= 32, so a team never spans warps) takes one
// block of a row: each lane holds 128 / LANES of its elements, as vectors of VEC interleaved
// across the team (lane l's vector j starts at column 128 b + (j LANES + l) VEC), so a team reads
// its block as contiguous segments. The team's amax is a few shuffles; nothing goes through shared
// memory. Each team takes ITEMS blocks of its row at once (loads of all of them in flight before
// the first reduction).
//
// A CTA's THREADS / LANES teams cover a tile of 2^tile_log2 teams along a row times the rest
// along the rows; the host sizes the tile so that short rows still fill the CTA, and the grid is
// (column tiles, row tiles), walked in steps of gridDim.y along the rows. The host picks VEC so
// that it divides cols and both row strides and both pointers are aligned to a vector.
#pragma once

#include "quantize/e4m3.cuh"
#include "quantize/quantize_args.cuh"

namespace tileops {

template <typename T, int VEC, int THREADS, int LANES, int ITEMS>
__global__ void __launch_bounds__(THREADS, 1) quantize_block_1x128_kernel(QuantizeArgs args) {
    using namespace quantize_detail;
    static_assert((LANES & (LANES - 1)) == 0 && LANES <= 32 && THREADS % 32 == 0, "teams within warps");
    constexpr int kTeams = THREADS / LANES;
    constexpr int kPerLane = kQuantizeBlockCols / LANES;  // elements of a block each lane holds
    constexpr int kVectors = kPerLane / VEC;
    static_assert(kVectors >= 1 && kVectors * VEC == kPerLane, "a lane holds whole vectors of its block");

    const T* __restrict__ x = static_cast<const T*>(args.x);
    __nv_fp8_e4m3* __restrict__ q = static_cast<__nv_fp8_e4m3*>(args.q);
    const long long rows = args.rows, cols = args.cols;
    const long long blocks = (cols + kQuantizeBlockCols - 1) / kQuantizeBlockCols;
    const int team = static_cast<int>(threadIdx.x) / LANES;
    const int lane = static_cast<int>(threadIdx.x) % LANES;
    const int tile_x = 1 << args.tile_log2;
    const int tile_y = kTeams >> args.tile_log2;
    const int team_x = team & (tile_x - 1);
    const int team_y = team >> args.tile_log2;
    // This team's first block of the row; its others follow tile_x blocks apart.
    const long long block0 = static_cast<long long>(blockIdx.x) * tile_x * ITEMS + team_x;

    // Every lane of a warp runs the same iterations (the shuffles below).
    for (long long first = static_cast<long long>(blockIdx.y) * tile_y; first < rows;
         first += static_cast<long long>(gridDim.y) * tile_y) {
        const long long row = first + team_y;
        const bool live = row < rows;
        // This lane's first column of the team's first block; a vector `offset` columns further is
        // inside the row while the offset is below `left` (none of a row past the end).
        const long long first_col = block0 * kQuantizeBlockCols + lane * VEC;
        const T* x_lane = x + (live ? row * args.x_stride : 0) + first_col;
        __nv_fp8_e4m3* q_lane = q + (live ? row * args.q_stride : 0) + first_col;
        const long long left = live ? cols - first_col : 0;

        Vec<T, VEC> held[ITEMS][kVectors];
        float amax[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            amax[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < kVectors; ++j) {
                const long long offset = static_cast<long long>(i) * tile_x * kQuantizeBlockCols + j * LANES * VEC;
                if (offset < left) {
                    held[i][j] = load_raw<T, VEC>(x_lane + offset);
                    amax[i] = abs_max(held[i][j], amax[i]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const long long block = block0 + static_cast<long long>(i) * tile_x;
            const float scale = scale_of(lanes_max<LANES>(amax[i]));
            const float inv = inverse_of(scale);
            if (!live || block >= blocks) continue;
            if (lane == 0) args.scales[block * args.scale_stride + row] = scale;
#pragma unroll
            for (int j = 0; j < kVectors; ++j) {
                const long long offset = static_cast<long long>(i) * tile_x * kQuantizeBlockCols + j * LANES * VEC;
                if (offset < left) store_e4m3<T, VEC>(q_lane + offset, held[i][j], inv);
            }
        }
    }
}

}  // namespace tileops
