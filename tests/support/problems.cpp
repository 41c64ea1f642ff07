#include "support/problems.hpp"

namespace tileops::test {

std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}, {16384, 1024}, {16384, 4096},
                                 {4096, 16384}, {1024, 65536}, {256, 262144}};
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        for (const auto& s : shapes) {
            const int64_t rows = s[0], cols = s[1];
            ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype, {}, 1e-6f, true}));
            ops.push_back(std::make_unique<LayerNorm>(LayerNormProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype, {}, true}));
            for (int kind = 0; kind <= 5; ++kind)
                ops.push_back(std::make_unique<Elementwise>(
                    ElementwiseProblem{static_cast<ElementwiseOp>(kind), rows, cols, dtype}));
        }
        ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{64, 4096, dtype, DType::fp32}));
    }
    return ops;
}

}  // namespace tileops::test
