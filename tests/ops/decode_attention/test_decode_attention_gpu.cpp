// DecodeAttention against a double-precision reference on the CPU: random inputs scaled so that
// the softmax is far from uniform, poisoned outputs, mixed sequence lengths (0, 1, 7, 255, 256,
// 257, 4097, 100k), GQA ratios 1/4/8, 1-4 query tokens, every page size with a shuffled page
// table, windows, soft-capping, the log-sum-exp, every config of the search space, the
// tensor-core kernel on one row per KV head, fp8 e4m3 caches with key and value scales, and head
// dims between the powers of two on both kernels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/op_model.hpp"
#include "runtime/op_state.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/build_kernels.hpp"
#include "support/device_tensor.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

// Host copies of a decode problem's operands, its device buffers, and the reference.
struct DecodeCase {
    DecodeAttentionProblem p;
    std::vector<int> lengths;
    std::vector<double> q, k, v;         // q: [batch, q_len, heads, d]; k, v: the cache's storage (fp8: the codes' values)
    std::vector<int> page_table;         // [batch, max_pages_per_seq], -1 where unused
    int64_t out_head_stride = 0;         // > head_dim leaves poisoned gaps between heads
    size_t misalign = 0;                 // elements q and out are moved off a 16-byte boundary

    DecodeCase(const DecodeAttentionProblem& problem, std::vector<int> lens, uint64_t seed, int64_t out_pad = 0)
        : p(problem), lengths(std::move(lens)) {
        p.batch = static_cast<int64_t>(lengths.size());
        const int64_t d = p.head_dim;
        if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(static_cast<float>(d));  // the op's default
        out_head_stride = d + out_pad;
        p.o_head_stride = out_head_stride;
        p.o_token_stride = p.num_heads * out_head_stride;
        p.o_batch_stride = p.q_len * p.o_token_stride;
        if (p.page_size > 0) {
            p.max_pages_per_seq = (p.max_kv_len + p.page_size - 1) / p.page_size;
            // Pages of all sequences, shuffled over a pool with a few pages nobody uses.
            int64_t needed = 0;
            for (int len : lengths) needed += (len + p.page_size - 1) / p.page_size;
            p.num_pages = needed + 3;
            std::vector<int> pool(static_cast<size_t>(p.num_pages));
            std::iota(pool.begin(), pool.end(), 0);
            std::shuffle(pool.begin(), pool.end(), std::mt19937_64(seed));
            page_table.assign(static_cast<size_t>(p.batch * p.max_pages_per_seq), -1);
            size_t next = 0;
            for (int64_t b = 0; b < p.batch; ++b)
                for (int64_t j = 0; j * p.page_size < lengths[b]; ++j)
                    page_table[b * p.max_pages_per_seq + j] = pool[next++];
        }
        q = test::round_to(p.dtype, test::random_values(p.batch * p.q_len * p.num_heads * d, seed + 1));
        const int64_t kv_elements = kv_rows() * p.num_kv_heads * d;
        k = test::round_to(kv_type(), test::random_values(kv_elements, seed + 2));
        v = test::round_to(kv_type(), test::random_values(kv_elements, seed + 3));
    }

    DType kv_type() const { return p.kv_dtype.value_or(p.dtype); }
    // What a stored key or value element stands for: its value times the cache's scale.
    double k_scale() const { return kv_type() == DType::fp8_e4m3 ? p.k_scale : 1.0; }
    double v_scale() const { return kv_type() == DType::fp8_e4m3 ? p.v_scale : 1.0; }

    int64_t kv_rows() const { return p.page_size > 0 ? p.num_pages * p.page_size : p.batch * p.max_kv_len; }

    // Index into k/v of token t of sequence b, kv head h, dim 0 (packed storage), or -1 when its
    // page table entry is outside the page pool (the op skips such keys).
    int64_t kv_index(int64_t b, int64_t t, int64_t h) const {
        int64_t row = b * p.max_kv_len + t;
        if (p.page_size > 0) {
            const int page = page_table[b * p.max_pages_per_seq + t / p.page_size];
            if (page < 0 || page >= p.num_pages) return -1;
            row = static_cast<int64_t>(page) * p.page_size + t % p.page_size;
        }
        return (row * p.num_kv_heads + h) * p.head_dim;
    }

