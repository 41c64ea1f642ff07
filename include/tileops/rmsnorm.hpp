// RMSNorm over the last dimension, with an optional fused residual add.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct RmsNormProblem {
    int64_t rows = 0;
    int64_t cols = 0;
    DType dtype = DType::bf16;          // x, residual, weight and the written sum
    std::optional<DType> out_dtype = std::nullopt;  // y; default: dtype
    float eps = 1e-6f;
    bool residual = false;              // h = x + residual is normalized and also written out
    int64_t x_stride = 0;               // elements between rows; 0: cols
    int64_t residual_stride = 0;        // for residual and the sum output; 0: cols
    int64_t y_stride = 0;               // 0: cols
};

// y = h / sqrt(mean(h^2) + eps) * weight, h = x (+ residual), per row, fp32 accumulation.
// Operands of run(): inputs: {x, weight} or, with residual, {x, residual, weight};
// outputs: {y} or, with residual, {y, sum} (sum = x + residual; it may alias x or residual).
class TILEOPS_EXPORT RmsNorm : public Op {
public:
    explicit RmsNorm(const RmsNormProblem& problem);
    // The problem as normalized (defaults filled in).
    const RmsNormProblem& problem() const noexcept { return *problem_; }

private:
    const RmsNormProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
