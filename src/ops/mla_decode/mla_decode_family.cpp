// The MLA decode family: DeepSeek's multi-head latent attention over one shared latent KV head
// (576 dims in, 512 out). Kernels: kernel_templates/mla_decode/.
#include <tuple>

#include "core/op_family.hpp"
#include "tileops/mla_decode.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "batch x heads x q_len x max_kv_len";

// Flag pageN for a paged cache of N-token pages (a page pool of exactly batch x pages per
// sequence).
std::unique_ptr<Op> make_mla_decode(const ProblemSpec& spec) {
    require_rank(spec, 4, kShape);
    MlaDecodeProblem p;
    p.batch = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.q_len = spec.shape[2];
    p.max_kv_len = spec.shape[3];
    p.dtype = parse_dtype(spec.dtype);
    const PagedCache cache = paged_cache(spec.op, split_flags(spec.flags), p.batch, p.max_kv_len);
    p.page_size = cache.page_size, p.max_pages_per_seq = cache.max_pages_per_seq, p.num_pages = cache.num_pages;
    return std::make_unique<MlaDecode>(p);
}

// Both dtypes, few and many heads (block_m 16 and 64), speculative tokens, paged.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (DType dtype : {DType::fp16, DType::bf16})
        for (auto [heads, q_len, page_size] : {std::tuple{16, 1, 0}, {128, 1, 64}, {32, 2, 16}}) {
            MlaDecodeProblem p;
            p.batch = 4;
            p.num_heads = heads;
            p.q_len = q_len;
            p.max_kv_len = 4097;
            p.dtype = dtype;
            if (page_size > 0) {
                p.page_size = page_size;
                p.max_pages_per_seq = (p.max_kv_len + page_size - 1) / page_size;
                p.num_pages = p.batch * p.max_pages_per_seq;
            }
            ops.push_back(std::make_unique<MlaDecode>(p));
        }
    return ops;
}

}  // namespace

OpFamily mla_decode_family() {
    return {"mla_decode", {{"mla_decode", kShape, "pageN (a paged latent cache of N-token pages)", make_mla_decode}},
            representative_ops};
}

}  // namespace tileops::detail
