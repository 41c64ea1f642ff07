// Transcendental helpers for the activations: accurate to fp32 rounding on the ranges that matter
// (relative error ~1e-6) but much cheaper than the libm versions, so that bf16/fp16 elementwise
// ops (8 elements per 16-byte access) stay bound by memory, not by arithmetic.
#pragma once

namespace tileops {

// e^x through the hardware exp2 (ex2.approx): 2 instructions.
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }

// 1 / x through the hardware reciprocal (rcp.approx, 1 ulp): the IEEE-rounded __frcp_rn is a
// multi-instruction sequence that made bf16 activations arithmetic-bound. 1 / inf is 0.
__device__ __forceinline__ float fast_reciprocal(float x) { return __fdividef(1.0f, x); }

// 1 / (1 + e^-x), written so that large |x| gives 0 or 1, never NaN.
__device__ __forceinline__ float sigmoid(float x) { return fast_reciprocal(1.0f + fast_exp(-x)); }

// erfc(z) from a Chebyshev-fitted exponent: erfc(|z|) = t exp(-z^2 + P(t)), t = 1 / (1 + |z| / 2),
// with fractional error below 1.2e-7 for every z (Numerical Recipes' erfcc coefficients).
// erfc(-z) = 2 - erfc(z). One reciprocal, one exponential and ten FMAs.
__device__ __forceinline__ float erfc_approx(float z) {
    const float a = fabsf(z);
    const float t = fast_reciprocal(1.0f + 0.5f * a);
    float p = 0.17087277f;
    p = fmaf(p, t, -0.82215223f);
    p = fmaf(p, t, 1.48851587f);
    p = fmaf(p, t, -1.13520398f);
    p = fmaf(p, t, 0.27886807f);
    p = fmaf(p, t, -0.18628806f);
    p = fmaf(p, t, 0.09678418f);
    p = fmaf(p, t, 0.37409196f);
    p = fmaf(p, t, 1.00002368f);
    p = fmaf(p, t, -1.26551223f);
    const float r = t * fast_exp(fmaf(-a, a, p));
    return z >= 0.0f ? r : 2.0f - r;
}

}  // namespace tileops
