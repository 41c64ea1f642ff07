// Elementwise and activation ops: problem checks, tuning key and kernel choice
// (ElementwiseModel), and Elementwise::run. Kernel: kernel_templates/elementwise/elementwise.cuh.
#include "tileops/elementwise.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "tileops/error.hpp"

namespace tileops {

const char* elementwise_op_name(ElementwiseOp op) noexcept {
    switch (op) {
        case ElementwiseOp::gelu: return "gelu";
        case ElementwiseOp::gelu_tanh: return "gelu_tanh";
        case ElementwiseOp::silu: return "silu";
        case ElementwiseOp::silu_mul: return "silu_mul";
        case ElementwiseOp::add: return "add";
        case ElementwiseOp::mul: return "mul";
    }
    return "unknown";
}

bool is_binary(ElementwiseOp op) noexcept {
    return op == ElementwiseOp::silu_mul || op == ElementwiseOp::add || op == ElementwiseOp::mul;
}

namespace detail {
namespace {

constexpr unsigned kMaxGridY = 65535;

// The launch shape: contiguous tensors are one long row, so blocks never straddle short rows.
struct ElementwiseShape {
    int64_t rows, cols;
};

}  // namespace

class ElementwiseModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const ElementwiseProblem& problem() const noexcept { return problem_; }
    explicit ElementwiseModel(const ElementwiseProblem& p) : problem_(p) {
        const bool b_contiguous = !is_binary(p.op) || (!p.broadcast_b && p.b_stride == p.cols);
        flat_ = p.rows > 1 && p.a_stride == p.cols && p.y_stride == p.cols && b_contiguous;
        shape_ = flat_ ? ElementwiseShape{1, p.rows * p.cols} : ElementwiseShape{p.rows, p.cols};
        const int64_t b_stride = is_binary(p.op) && !p.broadcast_b ? p.b_stride : p.a_stride;
        shape_vec_ = widest_dividing_vector(8, {shape_.cols, p.a_stride, b_stride, p.y_stride});
        strides_share_frame_ = flat_ || strides_share_frame(static_cast<int>(max_vec()), {p.a_stride, p.y_stride, b_stride});
    }

    std::string op_name() const override { return elementwise_op_name(problem_.op); }
    // The launch shape: a contiguous problem runs, and is tuned, as the one long row it is, so
    // that one database entry serves every rows x cols of the same size.
    std::vector<long long> shape() const override { return {shape_.rows, shape_.cols}; }
    std::string dtype_key() const override {
        if (problem_.dtype == *problem_.out_dtype) return dtype_name(problem_.dtype);
        return fmt::format("{}->{}", dtype_name(problem_.dtype), dtype_name(*problem_.out_dtype));
    }
    std::string flags() const override { return problem_.broadcast_b ? "broadcast_b" : ""; }

    std::vector<OperandSpec> operands() const override {
        const ElementwiseProblem& p = problem_;
        std::vector<OperandSpec> list{{"a", p.dtype, p.rows, p.cols, p.a_stride, false}};
        if (is_binary(p.op)) {
            if (p.broadcast_b)
                list.push_back({"b", p.dtype, 0, p.cols, p.cols, false});
            else
                list.push_back({"b", p.dtype, p.rows, p.cols, p.b_stride, false});
        }
        list.push_back({"y", *p.out_dtype, p.rows, p.cols, p.y_stride, true});
        return list;
    }

