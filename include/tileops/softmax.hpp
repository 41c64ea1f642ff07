// Softmax and log-softmax over the last dimension.
#pragma once

#include <optional>

#include "tileops/op.hpp"

namespace tileops {

struct SoftmaxProblem {
    int64_t rows = 0;
    int64_t cols = 0;
    DType dtype = DType::bf16;
    std::optional<DType> out_dtype;  // default: dtype
    bool log = false;                // log-softmax
    int64_t x_stride = 0;            // elements between rows; 0: cols
    int64_t y_stride = 0;            // 0: cols
};

// Operands of run(): inputs: {x}; outputs: {y}.
class Softmax : public Op {
public:
    explicit Softmax(const SoftmaxProblem& problem);
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch_with(const detail::ResolvedLaunch& launch, Inputs inputs, Outputs outputs,
                     CUstream stream) const override;
    const SoftmaxProblem& problem() const noexcept { return problem_; }

private:
    SoftmaxProblem problem_;
};

}  // namespace tileops
