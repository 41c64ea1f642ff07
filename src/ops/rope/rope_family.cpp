// The RoPE family: rotary position embedding of queries and keys, fused with appending keys and
// values to a KV cache. Kernels: kernel_templates/rope/.
#include <algorithm>

#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/rope.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "tokens x heads x kv_heads x head_dim";

// Flags: rotN (only the first N elements of a head rotate), gptj (interleaved pairs), norot (no
// rotation: a copy and the append, for learned positions), pageN
// (append keys and values to a cache of N-token pages, one slot a token) and kv_fp8 (an fp8 e4m3
// cache). Frequencies do not change the kernel: the problem rebuilt from a key uses Llama 3's.
std::unique_ptr<Op> make_rope(const ProblemSpec& spec) {
    require_rank(spec, 4, kShape);
    RopeProblem p;
    p.num_tokens = spec.shape[0];
    p.num_heads = spec.shape[1];
    p.num_kv_heads = spec.shape[2];
    p.head_dim = spec.shape[3];
    p.dtype = parse_dtype(spec.dtype);
    p.theta = 500000.0;
    bool fp8 = false, gptj = false, norot = false;
    const std::vector<std::string> flags = split_flags(spec.flags);
    check_flags_distinct("rope", flags, {"rot", "page"});
    for (const std::string& flag : flags) {
        if (flag == "gptj") {
            gptj = true;
        } else if (flag == "norot") {
            norot = true;
        } else if (flag == "kv_fp8") {
            fp8 = true;
        } else if (const auto rot = flag_number(flag, "rot")) {
            // rotary_dim 0 means the whole head in a RopeProblem; as a flag it would be a typo.
            if (*rot < 2) throw InvalidArgument(fmt::format("tileops: rope flag '{}': rotN needs N >= 2", flag));
            p.rotary_dim = *rot;
        } else if (const auto page = flag_number(flag, "page")) {
            p.append_kv = true;
            p.page_size = *page;
        } else {
            throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to rope (rotN, gptj, norot, pageN, kv_fp8)", flag));
        }
    }
    if (gptj && norot) throw InvalidArgument("tileops: rope flags gptj and norot contradict each other");
    if (gptj) p.style = RopeStyle::gptj;
    if (norot) p.style = RopeStyle::none;
    if (fp8 && !p.append_kv) throw InvalidArgument("tileops: rope flag kv_fp8 needs pageN (a cache to append to)");
    if (norot && p.rotary_dim != 0)
        throw InvalidArgument("tileops: rope flag norot rotates nothing: it takes no rotN");
    if (fp8) p.kv_dtype = DType::fp8_e4m3;
    // Room for every token, one page spare.
    if (p.append_kv && p.page_size > 0) p.num_pages = p.num_tokens / p.page_size + 2;
    return std::make_unique<Rope>(p);
}

// Llama 3 8B (GQA 32/8) decode steps and a prefill, appended to a paged bf16 and an fp8 cache;
// GPT-J (interleaved, 64 of 256 rotated, MHA); Phi-2's partial rotation (32 of 80) in fp16; fp32.
std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (int64_t tokens : {1, 64, 8192}) {
        RopeProblem p{tokens, 32, 8, 128};
        p.theta = 500000.0;
        p.scaling = RopeScaling::llama3();
        p.append_kv = true, p.page_size = 16, p.num_pages = tokens / 16 + 2;
        ops.push_back(std::make_unique<Rope>(p));
        if (tokens == 64) {
            p.kv_dtype = DType::fp8_e4m3;
            ops.push_back(std::make_unique<Rope>(p));
        }
    }
    RopeProblem gptj{512, 16, 16, 256};
    gptj.rotary_dim = 64, gptj.style = RopeStyle::gptj;
    ops.push_back(std::make_unique<Rope>(gptj));
    RopeProblem phi{300, 32, 32, 80, 32};
    phi.dtype = DType::fp16;
    ops.push_back(std::make_unique<Rope>(phi));
    RopeProblem gpt2{64, 12, 12, 64};  // GPT-2's decode: no rotation, the append only
    gpt2.style = RopeStyle::none;
    gpt2.append_kv = true, gpt2.page_size = 16, gpt2.num_pages = 6;
    ops.push_back(std::make_unique<Rope>(gpt2));
    RopeProblem fp32{17, 8, 2, 64};
    fp32.dtype = DType::fp32;
    ops.push_back(std::make_unique<Rope>(fp32));
    return ops;
}

}  // namespace

OpFamily rope_family() {
    return {"rope",
            {{"rope", kShape, "rotN (partial rotation), gptj (interleaved pairs), norot (no rotation), pageN (append to a cache of N-token "
                              "pages), kv_fp8 (an fp8 e4m3 cache)", make_rope}},
            representative_ops};
}

}  // namespace tileops::detail
