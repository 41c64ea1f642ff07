// The elementwise family: GELU (erf and tanh), SiLU, SiLU-and-mul, add and mul over [rows, cols].
// Kernels: kernel_templates/elementwise/.
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/elementwise.hpp"
#include "tileops/error.hpp"

namespace tileops::detail {
namespace {

std::unique_ptr<Op> make_elementwise(const ProblemSpec& spec) {
    require_rank(spec, 2, "rows x cols");
    ElementwiseProblem problem;
    for (ElementwiseOp op : kElementwiseOps)
        if (spec.op == elementwise_op_name(op)) problem.op = op;
    const DTypePair dtypes = parse_dtype_pair(spec.dtype);
    problem.rows = spec.shape[0];
    problem.cols = spec.shape[1];
    problem.dtype = dtypes.in;
    problem.out_dtype = dtypes.out;
    for (const std::string& flag : split_flags(spec.flags)) {
        if (flag == "broadcast_b" && (problem.op == ElementwiseOp::add || problem.op == ElementwiseOp::mul))
            problem.broadcast_b = true;
        else
            throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to {}", flag, spec.op));
    }
    return std::make_unique<Elementwise>(problem);
}

std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}, {16384, 1024}, {16384, 4096},
                                 {4096, 16384}, {1024, 65536}, {256, 262144}};
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16})
        for (const auto& s : shapes)
            for (ElementwiseOp op : kElementwiseOps)
                ops.push_back(std::make_unique<Elementwise>(ElementwiseProblem{op, s[0], s[1], dtype}));
    return ops;
}

}  // namespace

OpFamily elementwise_family() {
    OpFamily family{"elementwise", {}, representative_ops};
    for (ElementwiseOp op : kElementwiseOps) {
        const bool broadcast = op == ElementwiseOp::add || op == ElementwiseOp::mul;
        family.ops.push_back({elementwise_op_name(op), "rows x cols", broadcast ? "broadcast_b" : "", make_elementwise});
    }
    return family;
}

}  // namespace tileops::detail