    // The reference, computed once.
    const std::vector<double>& reference_out() const {
        if (ref_out_.empty()) reference(ref_out_, ref_lse_);
        return ref_out_;
    }
    const std::vector<double>& reference_lse() const {
        reference_out();
        return ref_lse_;
    }

    mutable std::vector<double> ref_out_, ref_lse_;

    // Reference output [batch, q_len, heads, d] and lse [batch, q_len, heads] (natural log).
    void reference(std::vector<double>& out, std::vector<double>& lse) const {
        const int64_t d = p.head_dim, group = p.num_heads / p.num_kv_heads;
        out.assign(static_cast<size_t>(p.batch * p.q_len * p.num_heads * d), 0.0);
        lse.assign(static_cast<size_t>(p.batch * p.q_len * p.num_heads), -INFINITY);
        for (int64_t b = 0; b < p.batch; ++b) {
            const int64_t len = std::min<int64_t>(lengths[b], p.max_kv_len);
            for (int64_t i = 0; i < p.q_len; ++i) {
                const int64_t pos = len - p.q_len + i;
                const int64_t begin = p.window_left >= 0 ? std::max<int64_t>(0, pos - p.window_left) : 0;
                const int64_t end = std::max<int64_t>(0, pos + 1);
                for (int64_t h = 0; h < p.num_heads; ++h) {
                    const double* qv = &q[((b * p.q_len + i) * p.num_heads + h) * d];
                    std::vector<double> scores;
                    double max_score = -INFINITY;
                    for (int64_t t = begin; t < end; ++t) {
                        const int64_t at = kv_index(b, t, h / group);
                        if (at < 0) {  // a skipped key: weight 0
                            scores.push_back(-INFINITY);
                            continue;
                        }
                        const double* kv = &k[at];
                        double s = 0;
                        for (int64_t e = 0; e < d; ++e) s += qv[e] * kv[e];
                        s *= p.scale * k_scale();
                        if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
                        scores.push_back(s);
                        max_score = std::max(max_score, s);
                    }
                    if (max_score == -INFINITY) continue;  // no key seen: output 0, lse -inf
                    double sum = 0;
                    for (double& s : scores) sum += (s = std::exp(s - max_score));
                    double* o = &out[((b * p.q_len + i) * p.num_heads + h) * d];
                    for (int64_t t = begin; t < end; ++t) {
                        const int64_t at = kv_index(b, t, h / group);
                        if (at < 0) continue;
                        const double* vv = &v[at];
                        const double w = scores[t - begin] / sum * v_scale();
                        for (int64_t e = 0; e < d; ++e) o[e] += w * vv[e];
                    }
                    lse[(b * p.q_len + i) * p.num_heads + h] = max_score + std::log(sum);
                }
            }
        }
    }
};

// Device buffers of a DecodeCase, outputs poisoned.
struct DecodeBuffers {
    DeviceMatrix q, k, v, lengths, page_table, out, lse;

    explicit DecodeBuffers(const DecodeCase& c)
        : q(c.p.dtype, 1, static_cast<int64_t>(c.q.size()), 0, c.misalign * dtype_size(c.p.dtype)),
          k(c.kv_type(), 1, static_cast<int64_t>(c.k.size())),
          v(c.kv_type(), 1, static_cast<int64_t>(c.v.size())),
          lengths(DType::int32, 1, c.p.batch),
          page_table(DType::int32, 1, std::max<int64_t>(1, static_cast<int64_t>(c.page_table.size()))),
          out(c.p.dtype, 1, c.p.batch * c.p.o_batch_stride, 0, c.misalign * dtype_size(c.p.dtype)),
          lse(DType::fp32, 1, c.p.batch * c.p.q_len * c.p.num_heads) {
        q.upload(c.q);
        k.upload(c.k);
        v.upload(c.v);
        lengths.upload(std::vector<double>(c.lengths.begin(), c.lengths.end()));
        if (!c.page_table.empty()) page_table.upload(std::vector<double>(c.page_table.begin(), c.page_table.end()));
    }

