// The router's top-k: a team of LANES lanes a token (TOKENS_PER_BLOCK tokens a block), each lane
// holding the logits of experts lane, lane + LANES, ... (ITEMS of them) in registers. Everything
// is reduced with shuffles inside the team: the softmax's maximum and sum, the groups' top-2 sums,
// and k rounds of an arg-max over 64-bit keys (the ordered bits of the choosing score above the
// complement of the expert index, so that equal scores go to the lower index), each round
// removing its winner. Lane j keeps the j-th winner (LANES >= k), so the weights are normalized
// with one more reduction and stored by lanes 0..k-1 together.
//
// Teams past the last token run on its row (their shuffles must happen) and store nothing.
#pragma once

#include "common/infinity.cuh"
#include "common/types.cuh"
#include "moe_routing/moe_routing_args.cuh"

namespace tileops {
namespace moe_detail {

// The float's bits as an unsigned integer of the same order (-0 as +0; NaN as -inf), never 0:
// 0 is the key of an expert that cannot be chosen.
__device__ __forceinline__ unsigned ordered_bits(float f) {
    if (f != f) f = kNegativeInfinity;
    const unsigned bits = __float_as_uint(f + 0.0f);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ unsigned long long choice_key(float score, int expert) {
    return (static_cast<unsigned long long>(ordered_bits(score)) << 32) | (0xffffffffu - static_cast<unsigned>(expert));
}

__device__ __forceinline__ int key_expert(unsigned long long key) {
    return static_cast<int>(0xffffffffu - static_cast<unsigned>(key & 0xffffffffu));
}

template <int LANES>
__device__ __forceinline__ unsigned long long team_max(unsigned long long v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, offset, LANES);
        v = other > v ? other : v;
    }
    return v;
}

template <int LANES>
__device__ __forceinline__ float team_max(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset, LANES));
    return v;
}

template <int LANES>
__device__ __forceinline__ float team_sum(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset, LANES);
    return v;
}

// The two largest of the team's (first, second) pairs.
template <int LANES>
__device__ __forceinline__ void team_top2(float& first, float& second) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) {
        const float o1 = __shfl_xor_sync(0xffffffffu, first, offset, LANES);
        const float o2 = __shfl_xor_sync(0xffffffffu, second, offset, LANES);
        second = fmaxf(fminf(first, o1), fmaxf(second, o2));
        first = fmaxf(first, o1);
    }
}

// 1 / (1 + e^-x), the reciprocal rounded as the IEEE division would round it.
__device__ __forceinline__ float sigmoid_of(float x) { return __frcp_rn(1.0f + expf(-x)); }

}  // namespace moe_detail

template <typename T, int LANES, int TOKENS_PER_BLOCK, int ITEMS, bool SIGMOID, bool GROUPED, bool BIAS>
__global__ void __launch_bounds__(LANES* TOKENS_PER_BLOCK, 1) moe_topk_kernel(MoeTopKArgs args) {
    using namespace moe_detail;
    static_assert(LANES >= 4 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "a power-of-two team within a warp");
    static_assert((LANES * TOKENS_PER_BLOCK) % 32 == 0, "whole warps");
    static_assert(ITEMS >= 1 && ITEMS <= 32, "a lane's experts fit a 32-bit mask");
    static_assert(!BIAS || SIGMOID, "the correction bias goes with sigmoid scores");
    constexpr float kNegInf = kNegativeInfinity;

    const int lane = static_cast<int>(threadIdx.x) % LANES;
    const long long token = static_cast<long long>(blockIdx.x) * TOKENS_PER_BLOCK + threadIdx.x / LANES;
    const bool live = token < args.tokens;
    const long long row = live ? token : args.tokens - 1;
    const T* __restrict__ logits = static_cast<const T*>(args.logits) + row * args.logits_stride;
    const int experts = args.experts;

    // This lane's experts: lane + LANES x i, those below `experts` valid.
    float x[ITEMS];
    unsigned valid = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int e = lane + LANES * i;
        x[i] = kNegInf;
        if (e < experts) {
            x[i] = to_float(logits[e]);
            valid |= 1u << i;
        }
    }

    // Softmax: the row's maximum and the sum of exp(x - max).
    float row_max = 0.0f, row_sum = 1.0f;
    if (!SIGMOID) {
        float m = kNegInf;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) m = fmaxf(m, x[i]);
        row_max = team_max<LANES>(m);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (valid & (1u << i)) s += expf(x[i] - row_max);
        row_sum = team_sum<LANES>(s);
    }

    // What experts are chosen by: the logit (in the order of its score, either scoring), or the
    // sigmoid score plus the correction bias.
    float choice[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        choice[i] = x[i];
        if (BIAS && (valid & (1u << i))) choice[i] = sigmoid_of(x[i]) + args.bias[lane + LANES * i];
    }

    unsigned eligible = valid;
    if (GROUPED) {
        // Group g scores the sum of its two best scores (+ bias); lane g holds it (LANES >= n_group).
        int group_of[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) group_of[i] = (lane + LANES * i) / args.group_size;
        float group_score = kNegInf;
        for (int g = 0; g < args.n_group; ++g) {
            float first = kNegInf, second = kNegInf;
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                if ((valid & (1u << i)) && group_of[i] == g) {
                    const float s = BIAS ? choice[i] : SIGMOID ? sigmoid_of(x[i]) : expf(x[i] - row_max) / row_sum;
                    if (s > first) {
                        second = first;
                        first = s;
                    } else if (s > second) {
                        second = s;
                    }
                }
            }
            team_top2<LANES>(first, second);
            if (lane == g) group_score = first + second;
        }
        unsigned long long group_key = lane < args.n_group ? choice_key(group_score, lane) : 0ull;
        unsigned kept = 0;
        for (int r = 0; r < args.topk_group; ++r) {
            const unsigned long long best = team_max<LANES>(group_key);
            const int g = key_expert(best);
            kept |= 1u << g;
            if (lane == g) group_key = 0ull;
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (group_of[i] >= 32 || !((kept >> group_of[i]) & 1u)) eligible &= ~(1u << i);
    }

    // k rounds of the arg-max; lane r keeps round r's expert and its score.
    int my_id = 0;
    float my_score = 0.0f;
    for (int r = 0; r < args.k; ++r) {
        unsigned long long best = 0ull;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (eligible & (1u << i)) {
                const unsigned long long key = choice_key(choice[i], lane + LANES * i);
                best = key > best ? key : best;
            }
        best = team_max<LANES>(best);
        const int winner = key_expert(best);
        const int owner = winner % LANES;
        float winner_x = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (lane + LANES * i == winner) {
                winner_x = x[i];
                eligible &= ~(1u << i);
            }
        winner_x = __shfl_sync(0xffffffffu, winner_x, owner, LANES);
        if (lane == r) {
            my_id = winner;
            my_score = SIGMOID ? sigmoid_of(winner_x) : expf(winner_x - row_max);
        }
    }

    // The denominator: the chosen scores' sum, or the softmax's (1 for sigmoid scores).
    const float chosen = team_sum<LANES>(lane < args.k ? my_score : 0.0f);
    const float denominator = args.renormalize ? chosen + 1e-20f : row_sum;
    if (live && lane < args.k) {
        const long long at = token * args.k + lane;
        args.weights[at] = my_score / denominator * args.scaling;
        args.ids[at] = my_id;
    }
}

}  // namespace tileops
