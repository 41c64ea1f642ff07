// Activation quantization: bf16 / fp16 rows to fp8 e4m3 codes with fp32 scales, the scales
// computed in the same pass (per token or per 1x128 block) or per tensor.
#pragma once

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

// Which elements share a scale.
enum class QuantizeScaling {
    // One scale for the whole tensor: scales[1], computed by the op (amax over the tensor), or,
    // with QuantizeProblem::static_scale, given by the caller as an input.
    per_tensor,
    // One scale a row: scales[rows].
    per_token,
    // One scale per row and 128-column block, stored block-major ("M-major", as a GEMM reading a K
    // block's scales for consecutive rows wants them): the scale of x[r, c] is
    // scales[(c / 128) * scale_stride + r]. cols need not be a multiple of 128: the last block is
    // partial and its scale covers its columns only.
    block_1x128,
};

// "per_tensor", "per_token", "block_1x128".
TILEOPS_EXPORT const char* quantize_scaling_name(QuantizeScaling scaling) noexcept;

struct QuantizeProblem {
    int64_t rows = 0;
    int64_t cols = 0;
    DType dtype = DType::bf16;              // x: bf16 or fp16
    DType out_dtype = DType::fp8_e4m3;      // q: fp8_e4m3 (the only one so far)
    QuantizeScaling scaling = QuantizeScaling::per_token;
    // per_tensor only: the scale is the caller's (a device pointer to one fp32, an input), not
    // computed.
    bool static_scale = false;
    int64_t x_stride = 0;      // elements between rows of x; 0: cols
    int64_t q_stride = 0;      // elements between rows of q; 0: cols
    // block_1x128 only: elements between the scales of consecutive column blocks; 0: rows (packed).
    // Must be >= rows. Ignored for the other scalings.
    int64_t scale_stride = 0;
};

// q = e4m3(x / scale), with dequantized value = float(q) * scale, where scale = amax / 448 over the
// scale's group (amax: the largest |x| of the group; computed as amax x fp32(1 / 448), within an
// fp32 ulp of the quotient) and e4m3() rounds to the nearest code, ties to even, saturating at
// +-448. A group whose amax / 448 is below 2^-126 (the smallest normal fp32;
// an all-zero group has amax 0) gets scale 2^-126 instead: its codes are then exact zeros (or the
// tiny values scaled up), and neither the scale, its reciprocal nor a dequantized value is ever 0 /
// 0, NaN or infinite. The kernel multiplies x by the fp32 reciprocal 1 / scale (not a division),
// which rounds the quotient once more: a code can differ by one e4m3 step from the exact quotient's
// rounding where that quotient lies within a few fp32 ulps of the midpoint between two codes.
// A static scale is used as given: it must be positive and finite (the device holds it, so this
// is the caller's to keep). Inputs must be finite: an infinity makes its group's scale infinite, a
// NaN is left out of amax and quantizes to the e4m3 NaN code.
//
// Operands of run():
//   per_token, block_1x128 and per_tensor (computed): inputs {x}; outputs {q, scales}.
//   per_tensor with static_scale: inputs {x, scale} (scale: one fp32); outputs {q}.
// x is [rows, cols] (x_stride), q [rows, cols] fp8_e4m3 (q_stride), scales fp32 [rows] (per_token),
// [ceil(cols / 128), rows] with row stride scale_stride (block_1x128) or [1] (per_tensor).
//
// The computed per-tensor scale takes two kernels on the caller's stream, no host sync (CUDA-graph
// safe): the first reads x once for its amax (atomics into the op's 8-byte workspace, which its
// last CTA resets) and writes the scale, the second reads x again and quantizes. It moves 5 bytes
// an element of 16-bit x against 3 for the others; give a static scale where one is known. Like
// every op with a workspace, runs of one op object on different streams must not overlap.
class TILEOPS_EXPORT Quantize : public Op {
public:
    explicit Quantize(const QuantizeProblem& problem);
    // The problem as normalized (defaults filled in).
    const QuantizeProblem& problem() const noexcept { return *problem_; }

private:
    const QuantizeProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
