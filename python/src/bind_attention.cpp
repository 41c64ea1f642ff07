// flash_attention (prefill, varlen), decode_attention (contiguous or paged KV, fp8 KV) and
// mla_decode. Strides come from the tensors; the ops check every tensor's shape against the
// problem, so a mismatch is reported by the op, naming the tensor and the expected dims.
#include "bindings.hpp"

#include <initializer_list>

#include "tileops/decode_attention.hpp"
#include "tileops/flash_attention.hpp"
#include "tileops/mla_decode.hpp"

namespace tileops::python {
namespace {

// The decode ops take [batch, q_len, heads, dim]; a [batch, heads, dim] tensor is one query token.
TensorView with_tokens(const PyTensor& t, int rank) {
    TensorView v = t.view();
    if (t.rank != rank - 1) return v;
    v.rank = rank;
    for (int d = rank - 1; d >= 2; --d) {
        v.shape[static_cast<size_t>(d)] = v.shape[static_cast<size_t>(d - 1)];
        v.strides[static_cast<size_t>(d)] = v.strides[static_cast<size_t>(d - 1)];
    }
    v.shape[1] = 1;
    v.strides[1] = v.strides[2] * v.shape[2];
    return v;
}

void require_rank(const PyTensor& t, int rank, const char* op, const char* dims) {
    if (t.rank != rank)
        throw InvalidArgument(fmt::format("tileops_jit.{}: {} must be {} (rank {}), got rank {}", op, t.name, dims, rank,
                                          t.rank));
}

// What decode_attention and mla_decode share: the query tokens and output rows (views of rank 4),
// the extent and strides of a contiguous or paged cache, max_kv_len defaulting to what it holds.
template <class P>
void set_decode_layout(P& p, const TensorView& q, const TensorView& out, const PyTensor& cache,
                       const PyTensor* page_table, int64_t max_kv_len, const char* op) {
    p.batch = q.shape[0];
    p.q_len = q.shape[1];
    p.num_heads = q.shape[2];
    if (page_table != nullptr) {
        if (page_table->rank != 2)
            throw InvalidArgument(fmt::format("tileops_jit.{}: page_table must be [batch, max_pages_per_seq]", op));
        p.page_size = cache.size(1);
        p.num_pages = cache.size(0);
        p.max_pages_per_seq = page_table->size(1);
        p.max_kv_len = max_kv_len > 0 ? max_kv_len : p.max_pages_per_seq * p.page_size;
    } else {
        p.max_kv_len = max_kv_len > 0 ? max_kv_len : cache.size(1);
    }
    p.q_batch_stride = q.strides[0], p.q_token_stride = q.strides[1], p.q_head_stride = q.strides[2];
    p.o_batch_stride = out.strides[0], p.o_token_stride = out.strides[1], p.o_head_stride = out.strides[2];
    p.kv_outer_stride = cache.stride(0), p.kv_token_stride = cache.stride(1);
}

// The caches as the package names them.
constexpr OperandName kCacheNames[] = {{"k", "k_cache"}, {"v", "v_cache"}, {"kv", "kv_cache"}};

// Runs a decode op on {q, caches..., lengths[, page_table]} into {out[, lse]}.
py::object finish_decode(Call& call, Op& op, const TensorView& q, std::initializer_list<TensorView> caches,
                         const PyTensor& lengths, const PyTensor* page_table, const TensorView& out,
                         const PyTensor* lse) {
    TensorView views[5];
    size_t count = 0;
    views[count++] = q;
    for (const TensorView& cache : caches) views[count++] = cache;
    views[count++] = lengths.view();
    if (page_table != nullptr) views[count++] = page_table->view();
    const TensorArg inputs[5] = {views[0], views[1], views[2], views[3], views[4]};
    const OutputArg outputs[2] = {out, lse != nullptr ? with_tokens(*lse, 3) : TensorView{}};
    return call.finish(op, Inputs(inputs, count), Outputs(outputs, lse != nullptr ? 2 : 1), kCacheNames);
}

py::object flash_attention(py::handle q_arg, py::handle k_arg, py::handle v_arg, py::handle out_arg, py::handle lse_arg,
                           py::handle cu_q_arg, py::handle cu_k_arg, int64_t max_seqlen_q, int64_t max_seqlen_k,
                           bool causal, double scale, int64_t window_left, AttentionLayout layout, py::handle stream) {
    Call call(stream);
    const PyTensor& q = call.tensor(q_arg, "q");
    const PyTensor& k = call.tensor(k_arg, "k");
    const PyTensor& v = call.tensor(v_arg, "v");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* lse = call.optional(lse_arg, "lse");
    const PyTensor* cu_q = call.optional(cu_q_arg, "cu_seqlens_q");
    const PyTensor* cu_k = call.optional(cu_k_arg, "cu_seqlens_k");
    if ((cu_q == nullptr) != (cu_k == nullptr))
        throw InvalidArgument("tileops_jit.flash_attention: cu_seqlens_q and cu_seqlens_k go together (varlen)");
    ProblemKey<FlashAttentionProblem> key;
    FlashAttentionProblem& p = key.problem();
    p.dtype = q.dtype;
    p.causal = causal;
    p.scale = to_float32(scale, "flash_attention", "scale");
    p.window_left = window_left;
    p.return_lse = lse != nullptr;
    p.layout = layout;
    // Index of the sequence and head dims in q, k, v and out.
    const bool varlen = cu_q != nullptr;
    const int seq = varlen ? 0 : layout == AttentionLayout::bshd ? 1 : 2;
    const int head = varlen ? 1 : layout == AttentionLayout::bshd ? 2 : 1;
    const char* dims = varlen ? "[total, heads, head_dim]"
                              : layout == AttentionLayout::bshd ? "[batch, seqlen, heads, head_dim]"
                                                                : "[batch, heads, seqlen, head_dim]";  // v, out: head_dim_v
    for (const PyTensor* t : {&q, &k, &v, &out}) require_rank(*t, varlen ? 3 : 4, "flash_attention", dims);
    if (call.empty(q.numel() == 0, {&out, lse}, "flash_attention")) return call.nothing("flash_attention");
    p.num_heads = q.size(head);
    p.num_kv_heads = k.size(head);
    p.head_dim = q.size(-1);
    p.head_dim_v = v.size(-1);
    if (varlen) {
        if (cu_q->rank != 1 || cu_q->size(0) < 2)
            throw InvalidArgument("tileops_jit.flash_attention: cu_seqlens_q must be [batch + 1] with batch >= 1");
        if (max_seqlen_q <= 0 || max_seqlen_k <= 0)
            throw InvalidArgument("tileops_jit.flash_attention: varlen needs max_seqlen_q and max_seqlen_k (>= 1)");
        p.varlen = true;
        p.batch = cu_q->size(0) - 1;
        p.seqlen_q = max_seqlen_q;
        p.seqlen_k = max_seqlen_k;
        p.total_q = q.size(0);
        p.total_k = k.size(0);
    } else {
        p.batch = q.size(0);
        p.seqlen_q = q.size(seq);
        p.seqlen_k = k.size(seq);
        p.q_batch_stride = q.stride(0);
        p.k_batch_stride = k.stride(0);
        p.v_batch_stride = v.stride(0);
        p.o_batch_stride = out.stride(0);
    }
    p.q_seq_stride = q.stride(seq), p.q_head_stride = q.stride(head);
    p.k_seq_stride = k.stride(seq), p.k_head_stride = k.stride(head);
    p.v_seq_stride = v.stride(seq), p.v_head_stride = v.stride(head);
    p.o_seq_stride = out.stride(seq), p.o_head_stride = out.stride(head);
    FlashAttention& op = call.op<FlashAttention>(key);
    const TensorView lse_view = lse != nullptr ? lse->view() : TensorView{};
    const OutputArg outputs[2] = {out.view(), lse_view};
    if (varlen) return call.finish(op, {q.view(), k.view(), v.view(), cu_q->view(), cu_k->view()}, Outputs(outputs, lse ? 2 : 1));
    return call.finish(op, {q.view(), k.view(), v.view()}, Outputs(outputs, lse ? 2 : 1));
}

py::object decode_attention(py::handle q_arg, py::handle k_arg, py::handle v_arg, py::handle lengths_arg,
                            py::handle out_arg, py::handle lse_arg, py::handle page_table_arg, int64_t max_kv_len,
                            double scale, double softcap, int64_t window_left, double k_scale, double v_scale,
                            py::handle stream) {
    Call call(stream);
    const PyTensor& q = call.tensor(q_arg, "q");
    const PyTensor& k = call.tensor(k_arg, "k_cache");
    const PyTensor& v = call.tensor(v_arg, "v_cache");
    const PyTensor& lengths = call.tensor(lengths_arg, "lengths");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* lse = call.optional(lse_arg, "lse");
    const PyTensor* page_table = call.optional(page_table_arg, "page_table");
    if (q.rank != 3 && q.rank != 4)
        throw InvalidArgument(fmt::format("tileops_jit.decode_attention: q must be [batch, q_len, heads, head_dim] or "
                                          "[batch, heads, head_dim], got rank {}",
                                          q.rank));
    const char* kv_dims = page_table ? "[num_pages, page_size, kv_heads, head_dim]" : "[batch, max_kv_len, kv_heads, head_dim]";
    require_rank(k, 4, "decode_attention", kv_dims);
    require_rank(v, 4, "decode_attention", kv_dims);
    if (call.empty(q.numel() == 0, {&out, lse}, "decode_attention")) return call.nothing("decode_attention");
    const TensorView q_view = with_tokens(q, 4), out_view = with_tokens(out, 4);
    ProblemKey<DecodeAttentionProblem> key;
    DecodeAttentionProblem& p = key.problem();
    set_decode_layout(p, q_view, out_view, k, page_table, max_kv_len, "decode_attention");
    p.head_dim = q_view.shape[3];
    p.num_kv_heads = k.size(2);
    p.kv_head_stride = k.stride(2);
    p.dtype = q.dtype;
    if (k.dtype != q.dtype) p.kv_dtype = k.dtype;
    p.k_scale = to_float32(k_scale, "decode_attention", "k_scale");
    p.v_scale = to_float32(v_scale, "decode_attention", "v_scale");
    p.scale = to_float32(scale, "decode_attention", "scale");
    p.softcap = to_float32(softcap, "decode_attention", "softcap");
    p.window_left = window_left;
    p.return_lse = lse != nullptr;
    return finish_decode(call, call.op<DecodeAttention>(key), q_view, {k.view(), v.view()}, lengths, page_table,
                         out_view, lse);
}

py::object mla_decode(py::handle q_arg, py::handle kv_arg, py::handle lengths_arg, py::handle out_arg,
                      py::handle lse_arg, py::handle page_table_arg, int64_t max_kv_len, double scale, py::handle stream) {
    Call call(stream);
    const PyTensor& q = call.tensor(q_arg, "q");
    const PyTensor& kv = call.tensor(kv_arg, "kv_cache");
    const PyTensor& lengths = call.tensor(lengths_arg, "lengths");
    const PyTensor& out = call.tensor(out_arg, "out");
    const PyTensor* lse = call.optional(lse_arg, "lse");
    const PyTensor* page_table = call.optional(page_table_arg, "page_table");
    if (q.rank != 3 && q.rank != 4)
        throw InvalidArgument(fmt::format("tileops_jit.mla_decode: q must be [batch, q_len, heads, 576] or "
                                          "[batch, heads, 576], got rank {}",
                                          q.rank));
    require_rank(kv, 3, "mla_decode", page_table ? "[num_pages, page_size, 576]" : "[batch, max_kv_len, 576]");
    if (call.empty(q.numel() == 0, {&out, lse}, "mla_decode")) return call.nothing("mla_decode");
    const TensorView q_view = with_tokens(q, 4), out_view = with_tokens(out, 4);
    ProblemKey<MlaDecodeProblem> key;
    MlaDecodeProblem& p = key.problem();
    set_decode_layout(p, q_view, out_view, kv, page_table, max_kv_len, "mla_decode");
    p.dtype = q.dtype;
    p.scale = to_float32(scale, "mla_decode", "scale");
    p.return_lse = lse != nullptr;
    return finish_decode(call, call.op<MlaDecode>(key), q_view, {kv.view()}, lengths, page_table, out_view, lse);
}

}  // namespace

void bind_attention(py::module_& m) {
    m.def("flash_attention", &flash_attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
          py::arg("lse") = py::none(), py::arg("cu_seqlens_q") = py::none(), py::arg("cu_seqlens_k") = py::none(),
          py::arg("max_seqlen_q") = 0, py::arg("max_seqlen_k") = 0, py::arg("causal") = false, py::arg("scale") = 0.0,
          py::arg("window_left") = -1, py::arg("layout") = AttentionLayout::bshd, TILEOPS_PY_CALL_ARGS);
    m.def("decode_attention", &decode_attention, py::arg("q"), py::arg("k_cache"), py::arg("v_cache"),
          py::arg("lengths"), py::arg("out"), py::arg("lse") = py::none(), py::arg("page_table") = py::none(),
          py::arg("max_kv_len") = 0, py::arg("scale") = 0.0, py::arg("softcap") = 0.0, py::arg("window_left") = -1,
          py::arg("k_scale") = 1.0, py::arg("v_scale") = 1.0, TILEOPS_PY_CALL_ARGS);
    m.def("mla_decode", &mla_decode, py::arg("q"), py::arg("kv_cache"), py::arg("lengths"), py::arg("out"),
          py::arg("lse") = py::none(), py::arg("page_table") = py::none(), py::arg("max_kv_len") = 0,
          py::arg("scale") = 0.0, TILEOPS_PY_CALL_ARGS);
}

}  // namespace tileops::python