    Config heuristic(const DeviceInfo& device) const override {
        // Binary ops: one 16-byte access a thread and input. Four in flight per thread took 4-13%
        // longer on 1-8M elements (a few waves of blocks: one whole block more or less on an SM
        // weighs more) and tied from 16M (H100: silu_mul 255 x 16384 bf16 11.7 -> 10.5 us, add 1000
        // x 4096 fp32 16.8 -> 15.8; docs/perf/elementwise.md). The unary activations (an exponential
        // and a reciprocal or more per element, one input stream): 8-byte accesses, two per
        // thread, so twice the threads share the arithmetic (gelu fp32 8% and gelu_tanh / silu
        // bf16 2-4% faster that way). Fewer for short rows so that a block is not mostly idle.
        const bool activation = !is_binary(problem_.op);
        const long long vec = activation ? std::max(1LL, max_vec() / 2) : max_vec();
        long long unroll = activation ? 2 : 1;
        while (unroll > 1 && 256 * vec * unroll / 2 >= shape_.cols) unroll /= 2;
        // A small problem is one memory round trip, and the SMs that take part set its time: less
        // work a block while blocks leave SMs idle (silu_mul 3 x 8192 bf16 on 3 blocks took 5.5 us
        // where torch.compile's 24 took 3.8).
        long long threads = 256;
        auto blocks = [&] { return (shape_.cols + threads * vec * unroll - 1) / (threads * vec * unroll) * shape_.rows; };
        while (unroll > 1 && blocks() < device.sm_count) unroll /= 2;
        while (threads > 128 && blocks() < device.sm_count) threads /= 2;
        return {{"threads", threads}, {"vec", vec}, {"unroll", unroll}};
    }

    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> space;
        for (long long threads : {128, 256, 512, 1024})
            for (long long vec = max_vec(); vec >= std::max(1LL, max_vec() / 2); vec /= 2)
                for (long long unroll : {1, 2, 4, 8}) {
                    Config config{{"threads", threads}, {"vec", vec}, {"unroll", unroll}};
                    if (!invalid_reason(config, device)) space.push_back(config);
                }
        return space;
    }

    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        long long threads = 0, vec = 0, unroll = 0;
        if (auto why = read_tunables(config, op_name(), {{"threads", &threads}, {"vec", &vec}, {"unroll", &unroll}})) return why;
        if (auto why = block_threads_reason(threads, device)) return why;
        if (auto why = vector_width_reason(vec, max_vec())) return why;
        if (unroll < 1 || unroll > 16) return fmt::format("unroll = {} is not in [1, 16]", unroll);
        // Counted at one element a vector: a launch narrows the vector for misaligned operands.
        if ((shape_.cols + threads * unroll - 1) / (threads * unroll) > 0x7fffffffLL) return "too many blocks along the row";
        return std::nullopt;
    }

    std::vector<int> vector_widths(const Config& config) const override {
        return ragged_launch_widths(static_cast<int>(config.at("vec")), shape_vec_, strides_share_frame_);
    }

    LaunchPlan plan(const Config& config, int width, const DeviceInfo&) const override {
        const long long threads = config.at("threads"), unroll = config.at("unroll");
        const int vec = width_vector(width);
        LaunchPlan plan;
        plan.template_file = "elementwise/elementwise.cuh";
        plan.name_expression = fmt::format("tileops::elementwise{}_kernel<{}, {}, {}, {}, {}, {}>",
                                           is_ragged_width(width) && vec > 1 ? "_ragged" : "",
                                           device_type_name(problem_.dtype), device_type_name(*problem_.out_dtype),
                                           static_cast<int>(problem_.op), vec, unroll, threads);
        const int64_t per_block = threads * vec * unroll;
        plan.grid[0] = static_cast<unsigned>((shape_.cols + per_block - 1) / per_block);
        plan.grid[1] = static_cast<unsigned>(std::min<int64_t>(shape_.rows, kMaxGridY));
        plan.block[0] = static_cast<unsigned>(threads);
        return plan;
    }

    const ElementwiseShape& launch_shape() const noexcept { return shape_; }
    int shape_vec() const noexcept { return shape_vec_; }

private:
    size_t element_bytes() const { return std::max(dtype_size(problem_.dtype), dtype_size(*problem_.out_dtype)); }
    long long max_vec() const { return static_cast<long long>(16 / element_bytes()); }

    ElementwiseProblem problem_;
    ElementwiseShape shape_{};
    bool flat_ = false;
    int shape_vec_ = 1;
    bool strides_share_frame_ = true;  // the rows of a, y and an unbroadcast b start alike
};

namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

