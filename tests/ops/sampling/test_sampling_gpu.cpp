// Sampling on the GPU: greedy against the host's argmax (ties, NaN, -inf rows, odd vocabularies,
// misaligned rows); every sampled token inside the exact top-k / top-p / min-p set the host computes
// in double; the frequencies of many draws against the distribution by a chi-square bound; the same
// draws run after run; every config of the search space.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/build_kernels.hpp"
#include "support/device_tensor.hpp"
#include "support/test_support.hpp"
#include "tileops/sampling.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

struct RowParams {
    double temperature = 1.0;
    int top_k = 0;
    double top_p = 1.0;
    double min_p = 0.0;
};

// The first index of the largest value; NaN never wins; -inf everywhere: 0.
int64_t host_argmax(const double* row, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (!std::isnan(row[i]) && (std::isnan(row[best]) || row[i] > row[best])) best = i;
    return best;
}

// The tokens a row may give, with their probabilities, by the op's definition (in double).
std::map<int64_t, double> allowed_tokens(const double* row, int64_t n, const RowParams& rp) {
    const double max_logit = row[host_argmax(row, n)];
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    std::vector<double> q(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) q[static_cast<size_t>(i)] = std::exp((row[i] - max_logit) / rp.temperature);
    const bool top_k = rp.top_k > 1 && rp.top_k < n;
    const double kth = top_k ? row[order[static_cast<size_t>(rp.top_k - 1)]] : -INFINITY;
    std::vector<int64_t> a;  // descending
    double mass_a = 0;
    for (int64_t i : order)
        if (row[i] >= kth && q[static_cast<size_t>(i)] >= rp.min_p) a.push_back(i), mass_a += q[static_cast<size_t>(i)];
    std::map<int64_t, double> kept;
    double mass = 0, mass_kept = 0;
    double cut = -INFINITY;
    for (int64_t i : a) {
        if (row[i] < cut) break;
        mass += q[static_cast<size_t>(i)];
        kept[i] = q[static_cast<size_t>(i)];
        if (rp.top_p < 1.0 && mass >= rp.top_p * mass_a) cut = row[i];  // ties with the crossing token stay
    }
    for (auto& entry : kept) mass_kept += entry.second;
    for (auto& entry : kept) entry.second /= mass_kept;
    return kept;
}

// Runs the op over `logits` ([batch, vocab] rows `stride` apart) with per-row parameters; returns
// the tokens.
std::vector<int64_t> run_sampling(Sampling& op, const DeviceMatrix& logits, const std::vector<RowParams>& params,
                                  const std::vector<double>& offsets) {
    const SamplingProblem& p = op.problem();
    DeviceMatrix tokens(DType::int32, 1, p.batch);
    if (p.greedy) {
        op.run(shared_runtime(), {logits.data()}, {tokens.data()});
    } else {
        std::vector<double> t, k, tp, mp;
        for (const RowParams& rp : params)
            t.push_back(rp.temperature), k.push_back(rp.top_k), tp.push_back(rp.top_p), mp.push_back(rp.min_p);
        DeviceMatrix d_t(DType::fp32, 1, p.batch), d_k(DType::int32, 1, p.batch), d_tp(DType::fp32, 1, p.batch),
            d_mp(DType::fp32, 1, p.batch), d_offsets(DType::int32, 1, p.batch);
        d_t.upload(t), d_k.upload(k), d_tp.upload(tp), d_mp.upload(mp), d_offsets.upload(offsets);
        op.run(shared_runtime(), {logits.data(), d_t.data(), d_k.data(), d_tp.data(), d_mp.data(), d_offsets.data()},
               {tokens.data()});
    }
    std::vector<int64_t> out;
    for (double v : tokens.download()) out.push_back(static_cast<int64_t>(v));
    return out;
}

std::vector<double> iota_offsets(int64_t count, int64_t start = 0) {
    std::vector<double> offsets(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) offsets[static_cast<size_t>(i)] = static_cast<double>(start + i);
    return offsets;
}

}  // namespace

