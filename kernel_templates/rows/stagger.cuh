// Staggered starts for persistent row kernels whose CTAs each hold one long row (or row group) at
// a time (the resident kernels, rows/resident_row.cuh).
//
// Why: such CTAs all start together and do the same work, so they finish loading their rows and
// reduce them at the same moments, when none of them has a load in flight, and the memory system
// idles at every row step. Starting the CTAs of a grid at a few different moments spreads those
// lulls over time, so that the CTAs still streaming take the bandwidth the reducing ones leave.
// Measured on an H100 (docs/perf/rows.md): bf16 256 x 262144 softmax 112.9 -> 102.8 us with
// four start times a third of a row step apart in all.
#pragma once

namespace tileops {

// Start times: kStaggerPhases of them, kStaggerPercent of a row step apart.
constexpr int kStaggerPhases = 4;
constexpr int kStaggerPercent = 11;

// Delays the calling CTA by (group mod kStaggerPhases) x kStaggerPercent % of a row step, for a
// CTA that moves STEP_BYTES in and as many out at each step. A step's time is estimated from one
// SM's share of the H100's memory bandwidth (3 TB/s over 132 SMs at 1.98 GHz: 11.6 bytes a cycle),
// a spacing that only needs to be about right. Every thread of the CTA (and of its cluster, which
// shares `group`) calls it, so the CTA's warps stay together.
template <long long STEP_BYTES>
__device__ __forceinline__ void stagger_start(long long group) {
    constexpr long long kStepCycles = 2 * STEP_BYTES * 10 / 116;
    constexpr long long kPhaseCycles = kStepCycles * kStaggerPercent / 100;
    const long long wait = (group % kStaggerPhases) * kPhaseCycles;
    const long long start = clock64();
    while (clock64() - start < wait) {
    }
}

}  // namespace tileops
