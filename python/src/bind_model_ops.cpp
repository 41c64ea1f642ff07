// The ops between a model's GEMMs and attention: embedding, rope (with the KV-cache append) and
// sampling.
#include "bindings.hpp"

#include "tileops/embedding.hpp"
#include "tileops/rope.hpp"
#include "tileops/sampling.hpp"

namespace tileops::python {
namespace {

py::object embedding(py::handle ids_arg, py::handle table_arg, py::handle out_arg, py::handle positions_arg,
                     py::handle position_table_arg, py::handle stream) {
    Call call(stream);
    const PyTensor& ids = call.tensor(ids_arg, "ids");
    const PyTensor& table = call.tensor(table_arg, "table");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* positions = call.optional(positions_arg, "positions");
    const PyTensor* position_table = call.optional(position_table_arg, "position_table");
    if ((positions == nullptr) != (position_table == nullptr))
        throw InvalidArgument("tileops_jit.embedding: positions and position_table go together");
    if (table.rank != 2) throw InvalidArgument("tileops_jit.embedding: table must be [vocab, hidden]");
    if (call.empty(ids.numel() == 0 || table.size(1) == 0, {&out}, "embedding")) return call.nothing("embedding");
    ProblemKey<EmbeddingProblem> key;
    EmbeddingProblem& p = key.problem();
    p.num_tokens = ids.numel();
    p.vocab_size = table.size(0);
    p.hidden = table.size(1);
    p.dtype = table.dtype;
    if (out.dtype != table.dtype) p.out_dtype = out.dtype;
    p.table_stride = table.row_stride();
    p.out_stride = out.row_stride();
    if (position_table != nullptr) {
        if (position_table->rank != 2)
            throw InvalidArgument("tileops_jit.embedding: position_table must be [max_positions, hidden]");
        p.positions = true;
        p.max_positions = position_table->size(0);
    }
    Embedding& op = call.op<Embedding>(key);
    if (positions == nullptr)
        return call.finish(op, {ids.vector_view(), table.rows_view()}, {out.rows_view()}, kOutNamedY);
    return call.finish(op,
                       {ids.vector_view(), table.rows_view(), positions->vector_view(), position_table->rows_view()},
                       {out.rows_view()}, kOutNamedY);
}

py::object rope(py::handle q_arg, py::handle k_arg, py::handle positions_arg, py::handle q_out_arg,
                py::handle k_out_arg, py::handle v_arg, py::handle slots_arg, py::handle k_cache_arg,
                py::handle v_cache_arg, double theta, RopeStyle style, int64_t rotary_dim, const RopeScaling& scaling,
                double k_scale, double v_scale, py::handle stream) {
    Call call(stream);
    const PyTensor& q = call.tensor(q_arg, "q");
    const PyTensor& k = call.tensor(k_arg, "k");
    const PyTensor& positions = call.tensor(positions_arg, "positions");
    const PyTensor& q_out = call.tensor(q_out_arg, "q_out");
    const PyTensor& k_out = call.tensor(k_out_arg, "k_out");
    const PyTensor* v = call.optional(v_arg, "v");
    const PyTensor* slots = call.optional(slots_arg, "slots");
    const PyTensor* k_cache = call.optional(k_cache_arg, "k_cache");
    const PyTensor* v_cache = call.optional(v_cache_arg, "v_cache");
    const int appended = (v != nullptr) + (slots != nullptr) + (k_cache != nullptr) + (v_cache != nullptr);
    if (appended != 0 && appended != 4)
        throw InvalidArgument("tileops_jit.rope: the KV-cache append needs v, slots, k_cache and v_cache together");
    for (const PyTensor* t : {&q, &k, &q_out, &k_out, v})
        if (t != nullptr && t->rank != 3)
            throw InvalidArgument(fmt::format("tileops_jit.rope: {} must be [tokens, heads, head_dim], got rank {}",
                                              t->name, t->rank));
    // No token: nothing to rotate, nothing to append.
    if (call.empty(q.size(0) == 0 && k.size(0) == 0, {&q_out, &k_out}, "rope")) return call.nothing("rope");
    ProblemKey<RopeProblem> key;
    RopeProblem& p = key.problem();
    p.num_tokens = q.size(0);
    p.num_heads = q.size(1);
    p.num_kv_heads = k.size(1);
    p.head_dim = q.size(2);
    p.rotary_dim = rotary_dim;
    p.style = style;
    p.theta = theta;
    // Field by field: a struct copy may carry the source's padding bytes into the key.
    p.scaling.type = scaling.type;
    p.scaling.factor = scaling.factor;
    p.scaling.low_freq_factor = scaling.low_freq_factor;
    p.scaling.high_freq_factor = scaling.high_freq_factor;
    p.scaling.original_max_positions = scaling.original_max_positions;
    p.dtype = q.dtype;
    p.q_stride = q.stride(0), p.k_stride = k.stride(0);
    p.q_out_stride = q_out.stride(0), p.k_out_stride = k_out.stride(0);
    if (k_cache != nullptr) {
        if (k_cache->rank != 4)
            throw InvalidArgument("tileops_jit.rope: k_cache must be [num_pages, page_size, kv_heads, head_dim]");
        p.append_kv = true;
        p.v_stride = v->stride(0);
        p.page_size = k_cache->size(1);
        p.num_pages = k_cache->size(0);
        if (k_cache->dtype != q.dtype) p.kv_dtype = k_cache->dtype;
        p.k_scale = to_float32(k_scale, "rope", "k_scale");
        p.v_scale = to_float32(v_scale, "rope", "v_scale");
        p.cache_page_stride = k_cache->stride(0);
        p.cache_token_stride = k_cache->stride(1);
        p.cache_head_stride = k_cache->stride(2);
    }
    Rope& op = call.op<Rope>(key);
    if (k_cache == nullptr)
        return call.finish(op, {q.view(), k.view(), positions.vector_view()}, {q_out.view(), k_out.view()});
    return call.finish(op, {q.view(), k.view(), v->view(), positions.vector_view(), slots->vector_view()},
                       {q_out.view(), k_out.view(), k_cache->view(), v_cache->view()});
}

// The sampled tokens as the package names them.
constexpr OperandName kSampleNames[] = {{"tokens", "out"}};

py::object sample(py::handle logits_arg, py::handle out_arg, py::handle temperature_arg, py::handle top_k_arg,
                  py::handle top_p_arg, py::handle min_p_arg, py::handle offsets_arg, uint64_t seed, py::handle stream) {
    Call call(stream);
    const PyTensor& logits = call.tensor(logits_arg, "logits");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* parameters[5] = {call.optional(temperature_arg, "temperature"), call.optional(top_k_arg, "top_k"),
                                     call.optional(top_p_arg, "top_p"), call.optional(min_p_arg, "min_p"),
                                     call.optional(offsets_arg, "offsets")};
    int given = 0;
    for (const PyTensor* t : parameters) given += t != nullptr;
    if (given != 0 && given != 5)
        throw InvalidArgument("tileops_jit.sample: temperature, top_k, top_p, min_p and offsets go together "
                              "(none of them: greedy)");
    if (call.empty(logits.rank >= 1 && logits.rows() == 0, {&out}, "sample")) return call.nothing("sample");
    ProblemKey<SamplingProblem> key;
    SamplingProblem& p = key.problem();
    p.batch = logits.rows();
    p.vocab_size = logits.size(-1);
    p.dtype = logits.dtype;
    p.logits_stride = logits.row_stride();
    p.greedy = given == 0;
    p.seed = p.greedy ? 0 : seed;
    Sampling& op = call.op<Sampling>(key);
    if (p.greedy) return call.finish(op, {logits.rows_view()}, {out.vector_view()}, kSampleNames);
    return call.finish(op,
                       {logits.rows_view(), parameters[0]->vector_view(), parameters[1]->vector_view(),
                        parameters[2]->vector_view(), parameters[3]->vector_view(), parameters[4]->vector_view()},
                       {out.vector_view()}, kSampleNames);
}

}  // namespace

void bind_model_ops(py::module_& m) {
    m.def("embedding", &embedding, py::arg("ids"), py::arg("table"), py::arg("out"), py::arg("positions") = py::none(),
          py::arg("position_table") = py::none(), TILEOPS_PY_CALL_ARGS);
    m.def("rope", &rope, py::arg("q"), py::arg("k"), py::arg("positions"), py::arg("q_out"), py::arg("k_out"),
          py::arg("v") = py::none(), py::arg("slots") = py::none(), py::arg("k_cache") = py::none(),
          py::arg("v_cache") = py::none(), py::arg("theta") = 10000.0, py::arg("style") = RopeStyle::neox,
          py::arg("rotary_dim") = 0, py::arg("scaling") = RopeScaling{}, py::arg("k_scale") = 1.0,
          py::arg("v_scale") = 1.0, TILEOPS_PY_CALL_ARGS);
    m.def("sample", &sample, py::arg("logits"), py::arg("out"), py::arg("temperature") = py::none(),
          py::arg("top_k") = py::none(), py::arg("top_p") = py::none(), py::arg("min_p") = py::none(),
          py::arg("offsets") = py::none(), py::arg("seed") = 0, TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
