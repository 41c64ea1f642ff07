// The FP8 GEMM: out = act(alpha (a x scales_a) (b x scales_b)^T + beta c + bias), a [.., M, K] and
// b [N, K] of e4m3 codes (b in a linear layer's weight layout), fp32 scales.
#include <string>

#include "bindings.hpp"
#include "tileops/gemm_fp8.hpp"

namespace tileops::python {
namespace {

GemmFp8Scaling scaling_of(const std::string& name) {
    if (name == "tensor") return GemmFp8Scaling::per_tensor;
    if (name == "row") return GemmFp8Scaling::per_row;
    if (name == "block") return GemmFp8Scaling::blocks;
    throw InvalidArgument(
        fmt::format("tileops_jit.gemm_fp8: scaling must be 'tensor', 'row' or 'block', got '{}'", name));
}

int64_t ceil_128(int64_t n) { return (n + 127) / 128; }

// Whether `t` is [rows, cols] with the strides of a row-major matrix (a dim of size 1 takes any
// stride), or, with `transposed`, the transpose of one: [cols, rows] with strides [1, cols].
bool packed_matrix(const PyTensor& t, int64_t rows, int64_t cols, bool transposed) {
    if (t.rank != 2) return false;
    const int row_dim = transposed ? 1 : 0, col_dim = transposed ? 0 : 1;
    return t.size(row_dim) == rows && t.size(col_dim) == cols && (rows <= 1 || t.stride(row_dim) == cols) &&
           (cols <= 1 || t.stride(col_dim) == 1);
}

// Block scales as the vector the op reads. The op checks only their count; the layout is checked
// here, since a transposed tensor of the same count would be read without complaint. scales_a:
// [ceil(K / 128), M] (as tileops_jit.quantize's block_1x128 scales), or the same memory seen as
// [M, ceil(K / 128)] with strides [1, M] (MN-major, as other FP8 GEMMs take them); scales_b:
// [ceil(N / 128), ceil(K / 128)], row-major.
TensorView block_scales_view(const PyTensor& t, bool of_a, int64_t m, int64_t n, int64_t k) {
    const int64_t k_blocks = ceil_128(k);
    const bool fits = of_a ? packed_matrix(t, k_blocks, m, false) || packed_matrix(t, k_blocks, m, true)
                           : packed_matrix(t, ceil_128(n), k_blocks, false);
    if (!fits) {
        const std::string got = t.rank == 2 ? fmt::format("shape [{}, {}], strides [{}, {}]", t.size(0), t.size(1),
                                                          t.stride(0), t.stride(1))
                                            : fmt::format("rank {}", t.rank);
        if (of_a)
            throw InvalidArgument(fmt::format("tileops_jit.gemm_fp8: block scales_a must be [ceil(K / 128), M] = "
                                              "[{}, {}] (contiguous), or its transpose [{}, {}] with strides [1, {}]; "
                                              "got {}",
                                              k_blocks, m, m, k_blocks, m, got));
        throw InvalidArgument(fmt::format("tileops_jit.gemm_fp8: block scales_b must be [ceil(N / 128), "
                                          "ceil(K / 128)] = [{}, {}] (contiguous); got {}",
                                          ceil_128(n), k_blocks, got));
    }
    TensorView v;
    v.data = t.data;
    v.dtype = t.dtype;
    v.rank = 1;
    v.shape[0] = t.numel();
    v.strides[0] = 1;
    return v;
}

// a: [..., M, K] (leading dims folded into M) or, with b [batch, N, K], [batch, M, K]; out and c
// like a with N for K; bias [N].
py::object gemm_fp8(py::handle a_arg, py::handle b_arg, py::handle scales_a_arg, py::handle scales_b_arg,
                    py::handle out_arg, py::handle c_arg, py::handle bias_arg, const std::string& scaling, double alpha,
                    double beta, GemmEpilogue epilogue, py::handle stream) {
    Call call(stream);
    const GemmFp8Scaling kind = scaling_of(scaling);
    const PyTensor& a = call.tensor(a_arg, "a");
    const PyTensor& b = call.tensor(b_arg, "b");
    const PyTensor& scales_a = call.tensor(scales_a_arg, "scales_a");
    const PyTensor& scales_b = call.tensor(scales_b_arg, "scales_b");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* c = call.optional(c_arg, "c");
    const PyTensor* bias = call.optional(bias_arg, "bias");
    if (b.rank != 2 && b.rank != 3)
        throw InvalidArgument(
            fmt::format("tileops_jit.gemm_fp8: b must be [N, K] or [batch, N, K], got rank {}", b.rank));
    if (b.rank == 3 && (a.rank != 3 || out.rank != 3 || (c != nullptr && c->rank != 3)))
        throw InvalidArgument("tileops_jit.gemm_fp8: a batched b ([batch, N, K]) needs a, out (and c) of rank 3");
    if (a.rank < 2) throw InvalidArgument("tileops_jit.gemm_fp8: a must have rank 2 or more ([..., M, K])");
    // A batch of one is a plain GEMM: its operands are their rows.
    const bool batched = b.rank == 3 && b.size(0) > 1;

    ProblemKey<GemmFp8Problem> key;
    GemmFp8Problem& p = key.problem();
    p.n = b.size(-2);
    p.k = b.size(-1);
    if (a.size(-1) != p.k)
        throw InvalidArgument(
            fmt::format("tileops_jit.gemm_fp8: a's last dim ({}) must equal b's K ({})", a.size(-1), p.k));
    if (a.stride(-1) != 1 && p.k > 1)
        throw InvalidArgument("tileops_jit.gemm_fp8: a must be contiguous in its last dim");
    if (b.stride(-1) != 1 && p.k > 1)
        throw InvalidArgument("tileops_jit.gemm_fp8: b ([N, K], a linear layer's weight layout) must be contiguous "
                              "in its last dim");
    if (out.stride(-1) != 1 && p.n > 1)
        throw InvalidArgument("tileops_jit.gemm_fp8: out must be contiguous in its last dim");
    const int64_t m = batched ? a.size(1) : a.rows();
    if (call.empty(m == 0 || p.n == 0 || (b.rank == 3 && b.size(0) == 0), {&out}, "gemm_fp8"))
        return call.nothing("gemm_fp8");
    if (batched) {
        p.batch = b.size(0);
        p.m = a.size(1);
        p.lda = a.stride(1);
        p.ldb = b.stride(1);
        p.ldd = out.stride(1);
        p.batch_stride_a = a.stride(0);
        p.batch_stride_b = b.stride(0);
        p.batch_stride_d = out.stride(0);
    } else {
        p.m = a.rows();
        p.lda = a.row_stride();
        p.ldb = b.row_stride();
        p.ldd = out.row_stride();
    }
    p.out_dtype = out.dtype;
    p.scaling = kind;
    p.alpha = to_float32(alpha, "gemm_fp8", "alpha");
    p.beta = to_float32(beta, "gemm_fp8", "beta");
    p.has_c = c != nullptr;
    if (c != nullptr) {
        p.ldc = batched ? c->stride(1) : c->row_stride();
        if (batched) p.batch_stride_c = c->stride(0);
    }
    p.bias = bias != nullptr;
    p.epilogue = epilogue;
    GemmFp8& op = call.op<GemmFp8>(key);

    TensorView views[6];
    size_t count = 0;
    views[count++] = batched ? a.view() : a.rows_view();
    views[count++] = batched ? b.view() : b.rows_view();
    if (kind == GemmFp8Scaling::blocks) {
        views[count++] = block_scales_view(scales_a, true, p.m, p.n, p.k);
        views[count++] = block_scales_view(scales_b, false, p.m, p.n, p.k);
    } else {
        views[count++] = scales_a.vector_view();
        views[count++] = scales_b.vector_view();
    }
    if (c != nullptr) views[count++] = batched ? c->view() : c->rows_view();
    if (bias != nullptr) views[count++] = bias->view();
    const TensorArg inputs[6] = {views[0], views[1], views[2], views[3], views[4], views[5]};
    const OutputArg d = batched ? out.view() : out.rows_view();
    return call.finish(op, Inputs(inputs, count), {d}, kGemmNames);
}

}  // namespace

void bind_gemm_fp8(py::module_& m) {
    m.def("gemm_fp8", &gemm_fp8, py::arg("a"), py::arg("b"), py::arg("scales_a"), py::arg("scales_b"), py::arg("out"),
          py::arg("c") = py::none(), py::arg("bias") = py::none(), py::arg("scaling") = "tensor",
          py::arg("alpha") = 1.0, py::arg("beta") = 0.0, py::arg("epilogue") = GemmEpilogue::none,
          TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
