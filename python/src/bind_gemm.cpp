// gemm: out = act(alpha a b + beta c + bias). b's strides say its layout: row-major [K, N] runs
// as "nn", a transposed view of a row-major [N, K] (a linear layer's weight.T) as "nt".
#include "bindings.hpp"

#include "tileops/gemm.hpp"

namespace tileops::python {
namespace {

// The matrix `t` holds, as its own dims say: [rows, cols] (leading dims collapsed into rows) or,
// batched, [batch, rows, cols]; `transposed` reads the last two dims the other way round (b in
// "nt": a row-major [N, K] seen through its transpose). The stride along cols is the tensor's
// own, so that the op refuses a view that is not contiguous along them.
TensorView matrix_view(const PyTensor& t, bool batched, bool transposed = false) {
    if (!batched && !transposed) return t.rows_view();
    TensorView v;
    v.data = t.data;
    v.dtype = t.dtype;
    const int64_t rows = transposed ? t.size(-1) : t.size(-2), cols = transposed ? t.size(-2) : t.size(-1);
    const int64_t ld = transposed ? t.stride(-1) : t.stride(-2);
    const int64_t inner = cols == 1 ? 1 : transposed ? t.stride(-2) : t.stride(-1);
    if (batched) {
        v.rank = 3;
        v.shape = {t.size(0), rows, cols, 0};
        v.strides = {t.stride(0), ld, inner, 0};
    } else {
        v.rank = 2;
        v.shape = {rows, cols, 0, 0};
        v.strides = {ld, inner, 0, 0};
    }
    return v;
}

py::object gemm(py::handle a_arg, py::handle b_arg, py::handle out_arg, py::handle c_arg, py::handle bias_arg,
                double alpha, double beta, GemmEpilogue epilogue, py::handle stream) {
    Call call(stream);
    const PyTensor& a = call.tensor(a_arg, "a");
    const PyTensor& b = call.tensor(b_arg, "b");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* c = call.optional(c_arg, "c");
    const PyTensor* bias = call.optional(bias_arg, "bias");
    if (b.rank != 2 && b.rank != 3)
        throw InvalidArgument(fmt::format("tileops_jit.matmul: b must be [K, N] or [batch, K, N], got rank {}", b.rank));
    const bool batched = b.rank == 3;
    if (batched && (a.rank != 3 || out.rank != 3))
        throw InvalidArgument("tileops_jit.matmul: a batched b ([batch, K, N]) needs a and out of rank 3");
    if (a.rank < 2 && !batched) throw InvalidArgument("tileops_jit.matmul: a must have rank 2 or more ([..., M, K])");

    ProblemKey<GemmProblem> key;
    GemmProblem& p = key.problem();
    p.k = b.size(-2);
    p.n = b.size(-1);
    p.dtype = a.dtype;
    if (out.dtype != a.dtype) p.out_dtype = out.dtype;
    // b: row-major [K, N] (nn) or the transpose of a row-major [N, K] (nt).
    if (b.stride(-1) == 1 || p.n == 1) {
        p.layout = GemmLayout::nn;
        p.ldb = p.k == 1 ? p.n : b.stride(-2);
    } else if (b.stride(-2) == 1 || p.k == 1) {
        p.layout = GemmLayout::nt;
        p.ldb = b.stride(-1);
    } else {
        throw InvalidArgument(fmt::format("tileops_jit.matmul: b (strides {}, {}) must be contiguous in one of its last "
                                          "two dims",
                                          b.stride(-2), b.stride(-1)));
    }
    if (batched) {
        p.batch = b.size(0);
        p.m = a.size(1);
        p.lda = a.stride(1);
        p.ldd = out.stride(1);
        p.batch_stride_a = a.stride(0);
        p.batch_stride_b = b.stride(0);
        p.batch_stride_d = out.stride(0);
    } else {
        p.m = a.rows();
        p.lda = a.row_stride();
        p.ldd = out.row_stride();
    }
    if (a.size(-1) != p.k)
        throw InvalidArgument(fmt::format("tileops_jit.matmul: a's last dim ({}) must equal b's K ({})", a.size(-1), p.k));
    if (a.stride(-1) != 1 && p.k > 1) throw InvalidArgument("tileops_jit.matmul: a must be contiguous in its last dim");
    if (out.stride(-1) != 1 && p.n > 1) throw InvalidArgument("tileops_jit.matmul: out must be contiguous in its last dim");
    // No rows or no columns (K = 0 is not empty: out = beta c + bias).
    if (call.empty(p.m == 0 || p.n == 0 || (batched && p.batch == 0), {&out}, "matmul")) return call.nothing("matmul");
    p.alpha = to_float32(alpha, "matmul", "alpha");
    p.beta = to_float32(beta, "matmul", "beta");
    p.has_c = c != nullptr;
    if (c != nullptr) {
        if (batched && c->rank != 3)
            throw InvalidArgument(fmt::format("tileops_jit.matmul: with a batched b, c must be [batch, M, N], got rank {}",
                                              c->rank));
        p.ldc = batched ? c->stride(1) : c->row_stride();
        if (batched) p.batch_stride_c = c->stride(0);
    }
    p.bias = bias != nullptr;
    p.epilogue = epilogue;
    Gemm& op = call.op<Gemm>(key);

    TensorView views[4];
    size_t count = 0;
    views[count++] = matrix_view(a, batched);
    views[count++] = matrix_view(b, batched, p.layout == GemmLayout::nt);
    if (c != nullptr) views[count++] = matrix_view(*c, batched);
    if (bias != nullptr) views[count++] = bias->view();
    const TensorArg inputs[4] = {views[0], views[1], views[2], views[3]};
    const OutputArg d = matrix_view(out, batched);
    return call.finish(op, Inputs(inputs, count), {d}, kGemmNames);
}

}  // namespace

void bind_gemm(py::module_& m) {
    m.def("gemm", &gemm, py::arg("a"), py::arg("b"), py::arg("out"), py::arg("c") = py::none(),
          py::arg("bias") = py::none(), py::arg("alpha") = 1.0, py::arg("beta") = 0.0,
          py::arg("epilogue") = GemmEpilogue::none, TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