TEST_CASE("Sampling: greedy rows give the first argmax", "[gpu][sampling]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    struct Case {
        int64_t batch, vocab, pad;
        size_t misalign;
    };
    for (const Case c : {Case{1, 128256, 0, 0}, Case{5, 50257, 0, 0}, Case{3, 7, 1, 0}, Case{70, 1000, 3, 1}}) {
        INFO(dtype_name(dtype) << " " << c.batch << "x" << c.vocab << " pad " << c.pad << " misalign " << c.misalign);
        const int64_t stride = c.vocab + c.pad;
        auto values = test::round_to(dtype, test::random_values(static_cast<size_t>(c.batch * c.vocab), 41, -8, 8));
        // Row 0: a tie for the max (the first wins); row 1 (if any): NaNs; row 2: all -inf.
        const int64_t last = c.vocab - 1;
        values[static_cast<size_t>(last)] = 9.0, values[static_cast<size_t>(last / 2)] = 9.0;
        if (c.batch > 1) values[static_cast<size_t>(c.vocab)] = NAN, values[static_cast<size_t>(c.vocab + last)] = NAN;
        if (c.batch > 2)
            for (int64_t i = 0; i < c.vocab; ++i) values[static_cast<size_t>(2 * c.vocab + i)] = -INFINITY;
        DeviceMatrix logits(dtype, c.batch, c.vocab, stride, c.misalign * dtype_size(dtype));
        logits.upload(values);
        std::vector<int64_t> want;
        for (int64_t r = 0; r < c.batch; ++r) want.push_back(host_argmax(&values[static_cast<size_t>(r * c.vocab)], c.vocab));
        SamplingProblem p{c.batch, c.vocab, dtype, stride, true};
        Sampling greedy(p);
        CHECK(run_sampling(greedy, logits, {}, {}) == want);
        // The same through the sampling op: temperature 0, or top-k 1.
        p.greedy = false;
        std::vector<RowParams> params(static_cast<size_t>(c.batch));
        for (size_t r = 0; r < params.size(); ++r) params[r] = r % 2 ? RowParams{0.0} : RowParams{0.8, 1};
        Sampling sampling(p);
        CHECK(run_sampling(sampling, logits, params, iota_offsets(c.batch)) == want);
    }
}

TEST_CASE("Sampling: tokens stay in the exact top-k / top-p / min-p set", "[gpu][sampling]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::fp32, DType::bf16);
    const int64_t vocab = GENERATE(int64_t{50257}, int64_t{128256});
    const int64_t batch = 64;
    INFO(dtype_name(dtype) << " vocab " << vocab);
    // Every row its own logits (a row read at another row's offset draws outside its set) and
    // its own parameters.
    const auto values = test::round_to(dtype, test::random_values(static_cast<size_t>(batch * vocab), 51, -6, 6));
    DeviceMatrix logits(dtype, batch, vocab);
    logits.upload(values);
    // top-k of 3000 leaves more tokens than the kernel keeps in shared memory: it reads the row.
    const RowParams kinds[] = {{1.0, 50, 1.0, 0.0}, {0.7, 0, 0.9, 0.0},    {1.3, 0, 1.0, 0.05},
                               {0.8, 200, 0.8, 0.01}, {1.0, 0, 1.0, 0.0},  {2.0, 7, 1.0, 0.0},
                               {0.5, 1000, 0.5, 0.0}, {1.0, 0, 0.0, 0.0},  {1.0, 3000, 0.9, 0.0}};
    std::vector<RowParams> params;
    std::vector<std::map<int64_t, double>> allowed;
    for (int64_t r = 0; r < batch; ++r) {
        params.push_back(kinds[r % 9]);
        allowed.push_back(allowed_tokens(&values[static_cast<size_t>(r * vocab)], vocab, params.back()));
    }
    Sampling op({batch, vocab, dtype, 0, false, 1234});
    for (int step = 0; step < 4; ++step) {
        const auto tokens = run_sampling(op, logits, params, iota_offsets(batch, step * batch));
        for (int64_t r = 0; r < batch; ++r) {
            const auto& row_allowed = allowed[static_cast<size_t>(r)];
            INFO("row " << r << " token " << tokens[static_cast<size_t>(r)] << " of " << row_allowed.size() << " allowed");
            CHECK(row_allowed.count(tokens[static_cast<size_t>(r)]) == 1);
        }
    }
}

