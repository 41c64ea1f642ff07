// The quantize family: activations (bf16 / fp16) to fp8 e4m3 codes and fp32 scales.
#include <string>

#include "bindings.hpp"
#include "tileops/quantize.hpp"

namespace tileops::python {
namespace {

QuantizeScaling scaling_of(const std::string& name) {
    if (name == "per_token") return QuantizeScaling::per_token;
    if (name == "block_1x128") return QuantizeScaling::block_1x128;
    if (name == "per_tensor") return QuantizeScaling::per_tensor;
    throw InvalidArgument(fmt::format(
        "tileops_jit.quantize: scaling must be 'per_token', 'block_1x128' or 'per_tensor', got '{}'", name));
}

// q (the codes) and scales are the outputs; `scale`, when given, is a static per-tensor scale (an
// input) and then scales must be None.
// The codes as the package names them.
constexpr OperandName kQuantizeNames[] = {{"q", "out"}};

py::object quantize(py::handle x_arg, py::handle q_arg, py::handle scales_arg, py::handle scale_arg,
                    const std::string& scaling, py::handle stream) {
    Call call(stream);
    const QuantizeScaling kind = scaling_of(scaling);
    const PyTensor& x = call.tensor(x_arg, "x");
    const PyTensor& q = call.tensor(q_arg, "q");
    const PyTensor* scales = call.optional(scales_arg, "scales");
    const PyTensor* scale = call.optional(scale_arg, "scale");
    if (scale != nullptr && kind != QuantizeScaling::per_tensor)
        throw InvalidArgument("tileops_jit.quantize: scale (a static scale) applies to per_tensor scaling only");
    if ((scale == nullptr) == (scales == nullptr))
        throw InvalidArgument("tileops_jit.quantize: give scales (the scales to compute) or scale (a static "
                              "per-tensor scale), one of them");
    if (kind == QuantizeScaling::block_1x128 && scales->rank != 2)
        throw InvalidArgument(fmt::format("tileops_jit.quantize: block_1x128 scales must be [ceil(cols / 128), rows] "
                                          "(rank 2), got rank {}",
                                          scales->rank));
    // (A per-tensor scale of an empty x is not empty: the op refuses it.)
    if (call.empty(x.numel() == 0 && (scales == nullptr || scales->numel() == 0), {&q, scales}, "quantize"))
        return call.nothing("quantize");
    ProblemKey<QuantizeProblem> key;
    QuantizeProblem& p = key.problem();
    p.rows = x.rows();
    p.cols = x.size(-1);
    p.dtype = x.dtype;
    p.out_dtype = DType::fp8_e4m3;  // q's own dtype is checked against it, by name
    p.scaling = kind;
    p.static_scale = scale != nullptr;
    p.x_stride = x.row_stride();
    p.q_stride = q.row_stride();
    if (kind == QuantizeScaling::block_1x128 && scales->size(0) > 1) p.scale_stride = scales->stride(0);
    Quantize& op = call.op<Quantize>(key);
    if (scale != nullptr)
        return call.finish(op, {x.rows_view(), scale->vector_view()}, {q.rows_view()}, kQuantizeNames);
    const TensorView scales_view = kind == QuantizeScaling::block_1x128 ? scales->view() : scales->vector_view();
    return call.finish(op, {x.rows_view()}, {q.rows_view(), scales_view}, kQuantizeNames);
}

}  // namespace

void bind_quantize(py::module_& m) {
    m.def("quantize", &quantize, py::arg("x"), py::arg("q"), py::arg("scales") = py::none(),
          py::arg("scale") = py::none(), py::arg("scaling") = "per_token", TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