    std::vector<TensorArg> inputs(const DecodeCase& c) const {
        std::vector<TensorArg> list{q.data(), k.data(), v.data(), lengths.data()};
        if (c.p.page_size > 0) list.emplace_back(page_table.data());
        return list;
    }
    std::vector<OutputArg> outputs(const DecodeCase& c) const {
        std::vector<OutputArg> list{out.data()};
        if (c.p.return_lse) list.emplace_back(lse.data());
        return list;
    }
    // Before every launch after the first: a launch that writes nothing (or only some rows) must
    // not pass on what the one before it wrote.
    void poison_outputs() {
        out.poison();
        lse.poison();
    }
};

std::string label(const DecodeCase& c) {
    return fmt::format("{} (cache {}) heads {}/{} d {} q_len {} page {} window {} softcap {} out head stride {} "
                       "misaligned {} lengths [{}]",
                       dtype_name(c.p.dtype), dtype_name(c.kv_type()), c.p.num_heads, c.p.num_kv_heads, c.p.head_dim,
                       c.p.q_len, c.p.page_size, c.p.window_left, c.p.softcap, c.out_head_stride, c.misalign,
                       fmt::join(c.lengths, ", "));
}

// Checks the output (and lse) of a run against the reference; the gaps between heads stay poisoned.
void check_result(const DecodeCase& c, const DecodeBuffers& buffers) {
    const std::vector<double>& ref_out = c.reference_out();
    const std::vector<double>& ref_lse = c.reference_lse();
    const std::vector<double> stored = buffers.out.download();
    bool gaps_poisoned = false;
    const std::vector<double> out = test::row_prefixes(stored, c.p.batch * c.p.q_len * c.p.num_heads, c.p.head_dim,
                                                       c.out_head_stride, gaps_poisoned);
    const double error = test::relative_error(out, test::round_to(c.p.dtype, ref_out));
    INFO(label(c) << ": relative error " << error << " (tolerance " << test::tolerance(c.p.dtype) << ")");
    CHECK(error <= test::tolerance(c.p.dtype));
    CHECK(gaps_poisoned);
    if (c.p.return_lse) {
        const std::vector<double> lse = buffers.lse.download();
        const double worst = test::lse_error(lse, ref_lse);
        INFO("lse: worst relative error " << worst);
        CHECK(worst <= 1e-4);
    }
}

void run_and_check(const DecodeCase& c) {
    DecodeAttention op(c.p);
    DecodeBuffers buffers(c);
    const auto in = buffers.inputs(c);
    const auto out = buffers.outputs(c);
    op.run(shared_runtime(), Inputs(in.data(), in.size()), Outputs(out.data(), out.size()));
    check_result(c, buffers);
}

DecodeAttentionProblem problem(DType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t q_len,
                               int64_t max_kv_len) {
    DecodeAttentionProblem p;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.q_len = q_len;
    p.max_kv_len = max_kv_len;
    p.dtype = dtype;
    return p;
}

}  // namespace

TEST_CASE("DecodeAttention over a contiguous cache matches a double-precision reference", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::fp16, DType::bf16);
    const int64_t head_dim = GENERATE(64, 128, 256);
    const int64_t kv_heads = GENERATE(4, 2);
    const int64_t heads = kv_heads * GENERATE(1, 4, 8);
    const int64_t q_len = GENERATE(1, 3);
    DecodeAttentionProblem p = problem(dtype, heads, kv_heads, head_dim, q_len, 4100);
    // Mixed lengths, including an empty sequence and one shorter than q_len.
    run_and_check(DecodeCase(p, {1, 7, 255, 0, 256, 257, 4097, 2}, 100 + head_dim + heads + q_len, 8));
}

TEST_CASE("DecodeAttention over a paged cache with a shuffled page table", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const int64_t page_size = GENERATE(16, 32, 64, 128, 256);
    const DType dtype = GENERATE(DType::fp16, DType::bf16);
    DecodeAttentionProblem p = problem(dtype, 16, 4, 128, GENERATE(1, 2), 3000);
    p.page_size = page_size;
    run_and_check(DecodeCase(p, {3000, 1, 0, 700, 2049, 16, 255}, 7 * page_size));
}

