// Softmax and log-softmax: problem checks, tuning key and kernel choice (SoftmaxModel), and
// Softmax::run. Kernels: kernel_templates/rows/softmax.cuh; for long rows also softmax_resident.cuh.
#include "tileops/softmax.hpp"

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/validation.hpp"
#include "ops/rows/row_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
class SoftmaxModel final : public RowOpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const SoftmaxProblem& problem() const noexcept { return problem_; }
    explicit SoftmaxModel(const SoftmaxProblem& p)
        : RowOpModel(p.rows, p.cols, p.dtype, *p.out_dtype, {p.x_stride, p.y_stride}), problem_(p), log_(p.log) {}

    std::string op_name() const override { return log_ ? "log_softmax" : "softmax"; }
    std::string template_file() const override { return "rows/softmax.cuh"; }
    std::string flags() const override { return ""; }
    std::vector<OperandSpec> operands() const override {
        return {{"x", problem_.dtype, rows_, cols_, problem_.x_stride, false},
                {"y", *problem_.out_dtype, rows_, cols_, problem_.y_stride, true}};
    }

private:
    std::string resident_template_file() const override { return "rows/softmax_resident.cuh"; }
    std::string split_template_file() const override { return "rows/softmax_split.cuh"; }
    bool rereads_row() const override { return true; }
    std::pair<std::string, std::string> split_name_expressions(const RowLaunch& l) const override {
        const std::string arguments = fmt::format("<{}, {}, {}, {}, {}, {}>", type_arguments(), l.threads_per_row, l.vec,
                                                  l.split, log_ ? "true" : "false", l.ragged ? "true" : "false");
        return {"tileops::softmax_split_stats_kernel" + arguments, "tileops::softmax_split_apply_kernel" + arguments};
    }
    std::string name_expression(const RowLaunch& l) const override {
        const char* ragged = l.ragged ? "_ragged" : "";
        if (l.slots > 0)
            return fmt::format("tileops::softmax_resident{}_kernel<{}, {}, {}, {}, {}, {}, {}>", ragged, type_arguments(),
                               l.threads_per_row, l.vec, l.items, l.slots, l.cluster, log_ ? "true" : "false");
        return fmt::format("tileops::softmax{}_kernel<{}, {}, {}, {}, {}, {}, {}, {}>", ragged, type_arguments(),
                           l.threads_per_row, l.rows_per_block, l.vec, l.items, l.cluster, log_ ? "true" : "false",
                           l.prefetch);
    }
    SoftmaxProblem problem_;
    bool log_;
};

namespace {

SoftmaxProblem normalized(SoftmaxProblem p) {
    check_extent("Softmax", p.rows, p.cols);
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype("Softmax", "dtype", p.dtype);
    check_float_dtype("Softmax", "out_dtype", *p.out_dtype);
    p.x_stride = row_stride("Softmax", "x_stride", p.x_stride, p.rows, p.cols);
    p.y_stride = row_stride("Softmax", "y_stride", p.y_stride, p.rows, p.cols);
    return p;
}

}  // namespace
}  // namespace detail

Softmax::Softmax(const SoftmaxProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::SoftmaxModel>(detail::normalized(problem)));
}

namespace detail {
namespace {

// Checks run()'s operands; returns the widest vector width the shape and every pointer allow.
int bind(const SoftmaxProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const DType out = *p.out_dtype;
    check_count("Softmax", "inputs", inputs.size(), 1, "x");
    check_count("Softmax", "outputs", outputs.size(), 1, "y");
    const TensorArg& x = inputs.begin()[0];
    const OutputArg& y = outputs.begin()[0];
    const RowsSpan x_span = check_operand("Softmax", "x", x.data(), x.view(), p.dtype, p.rows, p.cols, p.x_stride);
    const RowsSpan y_span = check_operand("Softmax", "y", y.data(), y.view(), out, p.rows, p.cols, p.y_stride);
    check_output_overlap("Softmax", y_span, x_span, true);
    return widest_aligned_vector(widest_aligned_vector(shape_vec, x.data(), dtype_size(p.dtype)), y.data(),
                                 dtype_size(out));
}

}  // namespace

int SoftmaxModel::vector_width(Inputs inputs, Outputs outputs) const {
    const SoftmaxProblem& p = problem_;
    const int aligned = detail::bind(p, shape_vec(), inputs, outputs);
    return launch_width(aligned, {{inputs.begin()[0].data(), p.x_stride, dtype_size(p.dtype)},
                                  {outputs.begin()[0].data(), p.y_stride, dtype_size(*p.out_dtype)}});
}

void SoftmaxModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const SoftmaxProblem& p = problem_;
    const void* x = inputs.begin()[0].data();
    void* y = outputs.begin()[0].data();
    long long x_stride = p.x_stride, y_stride = p.y_stride, rows = p.rows, cols = p.cols;
    void* partials = launch.workspace_data();  // the split kernels' (max, sum) pairs; others take six parameters
    void* args[] = {&x, &x_stride, &y, &y_stride, &rows, &cols, &partials};
    detail::launch(launch, args, stream, *this);
}

}  // namespace detail
}  // namespace tileops
