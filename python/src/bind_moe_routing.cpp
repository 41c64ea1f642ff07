// The MoE routing family: the router's top-k, the permute into expert order, the weighted
// unpermute.
#include <string>

#include "bindings.hpp"
#include "tileops/moe_routing.hpp"

namespace tileops::python {
namespace {

MoeScoring scoring_of(const std::string& name) {
    if (name == "softmax") return MoeScoring::softmax;
    if (name == "sigmoid") return MoeScoring::sigmoid;
    throw InvalidArgument(fmt::format("tileops_jit.moe_topk: scoring must be 'softmax' or 'sigmoid', got '{}'", name));
}

py::object moe_topk(py::handle logits_arg, py::handle weights_arg, py::handle ids_arg, py::handle bias_arg, int64_t k,
                    const std::string& scoring, bool renormalize, double routed_scaling_factor, int64_t n_group,
                    int64_t topk_group, py::handle stream) {
    Call call(stream);
    const MoeScoring kind = scoring_of(scoring);
    const PyTensor& logits = call.tensor(logits_arg, "logits");
    const PyTensor& weights = call.tensor(weights_arg, "topk_weights");
    const PyTensor& ids = call.tensor(ids_arg, "topk_ids");
    const PyTensor* bias = call.optional(bias_arg, "correction_bias");
    if (call.empty(logits.rank >= 1 && logits.rows() == 0, {&weights, &ids}, "moe_topk")) return call.nothing("moe_topk");
    ProblemKey<MoeTopKProblem> key;
    MoeTopKProblem& p = key.problem();
    p.tokens = logits.rows();
    p.experts = logits.size(-1);
    p.k = k;
    p.dtype = logits.dtype;
    p.scoring = kind;
    p.renormalize = renormalize;
    p.routed_scaling_factor = to_float32(routed_scaling_factor, "moe_topk", "routed_scaling_factor");
    p.n_group = n_group;
    p.topk_group = topk_group;
    p.correction_bias = bias != nullptr;
    p.logits_stride = logits.row_stride();
    MoeTopK& op = call.op<MoeTopK>(key);
    if (bias != nullptr)
        return call.finish(op, {logits.rows_view(), bias->vector_view()}, {weights.rows_view(), ids.rows_view()});
    return call.finish(op, {logits.rows_view()}, {weights.rows_view(), ids.rows_view()});
}

// capacity 0: the contiguous layout (out [tokens * k, hidden], expert_info the offsets); else
// masked (out [experts, capacity, hidden], expert_info the counts). x_scales and perm_scales, both
// or neither: fp8 rows' scales, [tokens] and [rows] (one a token), or [blocks, tokens] and
// [blocks, rows] (1 x 128 blocks, block-major as quantize writes them).
py::object moe_permute(py::handle x_arg, py::handle ids_arg, py::handle out_arg, py::handle info_arg,
                       py::handle row_map_arg, py::handle scales_arg, py::handle perm_scales_arg, int64_t num_experts,
                       int64_t capacity, py::handle stream) {
    if (capacity < 0)
        throw InvalidArgument(fmt::format("tileops_jit.moe_permute: capacity must be at least 1 (0 here: the contiguous "
                                          "layout), got {}",
                                          capacity));
    Call call(stream);
    const PyTensor* scales = call.optional(scales_arg, "x_scales");
    const PyTensor* perm_scales = call.optional(perm_scales_arg, "perm_scales");
    if ((scales == nullptr) != (perm_scales == nullptr))
        throw InvalidArgument("tileops_jit.moe_permute: give x_scales and perm_scales together, or neither");
    if (scales != nullptr && (scales->rank > 2 || scales->rank != perm_scales->rank))
        throw InvalidArgument(fmt::format("tileops_jit.moe_permute: x_scales and perm_scales must both be [tokens] and "
                                          "[rows] (a scale a token) or [blocks, tokens] and [blocks, rows], got ranks "
                                          "{} and {}",
                                          scales->rank, perm_scales->rank));
    const PyTensor& x = call.tensor(x_arg, "x");
    const PyTensor& ids = call.tensor(ids_arg, "topk_ids");
    const PyTensor& out = call.tensor(out_arg, capacity > 0 ? "x_masked" : "x_perm");
    const PyTensor& info = call.tensor(info_arg, capacity > 0 ? "expert_counts" : "expert_offsets");
    const PyTensor& row_map = call.tensor(row_map_arg, "row_map");
    if (capacity > 0 && out.rank != 3)
        throw InvalidArgument(fmt::format("tileops_jit.moe_permute: the masked x_masked must be [experts, capacity, "
                                          "hidden] (rank 3), got rank {}",
                                          out.rank));
    ProblemKey<MoePermuteProblem> key;
    MoePermuteProblem& p = key.problem();
    p.tokens = x.rows();
    p.hidden = x.size(-1);
    p.experts = num_experts;
    p.k = ids.size(-1);
    p.dtype = x.dtype;
    p.layout = capacity > 0 ? MoeLayout::masked : MoeLayout::contiguous;
    p.capacity = capacity;
    p.x_stride = x.row_stride();
    p.out_stride = capacity > 0 ? out.stride(-2) : out.row_stride();
    if (scales != nullptr) {
        p.scale_blocks = scales->rank == 2 ? scales->size(0) : 1;
        if (scales->rank == 2 && scales->size(0) > 1) p.scales_stride = scales->stride(0);
    }
    MoePermute& op = call.op<MoePermute>(key);
    const TensorView out_view = capacity > 0 ? out.view() : out.rows_view();
    if (scales == nullptr)
        return call.finish(op, {x.rows_view(), ids.rows_view()}, {out_view, info.vector_view(), row_map.rows_view()});
    // One scale a row is a vector to the op, also as quantize's [1, tokens] block scales of rows of
    // at most 128 elements.
    const bool blocks = p.scale_blocks > 1;
    return call.finish(op, {x.rows_view(), ids.rows_view(), blocks ? scales->view() : scales->vector_view()},
                       {out_view, info.vector_view(), row_map.rows_view(),
                        blocks ? perm_scales->view() : perm_scales->vector_view()});
}

// y: [tokens * k, hidden], or the masked [experts, capacity, hidden] (its rows folded).
py::object moe_unpermute(py::handle y_arg, py::handle row_map_arg, py::handle weights_arg, py::handle out_arg,
                         bool accumulate, py::handle stream) {
    Call call(stream);
    const PyTensor& y = call.tensor(y_arg, "y");
    const PyTensor& row_map = call.tensor(row_map_arg, "row_map");
    const PyTensor& weights = call.tensor(weights_arg, "topk_weights");
    const PyTensor& out = call.tensor(out_arg, "out");
    if (call.empty(row_map.rank >= 1 && row_map.rows() == 0, {&out}, "moe_unpermute"))
        return call.nothing("moe_unpermute");
    ProblemKey<MoeUnpermuteProblem> key;
    MoeUnpermuteProblem& p = key.problem();
    p.tokens = row_map.rows();
    p.hidden = y.size(-1);
    p.k = row_map.size(-1);
    p.dtype = y.dtype;
    p.y_rows = y.rows();
    p.accumulate = accumulate;
    p.y_stride = y.row_stride();
    p.out_stride = out.row_stride();
    MoeUnpermute& op = call.op<MoeUnpermute>(key);
    return call.finish(op, {y.rows_view(), row_map.rows_view(), weights.rows_view()}, {out.rows_view()});
}

}  // namespace

void bind_moe_routing(py::module_& m) {
    m.def("moe_topk", &moe_topk, py::arg("logits"), py::arg("topk_weights"), py::arg("topk_ids"),
          py::arg("correction_bias"), py::arg("k"), py::arg("scoring"), py::arg("renormalize"),
          py::arg("routed_scaling_factor"), py::arg("n_group"), py::arg("topk_group"), TILEOPS_PY_CALL_ARGS);
    m.def("moe_permute", &moe_permute, py::arg("x"), py::arg("topk_ids"), py::arg("out"), py::arg("expert_info"),
          py::arg("row_map"), py::arg("x_scales"), py::arg("perm_scales"), py::arg("num_experts"), py::arg("capacity"),
          TILEOPS_PY_CALL_ARGS);
    m.def("moe_unpermute", &moe_unpermute, py::arg("y"), py::arg("row_map"), py::arg("topk_weights"), py::arg("out"),
          py::arg("accumulate"), TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