TEST_CASE("DecodeAttention with a window, soft-capping and the log-sum-exp", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::fp16, DType::bf16);
    DecodeAttentionProblem p = problem(dtype, 32, 8, 128, GENERATE(1, 4), 5000);
    p.window_left = GENERATE(-1, 0, 100, 1000);
    p.softcap = GENERATE(0.0f, 2.0f);
    p.return_lse = true;
    p.scale = 0.2f;  // scores of a few units: soft-capping at 2 changes them
    run_and_check(DecodeCase(p, {5000, 3, 1000, 1001, 0}, 900 + p.window_left));
    p.page_size = 64;
    run_and_check(DecodeCase(p, {5000, 3, 1000, 1001, 0}, 950 + p.window_left));
}

TEST_CASE("DecodeAttention over a 100k-token sequence", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    DecodeAttentionProblem p = problem(DType::bf16, 8, 1, 128, 1, 100000);
    p.return_lse = true;
    run_and_check(DecodeCase(p, {100000}, 77));
    p.page_size = 256;
    run_and_check(DecodeCase(p, {99999}, 78));
}

namespace {

// Runs `c` with each of `configs` (every distinct kernel compiled first, on all cores: one after
// another takes minutes), twice each: the split counters must be back at zero after a launch.
void check_configs(const DecodeCase& c, const std::vector<Config>& configs) {
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    DecodeAttention op(c.p);
    DecodeBuffers buffers(c);
    const auto in = buffers.inputs(c);
    const auto out = buffers.outputs(c);
    std::vector<detail::LaunchPlan> plans;
    for (const Config& config : configs) plans.push_back(op.model().plan(config, 1, runtime.device()));
    test::build_kernels(runtime, plans);
    for (const Config& config : configs) {
        INFO("config " << tuning::config_text(config));
        const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, 1);
        for (int repeat = 0; repeat < 2; ++repeat) {
            buffers.poison_outputs();
            op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
            check_result(c, buffers);
        }
    }
}

}  // namespace

TEST_CASE("Every DecodeAttention config in the search space is correct, run after run", "[gpu][decode][search_space]") {
    TILEOPS_REQUIRE_GPU();
    // GQA 8 with 2 query tokens: 16 rows per KV head, so rows < 16 needs several row blocks.
    DecodeAttentionProblem p = problem(DType::bf16, 16, 2, 128, 2, 2500);
    p.page_size = GENERATE(0, 32);
    p.return_lse = true;
    const DecodeCase c(p, {2500, 1, 700}, 555);
    std::vector<Config> configs = DecodeAttention(c.p).model().search_space(shared_runtime().device());
    configs.push_back({{"kernel", 0}, {"rows", 1}, {"warps", 1}, {"unroll", 1}, {"stages", 3}, {"splits", 7}});
    configs.push_back({{"kernel", 0}, {"rows", 8}, {"warps", 16}, {"unroll", 4}, {"stages", 2}, {"splits", 1000}});  // most splits empty
    configs.push_back({{"kernel", 1}, {"warps", 1}, {"tile", 32}, {"stages", 5}, {"splits", 3}});
    configs.push_back({{"kernel", 1}, {"warps", 8}, {"tile", 16}, {"stages", 2}, {"splits", 1000}});
    check_configs(c, test::this_shard(configs));
}

TEST_CASE("DecodeAttention skips keys behind page table entries outside the page pool", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    // Pages of 16 under tensor-core tiles of 32 keys (two page entries per tile) and of 16, and
    // pages of 64 (several tiles per page); the tensor-core kernel and the CUDA-core kernel.
    DecodeAttentionProblem p = problem(DType::bf16, 16, 4, 128, 1, 1000);
    p.page_size = GENERATE(16, 64);
    p.return_lse = true;
    DecodeCase c(p, {1000, 500, 40}, 4343 + p.page_size);
    c.page_table[3] = -7;                                                       // sequence 0, its 4th page
    c.page_table[c.p.max_pages_per_seq + 2] = static_cast<int>(c.p.num_pages);  // sequence 1, its 3rd page
    c.page_table[2 * c.p.max_pages_per_seq] = -1;  // sequence 2, its first page (all its keys with pages of 64)
    check_configs(c, {{{"kernel", 1}, {"warps", 4}, {"tile", 32}, {"stages", 2}, {"splits", 3}},
                      {{"kernel", 1}, {"warps", 2}, {"tile", 16}, {"stages", 3}, {"splits", 1}},
                      {{"kernel", 0}, {"rows", 4}, {"warps", 4}, {"unroll", 2}, {"stages", 2}, {"splits", 3}}});
}

