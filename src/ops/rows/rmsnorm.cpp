// RMSNorm: problem checks, tuning key and kernel choice (RmsNormModel), and RmsNorm::run.
// Kernels: kernel_templates/rows/rmsnorm.cuh; for long rows also rmsnorm_resident.cuh.
#include "tileops/rmsnorm.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/validation.hpp"
#include "ops/rows/row_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
class RmsNormModel final : public RowOpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const RmsNormProblem& problem() const noexcept { return problem_; }
    explicit RmsNormModel(const RmsNormProblem& p)
        : RowOpModel(p.rows, p.cols, p.dtype, *p.out_dtype,
                     p.residual ? std::initializer_list<int64_t>{p.x_stride, p.y_stride, p.residual_stride}
                                : std::initializer_list<int64_t>{p.x_stride, p.y_stride}),
          problem_(p), residual_(p.residual) {}

    std::string op_name() const override { return "rmsnorm"; }
    std::string template_file() const override { return "rows/rmsnorm.cuh"; }
    std::string flags() const override { return residual_ ? "residual" : ""; }
    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{{"x", problem_.dtype, rows_, cols_, problem_.x_stride, false}};
        if (residual_) list.push_back({"residual", problem_.dtype, rows_, cols_, problem_.residual_stride, false});
        list.push_back({"weight", problem_.dtype, 0, cols_, cols_, false});
        list.push_back({"y", *problem_.out_dtype, rows_, cols_, problem_.y_stride, true});
        if (residual_) list.push_back({"sum", problem_.dtype, rows_, cols_, problem_.residual_stride, true});
        return list;
    }

private:
    RowInputs inputs() const override { return {dtype_size(problem_.dtype), residual_ ? 2 : 1}; }
    std::string resident_template_file() const override { return "rows/rmsnorm_resident.cuh"; }
    std::string split_template_file() const override { return "rows/rmsnorm_split.cuh"; }
    std::pair<std::string, std::string> split_name_expressions(const RowLaunch& l) const override {
        const std::string arguments = fmt::format("<{}, {}, {}, {}, {}, {}>", type_arguments(), l.threads_per_row, l.vec,
                                                  l.split, residual_, l.ragged);
        return {"tileops::rmsnorm_split_stats_kernel" + arguments, "tileops::rmsnorm_split_apply_kernel" + arguments};
    }
    std::string name_expression(const RowLaunch& l) const override {
        const char* ragged = l.ragged ? "_ragged" : "";
        if (l.slots > 0)
            return fmt::format("tileops::rmsnorm_resident{}_kernel<{}, {}, {}, {}, {}, {}>", ragged, type_arguments(),
                               l.threads_per_row, l.vec, l.items, l.slots, l.cluster);
        return fmt::format("tileops::rmsnorm{}_kernel<{}, {}, {}, {}, {}, {}, {}, {}>", ragged, type_arguments(),
                           l.threads_per_row, l.rows_per_block, l.vec, l.items, l.cluster, residual_, l.prefetch);
    }
    RmsNormProblem problem_;
    bool residual_;
};

namespace {

RmsNormProblem normalized(RmsNormProblem p) {
    check_extent("RmsNorm", p.rows, p.cols);
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype("RmsNorm", "dtype", p.dtype);
    check_float_dtype("RmsNorm", "out_dtype", *p.out_dtype);
    p.x_stride = row_stride("RmsNorm", "x_stride", p.x_stride, p.rows, p.cols);
    p.y_stride = row_stride("RmsNorm", "y_stride", p.y_stride, p.rows, p.cols);
    // Without a residual the field is unused: a leftover value must not refuse or narrow anything.
    p.residual_stride = p.residual ? row_stride("RmsNorm", "residual_stride", p.residual_stride, p.rows, p.cols) : p.cols;
    if (!(p.eps >= 0.0f) || !std::isfinite(p.eps))
        throw InvalidArgument(fmt::format("tileops::RmsNorm: eps must be >= 0 and finite, got {}", p.eps));
    return p;
}

}  // namespace
}  // namespace detail

RmsNorm::RmsNorm(const RmsNormProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::RmsNormModel>(detail::normalized(problem)));
}

