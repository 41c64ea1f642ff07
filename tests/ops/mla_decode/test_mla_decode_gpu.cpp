// MlaDecode against a double-precision reference on the CPU: random inputs, poisoned outputs with
// gaps between heads, mixed sequence lengths (0, 1, 7, 255, 256, 257, 4097, 20k), 16 to 128 heads,
// 1-2 query tokens, every page size with a shuffled page table, bad page table entries, the
// log-sum-exp, and every config of the search space launched twice.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/op_model.hpp"
#include "runtime/op_state.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/device_tensor.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

constexpr int64_t kKeyDim = MlaDecode::kKeyDim, kValueDim = MlaDecode::kLatentDim;

// Host copies of an MLA problem's operands and its reference.
struct MlaCase {
    MlaDecodeProblem p;
    std::vector<int> lengths;
    std::vector<double> q, kv;     // q: [batch, q_len, heads, 576]; kv: the cache's storage
    std::vector<int> page_table;   // [batch, max_pages_per_seq], -1 where unused
    int64_t out_head_stride = kValueDim + 8;  // gaps between heads stay poisoned

    MlaCase(const MlaDecodeProblem& problem, std::vector<int> lens, uint64_t seed) : p(problem), lengths(std::move(lens)) {
        p.batch = static_cast<int64_t>(lengths.size());
        if (p.scale == 0.0f) p.scale = 1.0f / std::sqrt(static_cast<float>(kKeyDim));
        p.o_head_stride = out_head_stride;
        p.o_token_stride = p.num_heads * out_head_stride;
        p.o_batch_stride = p.q_len * p.o_token_stride;
        if (p.page_size > 0) {
            p.max_pages_per_seq = (p.max_kv_len + p.page_size - 1) / p.page_size;
            int64_t needed = 0;
            for (int len : lengths) needed += (len + p.page_size - 1) / p.page_size;
            p.num_pages = needed + 3;  // a few pages nobody uses
            std::vector<int> pool(static_cast<size_t>(p.num_pages));
            std::iota(pool.begin(), pool.end(), 0);
            std::shuffle(pool.begin(), pool.end(), std::mt19937_64(seed));
            page_table.assign(static_cast<size_t>(p.batch * p.max_pages_per_seq), -1);
            size_t next = 0;
            for (int64_t b = 0; b < p.batch; ++b)
                for (int64_t j = 0; j * p.page_size < lengths[b]; ++j) page_table[b * p.max_pages_per_seq + j] = pool[next++];
        }
        q = test::round_to(p.dtype, test::random_values(p.batch * p.q_len * p.num_heads * kKeyDim, seed + 1));
        const int64_t rows = p.page_size > 0 ? p.num_pages * p.page_size : p.batch * p.max_kv_len;
        kv = test::round_to(p.dtype, test::random_values(rows * kKeyDim, seed + 2));
    }

    // Index into kv of token t of sequence b, or -1 when its page table entry is out of range
    // (the op skips such keys).
    int64_t kv_index(int64_t b, int64_t t) const {
        if (p.page_size == 0) return (b * p.max_kv_len + t) * kKeyDim;
        const int page = page_table[b * p.max_pages_per_seq + t / p.page_size];
        if (page < 0 || page >= p.num_pages) return -1;
        return (page * p.page_size + t % p.page_size) * kKeyDim;
    }

    // Reference output [batch, q_len, heads, 512] and lse [batch, q_len, heads] (natural log).
    void reference(std::vector<double>& out, std::vector<double>& lse) const {
        out.assign(static_cast<size_t>(p.batch * p.q_len * p.num_heads * kValueDim), 0.0);
        lse.assign(static_cast<size_t>(p.batch * p.q_len * p.num_heads), -INFINITY);
        for (int64_t b = 0; b < p.batch; ++b) {
            const int64_t len = std::min<int64_t>(lengths[b], p.max_kv_len);
            for (int64_t i = 0; i < p.q_len; ++i) {
                const int64_t end = std::max<int64_t>(0, len - p.q_len + i + 1);
                for (int64_t h = 0; h < p.num_heads; ++h) {
                    const double* qv = &q[((b * p.q_len + i) * p.num_heads + h) * kKeyDim];
                    std::vector<std::pair<int64_t, double>> scores;
                    double max_score = -INFINITY;
                    for (int64_t t = 0; t < end; ++t) {
                        const int64_t at = kv_index(b, t);
                        if (at < 0) continue;
                        double s = 0;
                        for (int64_t e = 0; e < kKeyDim; ++e) s += qv[e] * kv[at + e];
                        s *= p.scale;
                        scores.emplace_back(at, s);
                        max_score = std::max(max_score, s);
                    }
                    if (scores.empty()) continue;
                    double sum = 0;
                    for (auto& [at, s] : scores) sum += (s = std::exp(s - max_score));
                    double* o = &out[((b * p.q_len + i) * p.num_heads + h) * kValueDim];
                    for (const auto& [at, w] : scores)
                        for (int64_t e = 0; e < kValueDim; ++e) o[e] += w / sum * kv[at + e];
                    lse[(b * p.q_len + i) * p.num_heads + h] = max_score + std::log(sum);
                }
            }
        }
    }
};