ElementwiseProblem normalized(ElementwiseProblem p) {
    const char* op = "Elementwise";
    if (std::find(std::begin(kElementwiseOps), std::end(kElementwiseOps), p.op) == std::end(kElementwiseOps))
        throw InvalidArgument(fmt::format("tileops::{}: unknown op {}", op, static_cast<int>(p.op)));
    check_extent(op, p.rows, p.cols);
    // Contiguous rows run as one flattened row, whose blocks must fit a grid's 2^31.
    if (p.rows * p.cols > kMaxElements)
        throw InvalidArgument(fmt::format("tileops::{}: rows x cols = {} x {} is larger than supported (2^40 elements)", op,
                                          p.rows, p.cols));
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype(op, "dtype", p.dtype);
    check_float_dtype(op, "out_dtype", *p.out_dtype);
    if (p.broadcast_b && !is_binary(p.op))
        throw InvalidArgument(fmt::format("tileops::{}: broadcast_b needs a binary op, {} is unary", op,
                                          elementwise_op_name(p.op)));
    p.a_stride = row_stride(op, "a_stride", p.a_stride, p.rows, p.cols);
    p.b_stride = p.broadcast_b ? 0 : row_stride(op, "b_stride", p.b_stride, p.rows, p.cols);
    p.y_stride = row_stride(op, "y_stride", p.y_stride, p.rows, p.cols);
    return p;
}

}  // namespace
}  // namespace detail

Elementwise::Elementwise(const ElementwiseProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::ElementwiseModel>(detail::normalized(problem)));
}

namespace detail {
namespace {

// Checks run()'s operands; returns the widest vector width the shape and every pointer allow.
int bind(const ElementwiseProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const DType out = *p.out_dtype;
    const bool binary = is_binary(p.op);
    check_count("Elementwise", "inputs", inputs.size(), binary ? 2 : 1, binary ? "a, b" : "a");
    check_count("Elementwise", "outputs", outputs.size(), 1, "y");
    const TensorArg& a = inputs.begin()[0];
    const OutputArg& y = outputs.begin()[0];
    const RowsSpan a_span = check_operand("Elementwise", "a", a.data(), a.view(), p.dtype, p.rows, p.cols, p.a_stride);
    const RowsSpan y_span = check_operand("Elementwise", "y", y.data(), y.view(), out, p.rows, p.cols, p.y_stride);
    check_output_overlap("Elementwise", y_span, a_span, true);
    int vec = shape_vec;
    if (binary) {
        const TensorArg& b = inputs.begin()[1];
        const RowsSpan b_span = p.broadcast_b
                                    ? check_operand("Elementwise", "b", b.data(), b.view(), p.dtype, 0, p.cols, 1)
                                    : check_operand("Elementwise", "b", b.data(), b.view(), p.dtype, p.rows, p.cols, p.b_stride);
        // A broadcast b is read by every row: y must keep apart from it.
        check_output_overlap("Elementwise", y_span, b_span, !p.broadcast_b);
        vec = widest_aligned_vector(vec, b.data(), dtype_size(p.dtype));
    }
    vec = widest_aligned_vector(vec, a.data(), dtype_size(p.dtype));
    return widest_aligned_vector(vec, y.data(), dtype_size(out));
}

}  // namespace

int ElementwiseModel::vector_width(Inputs inputs, Outputs outputs) const {
    const ElementwiseProblem& p = problem_;
    const int aligned = detail::bind(p, shape_vec(), inputs, outputs);
    const size_t in = dtype_size(p.dtype), out = dtype_size(*p.out_dtype);
    const RowOperand a{inputs.begin()[0].data(), p.a_stride, in}, y{outputs.begin()[0].data(), p.y_stride, out};
    if (!is_binary(p.op) || p.broadcast_b) return ragged_launch_width(aligned, element_bytes(), {a, y});
    return ragged_launch_width(aligned, element_bytes(), {a, y, {inputs.begin()[1].data(), p.b_stride, in}});
}

void ElementwiseModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const ElementwiseProblem& p = problem_;
    const detail::ElementwiseShape& shape = launch_shape();
    const void* a = inputs.begin()[0].data();
    const void* b = is_binary(p.op) ? inputs.begin()[1].data() : nullptr;
    void* y = outputs.begin()[0].data();
    long long a_stride = p.a_stride, b_stride = p.b_stride, y_stride = p.y_stride;
    long long rows = shape.rows, cols = shape.cols;
    void* args[] = {&a, &a_stride, &b, &b_stride, &y, &y_stride, &rows, &cols};
    detail::launch(launch, args, stream, *this);
}

}  // namespace detail
}  // namespace tileops