TEST_CASE("The tensor-core DecodeAttention kernel with one row per KV head (MHA)", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    // 15 of the MMA's 16 rows are padding: they must neither leak into the output nor into the lse.
    const DType dtype = GENERATE(DType::fp16, DType::bf16);
    DecodeAttentionProblem p = problem(dtype, 4, 4, GENERATE(64, 128), 1, 3000);
    p.page_size = GENERATE(0, 16, 64);
    p.return_lse = true;
    const DecodeCase c(p, {3000, 0, 1, 17, 1000}, 321 + p.page_size, 8);
    check_configs(c, {{{"kernel", 1}, {"warps", 4}, {"tile", 16}, {"stages", 3}, {"splits", 1}},
                      {{"kernel", 1}, {"warps", 2}, {"tile", 32}, {"stages", 2}, {"splits", 5}},
                      {{"kernel", 1}, {"warps", 8}, {"tile", 16}, {"stages", 2}, {"splits", 16}}});
}

TEST_CASE("The tensor-core DecodeAttention kernel with its warps splitting many rows of a KV head", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    // More than 16 rows a KV head: the warps take 16 rows each and share one ring of keys. Falcon's
    // 71 query heads on one KV head with 4 query tokens (284 rows: the last CTA's last warps hold
    // padding only), paged and contiguous, with a window; GQA 8 with 4 tokens over an fp8 cache;
    // head dim 80 (copies chunk by chunk) with 6 tokens; head dim 256 (Q read per tile) at batch 1
    // (fixed splits). Lengths shorter than the query tokens leave some rows without keys.
    struct Shape {
        int64_t heads, kv_heads, head_dim, q_len;
        bool fp8;
        std::vector<int> lengths;
    };
    const auto [shape_index, page_size] = GENERATE(std::tuple{0, 0}, std::tuple{0, 16}, std::tuple{1, 32},
                                                   std::tuple{2, 0}, std::tuple{3, 0});
    const Shape shapes[] = {{71, 1, 64, 4, false, {3000, 1, 0, 700, 2049}},
                            {32, 4, 128, 4, true, {2500, 3, 999}},
                            {24, 4, 80, 6, false, {1100, 5, 300}},
                            {16, 2, 256, 4, false, {2222}}};
    const Shape& shape = shapes[shape_index];
    DecodeAttentionProblem p = problem(shape.fp8 ? DType::fp16 : DType::bf16, shape.heads, shape.kv_heads,
                                       shape.head_dim, shape.q_len, 3000);
    p.page_size = page_size;
    p.return_lse = true;
    if (shape_index == 0 && page_size > 0) p.window_left = 500;
    if (shape.fp8) {
        p.kv_dtype = DType::fp8_e4m3;
        p.k_scale = 0.37f;
        p.v_scale = 1.9f;
    }
    const DecodeCase c(p, shape.lengths, 1717 + 10 * static_cast<uint64_t>(shape_index) + page_size, 8);
    const DecodeAttention op(c.p);
    const detail::OpModel& model = op.model();
    const Config heuristic = model.heuristic(shared_runtime().device());
    CHECK(heuristic.count("row_warps") == 1);
    std::vector<Config> configs{heuristic};
    for (const Config& config : model.search_space(shared_runtime().device()))
        if (config.count("row_warps") && (config.at("splits") == 1 || config.at("splits") == 4)) configs.push_back(config);
    REQUIRE(configs.size() > 4);
    check_configs(c, configs);
}