namespace detail {
namespace {

// Checks run()'s operands; returns the widest vector width the shape and every pointer allow.
int bind(const RmsNormProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const DType out = *p.out_dtype;
    const bool res = p.residual;
    check_count("RmsNorm", "inputs", inputs.size(), res ? 3 : 2, res ? "x, residual, weight" : "x, weight");
    check_count("RmsNorm", "outputs", outputs.size(), res ? 2 : 1, res ? "y, sum" : "y");
    const TensorArg& x = inputs.begin()[0];
    const TensorArg& weight = inputs.begin()[res ? 2 : 1];
    const OutputArg& y = outputs.begin()[0];
    const RowsSpan x_span = check_operand("RmsNorm", "x", x.data(), x.view(), p.dtype, p.rows, p.cols, p.x_stride);
    const RowsSpan weight_span = check_operand("RmsNorm", "weight", weight.data(), weight.view(), p.dtype, 0, p.cols, 1);
    const RowsSpan y_span = check_operand("RmsNorm", "y", y.data(), y.view(), out, p.rows, p.cols, p.y_stride);
    const size_t in_bytes = dtype_size(p.dtype);
    check_output_overlap("RmsNorm", y_span, x_span, true);
    check_output_overlap("RmsNorm", y_span, weight_span, false);
    int vec = shape_vec;
    if (res) {
        const TensorArg& r = inputs.begin()[1];
        const OutputArg& s = outputs.begin()[1];
        const RowsSpan r_span =
            check_operand("RmsNorm", "residual", r.data(), r.view(), p.dtype, p.rows, p.cols, p.residual_stride);
        // sum is written with the residual's stride: in place of x only where x has that stride.
        const RowsSpan sum_span = check_operand("RmsNorm", "sum", s.data(), s.view(), p.dtype, p.rows, p.cols, p.residual_stride);
        check_output_overlap("RmsNorm", y_span, r_span, true);
        check_output_overlap("RmsNorm", sum_span, x_span, true);
        check_output_overlap("RmsNorm", sum_span, r_span, true);
        check_output_overlap("RmsNorm", sum_span, weight_span, false);
        check_output_overlap("RmsNorm", y_span, sum_span, false);
        vec = widest_aligned_vector(vec, r.data(), in_bytes);
        vec = widest_aligned_vector(vec, s.data(), in_bytes);
    }
    vec = widest_aligned_vector(vec, x.data(), in_bytes);
    vec = widest_aligned_vector(vec, weight.data(), in_bytes);
    return widest_aligned_vector(vec, y.data(), dtype_size(out));
}

}  // namespace

int RmsNormModel::vector_width(Inputs inputs, Outputs outputs) const {
    const RmsNormProblem& p = problem_;
    const int aligned = detail::bind(p, shape_vec(), inputs, outputs);
    const size_t in = dtype_size(p.dtype), out = dtype_size(*p.out_dtype);
    const RowOperand x{inputs.begin()[0].data(), p.x_stride, in}, y{outputs.begin()[0].data(), p.y_stride, out};
    if (!p.residual) return launch_width(aligned, {x, y});
    return launch_width(aligned, {x, y, {inputs.begin()[1].data(), p.residual_stride, in},
                                  {outputs.begin()[1].data(), p.residual_stride, in}});
}

void RmsNormModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const RmsNormProblem& p = problem_;
    const bool res = p.residual;
    const void* x = inputs.begin()[0].data();
    const void* residual = res ? inputs.begin()[1].data() : nullptr;
    const void* weight = inputs.begin()[res ? 2 : 1].data();
    void* y = outputs.begin()[0].data();
    void* sum = res ? outputs.begin()[1].data() : nullptr;
    long long x_stride = p.x_stride, r_stride = p.residual_stride, y_stride = p.y_stride;
    long long rows = p.rows, cols = p.cols;
    float eps = p.eps;
    void* partials = launch.workspace_data();  // the split kernels' partials; the others ignore it
    void* args[] = {&x,   &x_stride, &residual, &r_stride, &weight, &y,   &y_stride,
                    &sum, &r_stride, &rows,     &cols,     &eps,    &partials};
    detail::launch(launch, args, stream, *this);
}

}  // namespace detail
}  // namespace tileops