// Device buffers of an MlaCase, outputs poisoned.
struct MlaBuffers {
    DeviceMatrix q, kv, lengths, page_table, out, lse;

    explicit MlaBuffers(const MlaCase& c)
        : q(c.p.dtype, 1, static_cast<int64_t>(c.q.size())),
          kv(c.p.dtype, 1, static_cast<int64_t>(c.kv.size())),
          lengths(DType::int32, 1, c.p.batch),
          page_table(DType::int32, 1, std::max<int64_t>(1, static_cast<int64_t>(c.page_table.size()))),
          out(c.p.dtype, 1, c.p.batch * c.p.o_batch_stride),
          lse(DType::fp32, 1, c.p.batch * c.p.q_len * c.p.num_heads) {
        q.upload(c.q);
        kv.upload(c.kv);
        lengths.upload(std::vector<double>(c.lengths.begin(), c.lengths.end()));
        if (!c.page_table.empty()) page_table.upload(std::vector<double>(c.page_table.begin(), c.page_table.end()));
    }
    std::vector<TensorArg> inputs(const MlaCase& c) const {
        std::vector<TensorArg> list{q.data(), kv.data(), lengths.data()};
        if (c.p.page_size > 0) list.emplace_back(page_table.data());
        return list;
    }
    std::vector<OutputArg> outputs(const MlaCase& c) const {
        std::vector<OutputArg> list{out.data()};
        if (c.p.return_lse) list.emplace_back(lse.data());
        return list;
    }
};

std::string label(const MlaCase& c) {
    return fmt::format("{} heads {} q_len {} page {} lengths [{}]", dtype_name(c.p.dtype), c.p.num_heads, c.p.q_len,
                       c.p.page_size, fmt::join(c.lengths, ", "));
}

void check_result(const MlaCase& c, const MlaBuffers& buffers, const std::vector<double>& ref_out,
                  const std::vector<double>& ref_lse) {
    const std::vector<double> stored = buffers.out.download();
    bool gaps_poisoned = false;
    const std::vector<double> out = test::row_prefixes(stored, c.p.batch * c.p.q_len * c.p.num_heads, kValueDim,
                                                       c.out_head_stride, gaps_poisoned);
    const double error = test::relative_error(out, test::round_to(c.p.dtype, ref_out));
    INFO(label(c) << ": relative error " << error << " (tolerance " << test::tolerance(c.p.dtype) << ")");
    CHECK(error <= test::tolerance(c.p.dtype));
    CHECK(gaps_poisoned);
    // Rows that see no key are exactly zero.
    for (size_t i = 0; i < ref_lse.size(); ++i)
        if (std::isinf(ref_lse[i])) {
            bool zero = true;
            for (int64_t e = 0; e < kValueDim; ++e) zero = zero && out[i * kValueDim + e] == 0.0;
            CHECK(zero);
        }
    if (c.p.return_lse) {
        const std::vector<double> lse = buffers.lse.download();
        const double worst = test::lse_error(lse, ref_lse);
        INFO("lse: worst relative error " << worst);
        CHECK(worst <= 1e-3);
    }
}

void run_and_check(const MlaCase& c) {
    MlaDecode op(c.p);
    MlaBuffers buffers(c);
    const auto in = buffers.inputs(c);
    const auto out = buffers.outputs(c);
    op.run(shared_runtime(), Inputs(in.data(), in.size()), Outputs(out.data(), out.size()));
    std::vector<double> ref_out, ref_lse;
    c.reference(ref_out, ref_lse);
    check_result(c, buffers, ref_out, ref_lse);
}

MlaDecodeProblem problem(DType dtype, int64_t heads, int64_t q_len, int64_t max_kv_len) {
    MlaDecodeProblem p;
    p.num_heads = heads;
    p.q_len = q_len;
    p.max_kv_len = max_kv_len;
    p.dtype = dtype;
    p.return_lse = true;
    return p;
}

}  // namespace

TEST_CASE("MlaDecode over a contiguous cache matches a double-precision reference", "[gpu][mla]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::fp16, DType::bf16);
    const int64_t heads = GENERATE(16, 20, 64, 128);
    const int64_t q_len = GENERATE(1, 2);
    // Mixed lengths, including an empty sequence and one shorter than q_len.
    run_and_check(MlaCase(problem(dtype, heads, q_len, 4100), {1, 7, 255, 0, 256, 257, 4097, 2}, 300 + heads + q_len));
}

