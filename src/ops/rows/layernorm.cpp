// LayerNorm: problem checks, tuning key and kernel choice (LayerNormModel), and LayerNorm::run.
// Kernels: kernel_templates/rows/layernorm.cuh; for long rows also layernorm_resident.cuh.
#include "tileops/layernorm.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/validation.hpp"
#include "ops/rows/row_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
class LayerNormModel final : public RowOpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const LayerNormProblem& problem() const noexcept { return problem_; }
    explicit LayerNormModel(const LayerNormProblem& p)
        : RowOpModel(p.rows, p.cols, p.dtype, *p.out_dtype, {p.x_stride, p.y_stride}), problem_(p) {}

    std::string op_name() const override { return "layernorm"; }
    std::string template_file() const override { return "rows/layernorm.cuh"; }
    std::string flags() const override { return ""; }
    std::vector<OperandSpec> operands() const override {
        return {{"x", problem_.dtype, rows_, cols_, problem_.x_stride, false},
                {"weight", problem_.dtype, 0, cols_, cols_, false},
                {"bias", problem_.dtype, 0, cols_, cols_, false},
                {"y", *problem_.out_dtype, rows_, cols_, problem_.y_stride, true}};
    }

private:
    std::string resident_template_file() const override { return "rows/layernorm_resident.cuh"; }
    std::string split_template_file() const override { return "rows/layernorm_split.cuh"; }
    std::pair<std::string, std::string> split_name_expressions(const RowLaunch& l) const override {
        const std::string arguments =
            fmt::format("<{}, {}, {}, {}, {}>", type_arguments(), l.threads_per_row, l.vec, l.split, l.ragged);
        return {"tileops::layernorm_split_stats_kernel" + arguments, "tileops::layernorm_split_apply_kernel" + arguments};
    }
    std::string name_expression(const RowLaunch& l) const override {
        const char* ragged = l.ragged ? "_ragged" : "";
        if (l.slots > 0)
            return fmt::format("tileops::layernorm_resident{}_kernel<{}, {}, {}, {}, {}, {}>", ragged, type_arguments(),
                               l.threads_per_row, l.vec, l.items, l.slots, l.cluster);
        return fmt::format("tileops::layernorm{}_kernel<{}, {}, {}, {}, {}, {}, {}>", ragged, type_arguments(),
                           l.threads_per_row, l.rows_per_block, l.vec, l.items, l.cluster, l.prefetch);
    }
    LayerNormProblem problem_;
};

namespace {

LayerNormProblem normalized(LayerNormProblem p) {
    check_extent("LayerNorm", p.rows, p.cols);
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype("LayerNorm", "dtype", p.dtype);
    check_float_dtype("LayerNorm", "out_dtype", *p.out_dtype);
    p.x_stride = row_stride("LayerNorm", "x_stride", p.x_stride, p.rows, p.cols);
    p.y_stride = row_stride("LayerNorm", "y_stride", p.y_stride, p.rows, p.cols);
    if (!(p.eps >= 0.0f) || !std::isfinite(p.eps))
        throw InvalidArgument(fmt::format("tileops::LayerNorm: eps must be >= 0 and finite, got {}", p.eps));
    return p;
}

}  // namespace
}  // namespace detail

LayerNorm::LayerNorm(const LayerNormProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::LayerNormModel>(detail::normalized(problem)));
}

namespace detail {
namespace {

// Checks run()'s operands; returns the widest vector width the shape and every pointer allow.
int bind(const LayerNormProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const DType out = *p.out_dtype;
    check_count("LayerNorm", "inputs", inputs.size(), 3, "x, weight, bias");
    check_count("LayerNorm", "outputs", outputs.size(), 1, "y");
    const TensorArg& x = inputs.begin()[0];
    const TensorArg& weight = inputs.begin()[1];
    const TensorArg& bias = inputs.begin()[2];
    const OutputArg& y = outputs.begin()[0];
    const RowsSpan x_span = check_operand("LayerNorm", "x", x.data(), x.view(), p.dtype, p.rows, p.cols, p.x_stride);
    const RowsSpan weight_span = check_operand("LayerNorm", "weight", weight.data(), weight.view(), p.dtype, 0, p.cols, 1);
    const RowsSpan bias_span = check_operand("LayerNorm", "bias", bias.data(), bias.view(), p.dtype, 0, p.cols, 1);
    const RowsSpan y_span = check_operand("LayerNorm", "y", y.data(), y.view(), out, p.rows, p.cols, p.y_stride);
    const size_t in_bytes = dtype_size(p.dtype);
    check_output_overlap("LayerNorm", y_span, x_span, true);
    check_output_overlap("LayerNorm", y_span, weight_span, false);
    check_output_overlap("LayerNorm", y_span, bias_span, false);
    int vec = widest_aligned_vector(shape_vec, x.data(), in_bytes);
    vec = widest_aligned_vector(vec, weight.data(), in_bytes);
    vec = widest_aligned_vector(vec, bias.data(), in_bytes);
    return widest_aligned_vector(vec, y.data(), dtype_size(out));
}

}  // namespace

int LayerNormModel::vector_width(Inputs inputs, Outputs outputs) const {
    const LayerNormProblem& p = problem_;
    const int aligned = detail::bind(p, shape_vec(), inputs, outputs);
    return launch_width(aligned, {{inputs.begin()[0].data(), p.x_stride, dtype_size(p.dtype)},
                                  {outputs.begin()[0].data(), p.y_stride, dtype_size(*p.out_dtype)}});
}

void LayerNormModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const LayerNormProblem& p = problem_;
    const void* x = inputs.begin()[0].data();
    const void* weight = inputs.begin()[1].data();
    const void* bias = inputs.begin()[2].data();
    void* y = outputs.begin()[0].data();
    long long x_stride = p.x_stride, y_stride = p.y_stride, rows = p.rows, cols = p.cols;
    float eps = p.eps;
    void* partials = launch.workspace_data();  // the split kernels' partials; the others ignore it
    void* args[] = {&x, &x_stride, &weight, &bias, &y, &y_stride, &rows, &cols, &eps, &partials};
    detail::launch(launch, args, stream, *this);
}

}  // namespace detail
}  // namespace tileops
