// The argument blocks of the MoE routing kernels. Plain C++: the host code that fills them
// (src/ops/moe_routing/) includes this same header, so the layouts exist once.
#pragma once

namespace tileops {

// The permute's routing kernel: its block size, the most groups of entries it splits the work
// into (its last CTA scans groups x experts counts), and the most experts its shared memory holds.
constexpr int kMoeRouteThreads = 256;
constexpr int kMoeRouteMaxGroups = 128;
constexpr int kMoeRouteMaxExperts = 512;
constexpr int kMoeMaxTopK = 32;  // k: a lane a chosen expert in the top-k, a slot in the permute
// Ints of the permute's workspace before the per-group counts: the CTA counter (and padding).
constexpr int kMoeWorkspaceHeader = 32;

struct MoeTopKArgs {
    const void* logits;     // [tokens, experts], logits_stride
    const float* bias;      // [experts] or null
    float* weights;         // [tokens, k]
    int* ids;               // [tokens, k]
    long long tokens;
    long long logits_stride;
    int experts, k;
    int n_group, topk_group;
    int group_size;         // experts / n_group (grouped kernels)
    int renormalize;        // 0 or 1
    float scaling;          // routed_scaling_factor
    int unused;
};

static_assert(sizeof(MoeTopKArgs) == 4 * 8 + 2 * 8 + 8 * 4, "MoeTopKArgs: the kernels' parameter block changed size");

struct MoePermuteArgs {
    const void* x;          // [tokens, hidden], x_stride
    const int* ids;         // [tokens, k]
    void* out;              // x_perm [tokens * k, hidden] or x_masked [experts * capacity, hidden], out_stride
    int* expert_info;       // contiguous: offsets [experts + 1]; masked: counts [experts]
    int* row_map;           // [tokens, k]
    int* workspace;         // kMoeWorkspaceHeader ints, then counts [groups][experts]
    const float* scales;    // x's scales [scale_blocks, tokens] (a token's adjacent), or null
    float* out_scales;      // the permuted rows' scales [scale_blocks, out_rows], or null
    long long tokens, hidden;
    long long x_stride, out_stride;  // elements
    long long out_rows;     // tokens * k (contiguous) or experts * capacity (masked)
    long long scales_stride;  // elements between x's scale blocks
    int experts, k;
    int capacity;           // masked: rows an expert holds; 0: contiguous
    int group_entries;      // entries (of tokens x k) a routing CTA takes: a multiple of kMoeRouteThreads
    int groups;             // routing CTAs
    int scale_blocks;       // scales a row of x: 0 (none), 1 (per token) or one per 128 elements
};

static_assert(sizeof(MoePermuteArgs) == 8 * 8 + 6 * 8 + 6 * 4, "MoePermuteArgs: the kernels' parameter block changed size");

struct MoeUnpermuteArgs {
    const void* y;          // [y_rows, hidden], y_stride
    const int* row_map;     // [tokens, k]
    const float* weights;   // [tokens, k]
    void* out;              // [tokens, hidden], out_stride
    long long tokens, hidden, y_rows;
    long long y_stride, out_stride;
    int k;
    int unused;
};

static_assert(sizeof(MoeUnpermuteArgs) == 4 * 8 + 5 * 8 + 2 * 4, "MoeUnpermuteArgs: the kernels' parameter block changed size");

}  // namespace tileops
