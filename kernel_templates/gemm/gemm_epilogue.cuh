// The GEMM epilogue arithmetic shared by every GEMM kernel: act(alpha * acc + beta * c + bias).
#pragma once

#include "common/math.cuh"
#include "common/types.cuh"
#include "gemm/gemm_args.cuh"

namespace tileops {

// ACT: 0 none, 1 GELU (erf form), 2 SiLU.
template <int ACT>
__device__ __forceinline__ float gemm_activation(float x) {
    if constexpr (ACT == 1) {
        return 0.5f * x * erfc_approx(-x * 0.70710678118654752f);
    } else if constexpr (ACT == 2) {
        return x * sigmoid(x);
    } else {
        return x;
    }
}

// Which tile (tile_m, tile_n) the linear tile index `id` is: tiles go down columns of GROUP_M
// tile rows, then move right, so the blocks running at once share A rows and B columns in L2.
template <int GROUP_M>
__device__ __forceinline__ void grouped_tile(long long id, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
    const long long group_size = static_cast<long long>(GROUP_M) * tiles_n;
    const int first_m = static_cast<int>(id / group_size) * GROUP_M;
    const int rows = min(tiles_m - first_m, GROUP_M);
    const int in_group = static_cast<int>(id % group_size);
    tile_m = first_m + in_group % rows;
    tile_n = in_group / rows;
}

// act(alpha * v + beta * C + bias) for D[row, col] and D[row, col + 1] in place; the second only
// where col + 1 is inside N (C and bias are not read past it).
template <typename T, typename TOut, bool HAS_C, bool BIAS, int ACT>
__device__ __forceinline__ void gemm_epilogue_pair(const GemmArgs& p, const TOut* c_row, long long col, float (&v)[2]) {
    const bool both = col + 1 < p.n;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        if (j == 1 && !both) break;
        v[j] *= p.alpha;
        if constexpr (BIAS) v[j] += to_float(static_cast<const T*>(p.bias)[col + j]);
        if constexpr (HAS_C) v[j] += p.beta * to_float(c_row[col + j]);
        v[j] = gemm_activation<ACT>(v[j]);
    }
}

// Writes D[row, col] and D[row, col + 1] (those that are inside N) from two accumulators.
template <typename T, typename TOut, bool HAS_C, bool BIAS, int ACT>
__device__ __forceinline__ void gemm_store_pair(const GemmArgs& p, TOut* d_row, const TOut* c_row, long long col,
                                                float v0, float v1) {
    float v[2] = {v0, v1};
    gemm_epilogue_pair<T, TOut, HAS_C, BIAS, ACT>(p, c_row, col, v);
    const bool both = col + 1 < p.n;
    TOut* out = d_row + col;
    if (both && (reinterpret_cast<unsigned long long>(out) % (2 * sizeof(TOut))) == 0) {
        Vec<TOut, 2> pair;
        pair.v[0] = from_float<TOut>(v[0]);
        pair.v[1] = from_float<TOut>(v[1]);
        store_raw<TOut, 2>(out, pair);
    } else {
        out[0] = from_float<TOut>(v[0]);
        if (both) out[1] = from_float<TOut>(v[1]);
    }
}

}  // namespace tileops
