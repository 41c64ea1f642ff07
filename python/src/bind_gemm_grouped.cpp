// The grouped GEMM: out[rows of group g] = act(alpha a[rows of g] @ b[g]), b logically [G, K, N]
// as torch._grouped_mm takes it; its memory decides the layout: K-contiguous (a transposed view of
// [G, N, K] weights) or N-contiguous.
#include "bindings.hpp"
#include "tileops/gemm_grouped.hpp"

namespace tileops::python {
namespace {

// a [rows, K] with offsets [G + 1] (contiguous) or [G, capacity, K] with counts [G] (masked);
// out like a with N for K.
py::object gemm_grouped(py::handle a_arg, py::handle b_arg, py::handle group_rows_arg, py::handle out_arg, bool masked,
                        float alpha, GemmEpilogue epilogue, py::handle stream) {
    Call call(stream);
    const PyTensor& a = call.tensor(a_arg, "a");
    const PyTensor& b = call.tensor(b_arg, "b");
    const PyTensor& group_rows = call.tensor(group_rows_arg, masked ? "counts" : "offsets");
    const PyTensor& out = call.tensor(out_arg, "out");
    if (b.rank != 3) throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: b must be [groups, K, N], got rank {}", b.rank));
    const int expected_rank = masked ? 3 : 2;
    if (a.rank != expected_rank || out.rank != expected_rank)
        throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: {} takes a and out of rank {} ({}), got {} and {}",
                                          masked ? "counts" : "offsets", expected_rank,
                                          masked ? "[groups, capacity, K] and [groups, capacity, N]" : "[rows, K] and [rows, N]",
                                          a.rank, out.rank));
    ProblemKey<GemmGroupedProblem> key;
    GemmGroupedProblem& p = key.problem();
    p.groups = b.size(0);
    p.k = b.size(1);
    p.n = b.size(2);
    if (a.size(-1) != p.k)
        throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: a's last dim ({}) must equal b's K ({})", a.size(-1), p.k));
    // b's memory: [G, N, K] rows (a transposed view: strides [.., 1, ldb]) or [G, K, N] rows.
    if (b.stride(1) == 1 && p.k > 1) {
        p.layout = GemmLayout::nt;
        p.ldb = b.stride(2);
    } else if (b.stride(2) == 1 || p.n == 1) {
        p.layout = GemmLayout::nn;
        p.ldb = b.stride(1);
    } else {
        throw InvalidArgument("tileops_jit.gemm_grouped: b must be contiguous along K (weights [G, N, K] seen as "
                              "[G, K, N]) or along N");
    }
    p.group_stride_b = b.stride(0);
    p.group_layout = masked ? GemmGroupLayout::masked : GemmGroupLayout::contiguous;
    if (a.stride(-1) != 1 && p.k > 1) throw InvalidArgument("tileops_jit.gemm_grouped: a must be contiguous in its last dim");
    if (out.stride(-1) != 1 && p.n > 1) throw InvalidArgument("tileops_jit.gemm_grouped: out must be contiguous in its last dim");
    if (masked) {
        if (a.size(0) != p.groups)
            throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: a has {} groups, b {}", a.size(0), p.groups));
        p.rows = a.size(1);
    } else {
        p.rows = a.size(0);
    }
    p.lda = a.stride(-2);
    p.ldd = out.stride(-2);
    p.dtype = a.dtype;
    p.out_dtype = out.dtype;
    p.alpha = alpha;
    p.epilogue = epilogue;
    GemmGrouped& op = call.op<GemmGrouped>(key);
    // B as the op sees its memory: [G, N, K] or [G, K, N] rows.
    TensorView b_view = b.view();
    if (p.layout == GemmLayout::nt) {
        std::swap(b_view.shape[1], b_view.shape[2]);
        std::swap(b_view.strides[1], b_view.strides[2]);
    }
    const TensorArg inputs[3] = {a.view(), b_view, group_rows.vector_view()};
    return call.finish(op, Inputs(inputs, 3), {OutputArg(out.view())});
}

}  // namespace

void bind_gemm_grouped(py::module_& m) {
    m.def("gemm_grouped", &gemm_grouped, py::arg("a"), py::arg("b"), py::arg("group_rows"), py::arg("out"),
          py::arg("masked") = false, py::arg("alpha") = 1.0f, py::arg("epilogue") = GemmEpilogue::none,
          TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