TEST_CASE("Sampling: frequencies follow the distribution; draws repeat exactly", "[gpu][sampling]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const int64_t vocab = 1000, draws = 40000;
    const auto row = test::random_values(static_cast<size_t>(vocab), 61, -4, 4);
    for (const RowParams rp : {RowParams{0.7, 60, 1.0, 0.0}, RowParams{1.0, 0, 0.9, 0.0}, RowParams{1.0, 0, 1.0, 0.02},
                               RowParams{0.9, 100, 0.95, 0.01}}) {
        INFO("temperature " << rp.temperature << " top_k " << rp.top_k << " top_p " << rp.top_p << " min_p " << rp.min_p);
        // One row a draw: the same logits, offsets 0..draws-1 (each row's draw is its own).
        std::vector<double> values;
        for (int64_t r = 0; r < draws; ++r) values.insert(values.end(), row.begin(), row.end());
        DeviceMatrix logits(DType::fp32, draws, vocab);
        logits.upload(values);
        Sampling op({draws, vocab, DType::fp32, 0, false, 99});
        const std::vector<RowParams> params(static_cast<size_t>(draws), rp);
        const auto tokens = run_sampling(op, logits, params, std::vector<double>(static_cast<size_t>(draws), 5.0));
        CHECK(run_sampling(op, logits, params, std::vector<double>(static_cast<size_t>(draws), 5.0)) == tokens);
        const auto allowed = allowed_tokens(row.data(), vocab, rp);
        std::map<int64_t, int64_t> counts;
        for (int64_t t : tokens) ++counts[t];
        for (const auto& [token, count] : counts) CHECK(allowed.count(token) == 1);
        // Chi-square over the allowed tokens, those expected fewer than 5 times pooled.
        double chi2 = 0, pooled_expected = 0, pooled_seen = 0;
        int bins = 0;
        for (const auto& [token, prob] : allowed) {
            const double expected = prob * static_cast<double>(draws);
            const double seen = counts.count(token) ? static_cast<double>(counts[token]) : 0.0;
            if (expected < 5) {
                pooled_expected += expected, pooled_seen += seen;
                continue;
            }
            chi2 += (seen - expected) * (seen - expected) / expected, ++bins;
        }
        if (pooled_expected > 0) chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected, ++bins;
        const double df = std::max(1, bins - 1);
        INFO("chi-square " << chi2 << " over " << bins << " bins");
        CHECK(bins >= 10);
        CHECK(chi2 < df + 6 * std::sqrt(2 * df));  // about 6 sigma: a wrong distribution lands far past it
    }
}

TEST_CASE("Every Sampling config in the search space draws the same tokens", "[gpu][sampling]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    const int64_t batch = 200, vocab = 32003;  // rows alternate alignment
    const auto values = test::round_to(DType::bf16, test::random_values(static_cast<size_t>(batch * vocab), 71, -5, 5));
    DeviceMatrix logits(DType::bf16, batch, vocab);
    logits.upload(values);
    Sampling op({batch, vocab, DType::bf16, 0, false, 7});
    std::vector<RowParams> params;
    for (int64_t r = 0; r < batch; ++r)
        params.push_back({0.5 + 0.01 * static_cast<double>(r % 100), static_cast<int>(r % 90), 0.5 + 0.002 * static_cast<double>(r),
                          0.001 * static_cast<double>(r % 10)});
    const auto want = run_sampling(op, logits, params, iota_offsets(batch));
    for (int64_t r = 0; r < batch; ++r) {  // the heuristic's draws, every config's reference
        const auto row_allowed = allowed_tokens(&values[static_cast<size_t>(r * vocab)], vocab, params[static_cast<size_t>(r)]);
        INFO("row " << r << " token " << want[static_cast<size_t>(r)] << " of " << row_allowed.size() << " allowed");
        CHECK(row_allowed.count(want[static_cast<size_t>(r)]) == 1);
    }
    std::vector<double> t, k, tp, mp;
    for (const RowParams& rp : params)
        t.push_back(rp.temperature), k.push_back(rp.top_k), tp.push_back(rp.top_p), mp.push_back(rp.min_p);
    DeviceMatrix d_t(DType::fp32, 1, batch), d_k(DType::int32, 1, batch), d_tp(DType::fp32, 1, batch),
        d_mp(DType::fp32, 1, batch), d_offsets(DType::int32, 1, batch), d_tokens(DType::int32, 1, batch);
    d_t.upload(t), d_k.upload(k), d_tp.upload(tp), d_mp.upload(mp), d_offsets.upload(iota_offsets(batch));
    const std::vector<TensorArg> in{logits.data(), d_t.data(), d_k.data(), d_tp.data(), d_mp.data(), d_offsets.data()};
    const std::vector<OutputArg> out{d_tokens.data()};
    std::vector<Config> configs = op.model().search_space(runtime.device());
    configs.push_back({{"threads", 64}, {"vec", 1}});
    std::vector<detail::LaunchPlan> plans;
    for (const Config& config : configs)
        for (int vec : op.model().vector_widths(config)) plans.push_back(op.model().plan(config, vec, runtime.device()));
    test::build_kernels(runtime, plans);
    for (const Config& config : configs) {
        INFO("config " << tuning::config_text(config));
        const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, op.model().vector_widths(config)[0]);
        d_tokens.poison();
        op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
        std::vector<int64_t> got;
        for (double v : d_tokens.download()) got.push_back(static_cast<int64_t>(v));
        CHECK(got == want);  // integer weights: the draw does not depend on the order of the sums
    }
}
