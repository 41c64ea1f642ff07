// The grouped GEMMs: out[rows of group g] = act(alpha a[rows of g] @ b[g]), b logically [G, K, N]
// as torch._grouped_mm takes it; its memory decides the layout: K-contiguous (a transposed view of
// [G, N, K] weights) or N-contiguous (16-bit only). FP8: e4m3 codes with fp32 scales.
#include <string>

#include "bindings.hpp"
#include "tileops/gemm_fp8_grouped.hpp"
#include "tileops/gemm_grouped.hpp"

namespace tileops::python {
namespace {

// a [rows, K] with offsets [G + 1] (contiguous) or [G, capacity, K] with counts [G] (masked);
// out like a with N for K.
py::object gemm_grouped(py::handle a_arg, py::handle b_arg, py::handle group_rows_arg, py::handle out_arg, bool masked,
                        double alpha, GemmEpilogue epilogue, py::handle stream) {
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
    if (call.empty(p.rows == 0 || p.n == 0 || (masked && p.groups == 0), {&out}, "gemm_grouped"))
        return call.nothing("gemm_grouped");
    p.lda = a.stride(-2);
    p.ldd = out.stride(-2);
    p.dtype = a.dtype;
    p.out_dtype = out.dtype;
    p.alpha = to_float32(alpha, "gemm_grouped", "alpha");
    p.epilogue = epilogue;
    GemmGrouped& op = call.op<GemmGrouped>(key);
    // B as the op sees its memory: [G, N, K] or [G, K, N] rows.
    TensorView b_view = b.view();
    if (p.layout == GemmLayout::nt) {
        std::swap(b_view.shape[1], b_view.shape[2]);
        std::swap(b_view.strides[1], b_view.strides[2]);
    }
    const TensorArg inputs[3] = {a.view(), b_view, group_rows.vector_view()};
    return call.finish(op, Inputs(inputs, 3), {OutputArg(out.view())}, kGemmNames);
}

GemmFp8Scaling fp8_scaling_of(const std::string& name) {
    if (name == "tensor") return GemmFp8Scaling::per_tensor;
    if (name == "row") return GemmFp8Scaling::per_row;
    if (name == "block") return GemmFp8Scaling::blocks;
    throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: scaling must be 'tensor', 'row' or 'block', got '{}'", name));
}

// Whether `t` holds exactly `shape` contiguously (row-major).
bool contiguous_shape(const PyTensor& t, std::initializer_list<int64_t> shape) {
    if (t.rank != static_cast<int>(shape.size())) return false;
    int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
        const int64_t extent = *(shape.begin() + d);
        if (t.size(d) != extent || (extent > 1 && t.stride(d) != stride)) return false;
        stride *= extent;
    }
    return true;
}

// FP8: a and out as the 16-bit call takes them; b [G, K, N] contiguous along K (weights [G, N, K]
// of e4m3 as w.transpose(1, 2)); scales as GemmFp8Grouped reads them, block scales checked for
// their layout here (the op sees only their count).
py::object gemm_fp8_grouped(py::handle a_arg, py::handle b_arg, py::handle scales_a_arg, py::handle scales_b_arg,
                            py::handle group_rows_arg, py::handle out_arg, bool masked, const std::string& scaling,
                            double alpha, GemmEpilogue epilogue, py::handle stream) {
    Call call(stream);
    const PyTensor& a = call.tensor(a_arg, "a");
    const PyTensor& b = call.tensor(b_arg, "b");
    const PyTensor& scales_a = call.tensor(scales_a_arg, "scales_a");
    const PyTensor& scales_b = call.tensor(scales_b_arg, "scales_b");
    const PyTensor& group_rows = call.tensor(group_rows_arg, masked ? "counts" : "offsets");
    const PyTensor& out = call.tensor(out_arg, "out");
    const int expected_rank = masked ? 3 : 2;
    if (b.rank != 3 || a.rank != expected_rank || out.rank != expected_rank)
        throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: b must be [groups, K, N] and a, out of rank {}", expected_rank));
    ProblemKey<GemmFp8GroupedProblem> key;
    GemmFp8GroupedProblem& p = key.problem();
    p.groups = b.size(0);
    p.k = b.size(1);
    p.n = b.size(2);
    if (a.size(-1) != p.k)
        throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: a's last dim ({}) must equal b's K ({})", a.size(-1), p.k));
    if (b.stride(1) != 1 && p.k > 1)
        throw InvalidArgument("tileops_jit.gemm_grouped: an FP8 b must be contiguous along K (e4m3 weights [G, N, K] seen "
                              "as [G, K, N]): FP8 tensor cores read K-major operands");
    if (a.stride(-1) != 1 && p.k > 1) throw InvalidArgument("tileops_jit.gemm_grouped: a must be contiguous in its last dim");
    if (out.stride(-1) != 1 && p.n > 1) throw InvalidArgument("tileops_jit.gemm_grouped: out must be contiguous in its last dim");
    p.rows = masked ? a.size(1) : a.size(0);
    if (call.empty(p.rows == 0 || p.n == 0 || (masked && p.groups == 0), {&out}, "gemm_grouped"))
        return call.nothing("gemm_grouped");
    p.lda = a.stride(-2);
    p.ldb = b.stride(2);
    p.ldd = out.stride(-2);
    p.group_stride_b = b.stride(0);
    p.out_dtype = out.dtype;
    p.scaling = fp8_scaling_of(scaling);
    p.group_layout = masked ? GemmGroupLayout::masked : GemmGroupLayout::contiguous;
    p.alpha = to_float32(alpha, "gemm_grouped", "alpha");
    p.epilogue = epilogue;
    if (p.scaling == GemmFp8Scaling::blocks) {
        const int64_t k_blocks = (p.k + 127) / 128, n_blocks = (p.n + 127) / 128;
        const int64_t rows = masked ? p.groups * p.rows : p.rows;
        if (!contiguous_shape(scales_a, {k_blocks, rows}))
            throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: block scales_a must be [ceil(K / 128), rows] = [{}, {}] "
                                              "(contiguous, as tileops_jit.quantize's block_1x128 scales of a)", k_blocks, rows));
        if (!contiguous_shape(scales_b, {p.groups, n_blocks, k_blocks}))
            throw InvalidArgument(fmt::format("tileops_jit.gemm_grouped: block scales_b must be [groups, ceil(N / 128), "
                                              "ceil(K / 128)] = [{}, {}, {}] (contiguous)", p.groups, n_blocks, k_blocks));
    }
    GemmFp8Grouped& op = call.op<GemmFp8Grouped>(key);
    TensorView b_view = b.view();  // as the op sees its memory: [G, N, K] rows
    std::swap(b_view.shape[1], b_view.shape[2]);
    std::swap(b_view.strides[1], b_view.strides[2]);
    const TensorArg inputs[5] = {a.view(), b_view, scales_a.vector_view(), scales_b.vector_view(), group_rows.vector_view()};
    return call.finish(op, Inputs(inputs, 5), {OutputArg(out.view())}, kGemmNames);
}

}  // namespace

void bind_gemm_grouped(py::module_& m) {
    m.def("gemm_fp8_grouped", &gemm_fp8_grouped, py::arg("a"), py::arg("b"), py::arg("scales_a"), py::arg("scales_b"),
          py::arg("group_rows"), py::arg("out"), py::arg("masked") = false, py::arg("scaling") = "tensor",
          py::arg("alpha") = 1.0, py::arg("epilogue") = GemmEpilogue::none, TILEOPS_PY_CALL_ARGS);
    m.def("gemm_grouped", &gemm_grouped, py::arg("a"), py::arg("b"), py::arg("group_rows"), py::arg("out"),
          py::arg("masked") = false, py::arg("alpha") = 1.0, py::arg("epilogue") = GemmEpilogue::none,
          TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