TEST_CASE("DecodeAttention at head dims between the powers of two, on both kernels", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    // The tensor cores: padded shared-memory rows copied chunk by chunk (80, 96, 112, 160) or in
    // 128-byte lines (192), an odd number of k-steps (80, 112), Q in registers at its limit (192),
    // pages of 16 under tiles of 32; over an fp8 cache, codes copied in row order and widened. The
    // CUDA cores: idle lanes past the head dim (bf16: 10-14 slices on 16 lanes, 20-24 on 32; fp8:
    // 5-7 on 8, 10-12 on 16).
    // A batch of odd lengths (one empty, one shorter than q_len) over a paged cache, and a single
    // sequence (fixed splits) over a contiguous one.
    const int64_t head_dim = GENERATE(80, 96, 112, 160, 192);
    const bool fp8 = GENERATE(false, true);
    DecodeAttentionProblem p = problem(fp8 ? DType::fp16 : DType::bf16, 8, 2, head_dim, 2, 1100);
    p.return_lse = true;
    std::vector<Config> configs{{{"kernel", 0}, {"rows", 4}, {"warps", 4}, {"unroll", 2}, {"stages", 2}, {"splits", 3}},
                                {{"kernel", 0}, {"rows", 8}, {"warps", 8}, {"unroll", 1}, {"stages", 3}, {"splits", 1}}};
    if (fp8) {
        p.kv_dtype = DType::fp8_e4m3;
        p.k_scale = 0.37f;
        p.v_scale = 1.9f;
    }
    // Over an fp8 cache, tiles of 16 keys at 80 and 112 are not whole copies of a warp; tiles of 32
    // keys past head dim 128 spill where rows are copied chunk by chunk (decode_invalid_reason).
    const bool tile16 = !fp8 || (head_dim != 80 && head_dim != 112);
    const bool tile32 = head_dim != 160 && !(fp8 && head_dim == 192);
    if (tile16) configs.push_back({{"kernel", 1}, {"warps", 4}, {"tile", 16}, {"stages", 3}, {"splits", 1}});
    if (tile32) configs.push_back({{"kernel", 1}, {"warps", 2}, {"tile", 32}, {"stages", 2}, {"splits", 3}});
    for (const Config& config : configs) REQUIRE_FALSE(DecodeAttention(p).model().invalid_reason(config, shared_runtime().device()));
    const uint64_t seed = 10 * static_cast<uint64_t>(head_dim) + (fp8 ? 1 : 0);
    DecodeAttentionProblem paged = p;
    paged.page_size = 16;
    check_configs(DecodeCase(paged, {1027, 0, 1, 333, 77}, seed, 8), configs);
    check_configs(DecodeCase(p, {1037}, seed + 5, 8), configs);
}

TEST_CASE("DecodeAttention over an fp8 e4m3 cache with key and value scales", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    // Each head dim once, GQA (the tensor cores) and MHA (the CUDA cores), contiguous and paged
    // (each section compiles its own kernel).
    const auto [kv_heads, head_dim, page_size] =
        GENERATE(std::tuple{8, 128, 0}, std::tuple{32, 64, 16}, std::tuple{8, 256, 64}, std::tuple{32, 128, 0});
    DecodeAttentionProblem p = problem(GENERATE(DType::fp16, DType::bf16), 32, kv_heads, head_dim, 1, 5000);
    p.kv_dtype = DType::fp8_e4m3;
    p.k_scale = 0.37f;  // with keys of up to 2 (the codes' values), scores stay far from uniform
    p.v_scale = 1.9f;
    p.page_size = page_size;
    p.return_lse = true;
    run_and_check(DecodeCase(p, {5000, 1, 0, 257, 4097}, 901 + p.page_size, 8));
}