TEST_CASE("MlaDecode over a paged cache with a shuffled page table", "[gpu][mla]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    MlaDecodeProblem p = problem(GENERATE(DType::fp16, DType::bf16), 64, 1, 3000);
    p.page_size = GENERATE(16, 32, 64, 128, 256);
    run_and_check(MlaCase(p, {3000, 1, 0, 700, 2049, 16, 255}, 11 * p.page_size));
}

TEST_CASE("MlaDecode skips keys behind page table entries outside the page pool", "[gpu][mla]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    MlaDecodeProblem p = problem(DType::bf16, GENERATE(32, 128), 1, 1000);
    // Pages smaller than a key tile (checked per row and by a warp vote) and whole tiles (one offset).
    p.page_size = GENERATE(32, 128);
    MlaCase c(p, {1000, 500}, 4242);
    c.page_table[3] = -7;                                                       // sequence 0, its 4th page
    c.page_table[c.p.max_pages_per_seq + 2] = static_cast<int>(c.p.num_pages);  // sequence 1, its 3rd page
    run_and_check(c);
}

TEST_CASE("MlaDecode over a 20k-token sequence (splits)", "[gpu][mla]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    MlaDecodeProblem p = problem(DType::bf16, 16, 1, 20000);
    run_and_check(MlaCase(p, {20000}, 91));
    p.page_size = 64;
    p.scale = 0.1f;  // sharper softmax
    run_and_check(MlaCase(p, {19999}, 92));
}

TEST_CASE("Every MlaDecode config in the search space is correct, run after run", "[gpu][mla][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    // 40 rows (20 heads x 2 tokens): every block_m leaves a partial row block.
    MlaDecodeProblem p = problem(DType::bf16, 20, 2, 2500);
    p.page_size = GENERATE(0, 32);
    const MlaCase c(p, {2500, 1, 700}, 777);
    std::vector<double> ref_out, ref_lse;
    c.reference(ref_out, ref_lse);
    MlaDecode op(c.p);
    MlaBuffers buffers(c);
    const auto in = buffers.inputs(c);
    const auto out = buffers.outputs(c);
    std::vector<Config> configs = op.model().search_space(runtime.device());
    configs.push_back({{"kernel", 0}, {"block_m", 16}, {"block_n", 16}, {"stages", 5}, {"splits", 256}});  // most splits empty
    REQUIRE(configs.size() > 10);
    for (const Config& config : test::this_shard(configs)) {
        INFO(fmt::format("config kernel {} block_m {} block_n {} stages {} splits {}", config.at("kernel"), config.at("block_m"),
                         config.at("block_n"), config.at("stages"), config.at("splits")));
        const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, 1);
        // Twice: the split counters must be back at zero after a launch.
        for (int repeat = 0; repeat < 2; ++repeat) {
            buffers.out.poison();
            buffers.lse.poison();
            op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
            check_result(c, buffers, ref_out, ref_lse);
        }
    }
}

TEST_CASE("MlaDecode cuts a skewed batch by the lengths it reads at each launch", "[gpu][mla]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    // 150 sequences (three passes of the scan over the batch's chunk counts in a CTA of 64 threads,
    // two in the merge kernel's 128; common/kv_chunks.cuh): one long among short ones, empty ones
    // and a length past the cache (clamped); then the same launch, grid unchanged, with another
    // sequence the long one, as a CUDA graph replays it.
    MlaDecodeProblem p = problem(DType::bf16, 16, 1, 2400);
    p.page_size = GENERATE(0, 64);
    const test::SkewedBatches batches = test::skewed_batches(150, 2400, 4048);
    MlaCase a(p, batches.capacity, 99);
    MlaCase b = a;
    a.lengths = batches.first, b.lengths = batches.second;
    std::vector<double> ref_a, lse_a, ref_b, lse_b;
    a.reference(ref_a, lse_a);
    b.reference(ref_b, lse_b);
    MlaDecode op(a.p);
    MlaBuffers buffers(a);
    const auto in = buffers.inputs(a);
    const auto out = buffers.outputs(a);
    std::vector<Config> configs{op.model().heuristic(runtime.device()),
                                {{"kernel", 0}, {"block_m", 16}, {"block_n", 32}, {"stages", 3}, {"splits", 2}}};
    if (runtime.device().sm() == 90) configs.push_back({{"kernel", 2}, {"block_m", 64}, {"block_n", 64}, {"stages", 2}, {"splits", 1}});
    for (const Config& config : configs) {
        INFO(fmt::format("config kernel {} block_m {} block_n {} stages {} splits {}", config.at("kernel"),
                         config.at("block_m"), config.at("block_n"), config.at("stages"), config.at("splits")));
        const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, 1);
        for (const MlaCase* c : {&a, &b, &a}) {
            buffers.lengths.upload(std::vector<double>(c->lengths.begin(), c->lengths.end()));
            buffers.out.poison();
            buffers.lse.poison();
            op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
            check_result(*c, buffers, c == &a ? ref_a : ref_b, c == &a ? lse_a : lse_b);
        }
    }
}
