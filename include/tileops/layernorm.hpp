// LayerNorm over the last dimension with weight and bias.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct LayerNormProblem {
    int64_t rows = 0;
    int64_t cols = 0;
    DType dtype = DType::bf16;       // x, weight, bias
    std::optional<DType> out_dtype = std::nullopt;  // y; default: dtype
    float eps = 1e-5f;
    int64_t x_stride = 0;            // elements between rows; 0: cols
    int64_t y_stride = 0;            // 0: cols
};

// y = (x - mean) / sqrt(var + eps) * weight + bias per row (biased variance, like torch).
// Operands of run(): inputs: {x, weight, bias}; outputs: {y}.
class TILEOPS_EXPORT LayerNorm : public Op {
public:
    explicit LayerNorm(const LayerNormProblem& problem);
    // The problem as normalized (defaults filled in).
    const LayerNormProblem& problem() const noexcept { return *problem_; }

private:
    const LayerNormProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