TEST_CASE("DecodeAttention over an fp8 cache: speculative tokens, a window, soft-capping, every config",
          "[gpu][decode][search_space]") {
    TILEOPS_REQUIRE_GPU();
    DecodeAttentionProblem p = problem(DType::bf16, 16, 2, 128, 2, 2500);
    p.kv_dtype = DType::fp8_e4m3;
    p.k_scale = 1.5f;
    p.v_scale = 0.25f;
    p.page_size = GENERATE(0, 32);
    p.window_left = 700;
    p.softcap = 30.0f;
    p.return_lse = true;
    const DecodeCase c(p, {2500, 1, 700}, 556);
    std::vector<Config> configs = DecodeAttention(c.p).model().search_space(shared_runtime().device());
    REQUIRE(!configs.empty());
    configs.push_back({{"kernel", 0}, {"rows", 8}, {"warps", 16}, {"unroll", 4}, {"stages", 2}, {"splits", 1000}});  // most splits empty
    configs.push_back({{"kernel", 1}, {"warps", 8}, {"tile", 16}, {"stages", 2}, {"splits", 1000}});
    configs.push_back({{"kernel", 1}, {"warps", 1}, {"tile", 32}, {"stages", 5}, {"splits", 3}});
    check_configs(c, test::this_shard(configs));
}

TEST_CASE("DecodeAttention reads q and writes out off 16 bytes, with odd strides", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    // The op asks only element alignment of q and out, and any stride: both kernels load q and
    // store out element by element. One element off, heads 131 elements apart in out.
    DecodeAttentionProblem p = problem(GENERATE(DType::fp16, DType::bf16), 16, 2, 128, 2, 900);
    p.page_size = GENERATE(0, 16);
    p.return_lse = true;
    DecodeCase c(p, {900, 1, 300, 0, 77}, 91, 3);
    c.misalign = 1;
    check_configs(c, {{{"kernel", 0}, {"rows", 4}, {"warps", 4}, {"unroll", 2}, {"stages", 2}, {"splits", 1}},
                      {{"kernel", 0}, {"rows", 8}, {"warps", 4}, {"unroll", 1}, {"stages", 3}, {"splits", 3}},
                      {{"kernel", 1}, {"warps", 4}, {"tile", 16}, {"stages", 3}, {"splits", 1}},
                      {{"kernel", 1}, {"warps", 2}, {"tile", 32}, {"stages", 2}, {"splits", 2}}});
}

TEST_CASE("DecodeAttention cuts a skewed batch by the lengths it reads at each launch", "[gpu][decode]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    // 70 sequences (two passes of a two-warp CTA's scan over the batch's chunk counts, one of a
    // four-warp CTA's; common/kv_chunks.cuh): one long sequence among
    // short ones, empty ones and a length past the cache's capacity (clamped); then the same launch,
    // the grid unchanged, with another sequence the long one, as a CUDA graph replays it.
    // (Two KV heads and 6000 keys at most: a contiguous cache of 70 x 6000 tokens is already 1.7 GB
    // of doubles on the host.) With splits = 1 the long sequence gets only its own CTA per column
    // unless its keys are cut by the lengths.
    DecodeAttentionProblem p = problem(DType::bf16, 16, 2, 128, 1, 6000);
    p.page_size = GENERATE(0, 16);
    p.return_lse = true;
    const test::SkewedBatches batches = test::skewed_batches(70, 6000, 2024);
    DecodeCase a(p, batches.capacity, 77);
    DecodeCase b = a;
    a.lengths = batches.first, b.lengths = batches.second;
    a.ref_out_.clear(), b.ref_out_.clear();
    DecodeAttention op(a.p);
    DecodeBuffers buffers(a);
    const auto in = buffers.inputs(a);
    const auto out = buffers.outputs(a);
    const Config heuristic = op.model().heuristic(runtime.device());
    for (const Config& config :
         {heuristic, Config{{"kernel", 1}, {"warps", 4}, {"tile", 32}, {"stages", 2}, {"splits", 1}},
          Config{{"kernel", 1}, {"warps", 2}, {"tile", 16}, {"stages", 3}, {"splits", 2}},
          Config{{"kernel", 0}, {"rows", 4}, {"warps", 4}, {"unroll", 2}, {"stages", 2}, {"splits", 1}},
          Config{{"kernel", 0}, {"rows", 4}, {"warps", 2}, {"unroll", 2}, {"stages", 2}, {"splits", 2}}}) {
        INFO("config " << tuning::config_text(config));
        const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, 1);
        for (const DecodeCase* c : {&a, &b, &a}) {
            buffers.lengths.upload(std::vector<double>(c->lengths.begin(), c->lengths.end()));
            buffers.poison_outputs();
            op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
            check_result(*c, buffers);
        }
    }
}
