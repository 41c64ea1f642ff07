// Softmax and log-softmax over the last dimension.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

struct SoftmaxProblem {
    int64_t rows = 0;
    int64_t cols = 0;
    DType dtype = DType::bf16;
    std::optional<DType> out_dtype = std::nullopt;  // default: dtype
    bool log = false;                // log-softmax
    int64_t x_stride = 0;            // elements between rows; 0: cols
    int64_t y_stride = 0;            // 0: cols
};

// Operands of run(): inputs: {x}; outputs: {y}.
class TILEOPS_EXPORT Softmax : public Op {
public:
    explicit Softmax(const SoftmaxProblem& problem);
    // The problem as normalized (defaults filled in).
    const SoftmaxProblem& problem() const noexcept { return *problem_; }

private:
    const SoftmaxProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
