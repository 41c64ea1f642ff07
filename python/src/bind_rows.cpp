// rms_norm, layer_norm, softmax / log_softmax and the elementwise ops: every tensor is viewed as
// rows of its last dim (leading dims collapsed into one row stride).
#include "bindings.hpp"

#include "tileops/elementwise.hpp"
#include "tileops/layernorm.hpp"
#include "tileops/rmsnorm.hpp"
#include "tileops/softmax.hpp"

namespace tileops::python {
namespace {

// What the row ops' problems share: x's rows and row length, dtype (and out's when it differs)
// and the row strides of x and out, whose leading dims must be x's (rows x cols alone would let a
// [3, 2, 8] out stand for a [2, 3, 8] x).
template <class P>
void set_rows(const char* op, P& p, const PyTensor& x, const PyTensor& out) {
    out.require_dims_of(op, x, false);
    p.rows = x.rows();
    p.cols = x.size(-1);
    p.dtype = x.dtype;
    if (out.dtype != x.dtype) p.out_dtype = out.dtype;
    p.x_stride = x.row_stride();
    p.y_stride = out.row_stride();
}

// RmsNorm's outputs as the package names them.
constexpr OperandName kRmsNormNames[] = {{"y", "out"}, {"sum", "residual_out"}};

py::object rms_norm(py::handle x_arg, py::handle weight_arg, py::handle out_arg, py::handle residual_arg,
                    py::handle residual_out_arg, double eps, py::handle stream) {
    Call call(stream);
    const PyTensor& x = call.tensor(x_arg, "x");
    const PyTensor& weight = call.tensor(weight_arg, "weight");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* residual = call.optional(residual_arg, "residual");
    const PyTensor* residual_out = call.optional(residual_out_arg, "residual_out");
    if ((residual == nullptr) != (residual_out == nullptr))
        throw InvalidArgument("tileops_jit.rms_norm: residual and residual_out go together");
    if (call.empty(x.numel() == 0, {&out, residual_out}, "rms_norm")) return call.nothing("rms_norm");
    ProblemKey<RmsNormProblem> key;
    RmsNormProblem& p = key.problem();
    set_rows("rms_norm", p, x, out);
    p.eps = to_float32(eps, "rms_norm", "eps");
    if (residual != nullptr) {
        residual->require_dims_of("rms_norm", x);
        residual_out->require_dims_of("rms_norm", x);
        p.residual = true;
        p.residual_stride = residual->row_stride();
    }
    RmsNorm& op = call.op<RmsNorm>(key);
    const TensorView w = weight.view();
    if (residual == nullptr) return call.finish(op, {x.rows_view(), w}, {out.rows_view()}, kRmsNormNames);
    return call.finish(op, {x.rows_view(), residual->rows_view(), w}, {out.rows_view(), residual_out->rows_view()},
                       kRmsNormNames);
}

py::object layer_norm(py::handle x_arg, py::handle weight_arg, py::handle bias_arg, py::handle out_arg, double eps,
                      py::handle stream) {
    Call call(stream);
    const PyTensor& x = call.tensor(x_arg, "x");
    const PyTensor& weight = call.tensor(weight_arg, "weight");
    const PyTensor& bias = call.tensor(bias_arg, "bias");
    const PyTensor& out = call.tensor(out_arg, "out");
    if (call.empty(x.numel() == 0, {&out}, "layer_norm")) return call.nothing("layer_norm");
    ProblemKey<LayerNormProblem> key;
    LayerNormProblem& p = key.problem();
    set_rows("layer_norm", p, x, out);
    p.eps = to_float32(eps, "layer_norm", "eps");
    return call.finish(call.op<LayerNorm>(key), {x.rows_view(), weight.view(), bias.view()}, {out.rows_view()},
                       kOutNamedY);
}

py::object softmax(py::handle x_arg, py::handle out_arg, bool log, py::handle stream) {
    Call call(stream);
    const PyTensor& x = call.tensor(x_arg, "x");
    const PyTensor& out = call.tensor(out_arg, "out");
    const char* name = log ? "log_softmax" : "softmax";
    if (call.empty(x.numel() == 0, {&out}, name)) return call.nothing(name);
    ProblemKey<SoftmaxProblem> key;
    SoftmaxProblem& p = key.problem();
    set_rows(name, p, x, out);
    p.log = log;
    return call.finish(call.op<Softmax>(key), {x.rows_view()}, {out.rows_view()}, kOutNamedY);
}

// b may be a row of the last dim's length (broadcast over a's rows) or a's shape.
py::object elementwise(ElementwiseOp which, py::handle a_arg, py::handle b_arg, py::handle out_arg, py::handle stream) {
    Call call(stream);
    const PyTensor& a = call.tensor(a_arg, "a");
    const PyTensor* b = call.optional(b_arg, "b");
    const PyTensor& out = call.tensor(out_arg, "out");
    if (is_binary(which) != (b != nullptr))
        throw InvalidArgument(fmt::format("tileops_jit.{}: {}", elementwise_op_name(which),
                                          is_binary(which) ? "needs b" : "takes no b"));
    if (call.empty(a.numel() == 0, {&out}, elementwise_op_name(which))) return call.nothing(elementwise_op_name(which));
    out.require_dims_of(elementwise_op_name(which), a, false);  // the last: halved by silu_mul
    ProblemKey<ElementwiseProblem> key;
    ElementwiseProblem& p = key.problem();
    p.op = which;
    p.rows = a.rows();
    p.cols = a.size(-1);
    p.dtype = a.dtype;
    if (out.dtype != a.dtype) p.out_dtype = out.dtype;
    p.a_stride = a.row_stride();
    p.y_stride = out.row_stride();
    if (b != nullptr) {
        p.broadcast_b = b->rank == 1 && a.rank > 1;
        if (!p.broadcast_b) {
            b->require_dims_of(elementwise_op_name(which), a);
            p.b_stride = b->row_stride();
        }
    }
    Elementwise& op = call.op<Elementwise>(key);
    if (b == nullptr) return call.finish(op, {a.rows_view()}, {out.rows_view()}, kOutNamedY);
    return call.finish(op, {a.rows_view(), p.broadcast_b ? b->view() : b->rows_view()}, {out.rows_view()},
                       kOutNamedY);
}

}  // namespace

void bind_rows(py::module_& m) {
    m.def("rms_norm", &rms_norm, py::arg("x"), py::arg("weight"), py::arg("out"), py::arg("residual") = py::none(),
          py::arg("residual_out") = py::none(), py::arg("eps") = 1e-6, TILEOPS_PY_CALL_ARGS);
    m.def("layer_norm", &layer_norm, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("out"),
          py::arg("eps") = 1e-5, TILEOPS_PY_CALL_ARGS);
    m.def("softmax", &softmax, py::arg("x"), py::arg("out"), py::arg("log") = false, TILEOPS_PY_CALL_ARGS);
    m.def("elementwise", &elementwise, py::arg("op"), py::arg("a"), py::arg("b"), py::arg("out"), TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
