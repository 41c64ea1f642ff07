// The argument block of the sampling kernel. Plain C++: the host code that fills it
// (src/ops/sampling/sampling.cpp) includes this same header, so the layout exists once.
#pragma once

namespace tileops {

struct SamplingArgs {
    const void* logits;        // [batch, vocab], rows `stride` elements apart
    long long stride;
    long long vocab;
    long long batch;
    // Per row, on the device (null for a greedy-only op).
    const float* temperature;
    const int* top_k;
    const float* top_p;
    const float* min_p;
    const int* offsets;        // the row's position in its random stream
    int* tokens;               // [batch] int32
    unsigned long long seed;
};

static_assert(sizeof(SamplingArgs) == 4 * 8 + 6 * 8 + 8, "SamplingArgs: the kernel's parameter block changed size");

}  // namespace tileops
