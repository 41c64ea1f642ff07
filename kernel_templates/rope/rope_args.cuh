// The argument block of the RoPE kernel. Plain C++: the host code that fills it
// (src/ops/rope/rope.cpp) includes this same header, so the layout exists once.
#pragma once

namespace tileops {

// Frequencies a kernel can rotate with: rotary_dim / 2 for head_dim up to 512.
constexpr int kRopeMaxFrequencies = 256;

struct RopeArgs {
    const void* q;
    const void* k;
    const void* v;          // null without the append
    const int* positions;
    const int* slots;       // null without the append
    void* q_out;
    void* k_out;
    void* k_cache;          // null without the append
    void* v_cache;
    long long num_tokens;
    // Elements between tokens of each operand.
    long long q_stride, k_stride, v_stride, q_out_stride, k_out_stride;
    // The cache's strides in elements.
    long long cache_page_stride, cache_token_stride, cache_head_stride;
    int page_size;
    int num_slots;          // num_pages x page_size: slots at or above it are not appended
    float k_scale_inv;      // fp8 cache: an element is stored as value x (1 / scale); 1 otherwise
    float v_scale_inv;
    float inv_freq[kRopeMaxFrequencies];
};

static_assert(sizeof(RopeArgs) == 9 * 8 + 9 * 8 + 4 * 4 + kRopeMaxFrequencies * 4,
              "RopeArgs: the kernel's parameter block changed size");

}  // namespace tileops
