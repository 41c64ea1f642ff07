// Elementwise and activation ops over [rows, cols] tensors with a row stride.
#pragma once

#include <optional>

#include "tileops/export.hpp"
#include "tileops/op.hpp"

namespace tileops {

enum class ElementwiseOp : int {
    gelu = 0,       // y = a * Phi(a), exact (erf)
    gelu_tanh = 1,  // tanh approximation
    silu = 2,       // y = a * sigmoid(a)
    silu_mul = 3,   // y = silu(a) * b (the SwiGLU gate)
    add = 4,        // y = a + b
    mul = 5,        // y = a * b
};

// Every elementwise op, in enum order.
inline constexpr ElementwiseOp kElementwiseOps[] = {ElementwiseOp::gelu,     ElementwiseOp::gelu_tanh,
                                                    ElementwiseOp::silu,     ElementwiseOp::silu_mul,
                                                    ElementwiseOp::add,      ElementwiseOp::mul};

TILEOPS_EXPORT const char* elementwise_op_name(ElementwiseOp op) noexcept;
TILEOPS_EXPORT bool is_binary(ElementwiseOp op) noexcept;

struct ElementwiseProblem {
    ElementwiseOp op = ElementwiseOp::silu;
    int64_t rows = 0;
    int64_t cols = 0;
    DType dtype = DType::bf16;
    std::optional<DType> out_dtype = std::nullopt;  // default: dtype
    bool broadcast_b = false;        // b is one row of `cols` elements, applied to every row
    int64_t a_stride = 0;            // elements between rows; 0: cols
    int64_t b_stride = 0;            // 0: cols (ignored when broadcast_b)
    int64_t y_stride = 0;            // 0: cols
};

// Operands of run(): inputs: {a} for unary ops, {a, b} for binary ones; outputs: {y}.
class TILEOPS_EXPORT Elementwise : public Op {
public:
    explicit Elementwise(const ElementwiseProblem& problem);
    // The problem as normalized (defaults filled in).
    const ElementwiseProblem& problem() const noexcept { return *problem_; }

private:
    const ElementwiseProblem* problem_ = nullptr;  // the model's
};

}  // namespace tileops
