// The argument block of the quantize kernels. Plain C++: the host code that fills it
// (src/ops/quantize/quantize.cpp) includes this same header, so the layout exists once.
#pragma once

namespace tileops {

// Columns that share a scale in block_1x128 scaling.
constexpr int kQuantizeBlockCols = 128;

struct QuantizeArgs {
    const void* x;          // [rows, cols], x_stride
    void* q;                // e4m3 codes, [rows, cols], q_stride
    float* scales;          // the scales the op computes; null with a static per-tensor scale
    const float* scale_in;  // per-tensor static: the caller's scale; null otherwise
    // Per-tensor computed: {amax as its bits, CTAs done}, zero between launches; null otherwise.
    unsigned* workspace;
    // The per-tensor kernels see contiguous rows as one row of rows x cols elements.
    long long rows, cols;
    long long x_stride, q_stride;  // elements between rows
    long long scale_stride;        // block_1x128: elements between the scales of consecutive column blocks
    int tile_log2;                 // block_1x128: log2 of the lane teams a CTA spreads along a row
    int unused;
};

static_assert(sizeof(QuantizeArgs) == 5 * 8 + 5 * 8 + 2 * 4, "QuantizeArgs: the kernels' parameter block changed size");

}  // namespace tileops
