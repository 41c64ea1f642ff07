// The MoE routing ops on a GPU, against host references computed from the same random inputs
// (never zeros), with poisoned outputs whose unwritten parts must stay poisoned.
//
// MoeTopK: ids exact (the reference in double picks the same experts with the same tie rule:
// lower index first), weights within 2e-5 (relative) of the double-precision weights. The kernel
// chooses by the logit itself where it can (exact), and by fp32 sigmoid + bias or fp32 group sums
// otherwise: a token whose reference decision (k-th against (k+1)-th choice, or the kept groups)
// is closer than 1e-5 may go either way, so such tokens (counted, and required rare) are only
// checked for distinct ids in range and weights that match the ids chosen. Exact ties (equal
// logits) must give the lower indices. Shapes: Mixtral (8 experts, k 2), Qwen3-30B-A3B (128, 8),
// DeepSeek-V3 (256, 8, sigmoid, 8 groups keep 4, bias, renormalize, x2.5), odd experts (60, 97),
// 512 experts with k 32, 1 to 16384 tokens, fp32 / fp16 / bf16 logits, strided rows.
//
// MoePermute: expert_offsets / expert_counts, row_map and every permuted row exactly as the host
// computes them; rows past the last offset (ids out of range), masked rows past a count and the
// gaps between rows stay poisoned. Hostile ids (-1, experts, INT_MIN, INT_MAX) route nothing.
// A second run with other ids and a CUDA graph replay check that the workspace comes back reset.
// fp8 rows' scales (one a token, or one per 128 elements) land beside their rows, exactly.
//
// MoeUnpermute: within the dtype's rounding of the double sum (fp32 accumulation), rows -1 and
// out of range skipped, accumulate into out. The whole chain topk -> permute -> (identity) ->
// unpermute gives x times the sum of each token's weights.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "cuda/driver.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/build_kernels.hpp"
#include "support/device_tensor.hpp"
#include "support/test_support.hpp"
#include "tileops/moe_routing.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

constexpr double kDecisionMargin = 1e-5;  // closer reference decisions may go either way in fp32
constexpr double kWeightTolerance = 2e-5;

// Uniform values in [-scale, scale], never zero, rounded to the dtype. With `skew`, expert e's
// logits are shifted by skew * (e % 7 == 0): a few hot experts take most tokens.
std::vector<double> logits_of(DType dtype, int64_t tokens, int64_t experts, uint64_t seed, double scale = 3.0,
                              double skew = 0.0) {
    std::vector<double> x = test::random_values(static_cast<size_t>(tokens * experts), seed, -scale, scale);
    for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] == 0) x[i] = 0.25;
        if (skew != 0 && (i % static_cast<size_t>(experts)) % 7 == 0) x[i] += skew;
    }
    return test::round_to(dtype, x);
}

struct TopKReference {
    std::vector<int> ids;        // [tokens, k]
    std::vector<double> weights;  // [tokens, k]
    std::vector<char> ambiguous;  // per token: which experts (or groups) win is closer than kDecisionMargin
    std::vector<double> choice;   // [tokens, experts]: what experts are chosen by, in double
};

// The weights of a token's chosen `ids` (the op's definition, in double).
std::vector<double> weights_of(const MoeTopKProblem& p, const double* x, const std::vector<int>& ids) {
    const int64_t E = p.experts;
    std::vector<double> s(static_cast<size_t>(E));
    if (p.scoring == MoeScoring::softmax) {
        const double m = *std::max_element(x, x + E);
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += s[e] = std::exp(x[e] - m);
        for (double& v : s) v /= sum;
    } else {
        for (int64_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-x[e]));
    }
    std::vector<double> w;
    double chosen = 0;
    for (int id : ids) {
        w.push_back(s[static_cast<size_t>(id)]);
        chosen += w.back();
    }
    for (double& v : w) v = (p.renormalize ? v / chosen : v) * p.routed_scaling_factor;
    return w;
}

TopKReference topk_reference(const MoeTopKProblem& p, const std::vector<double>& logits, const std::vector<double>& bias) {
    const int64_t E = p.experts, K = p.k;
    TopKReference ref;
    ref.ambiguous.assign(static_cast<size_t>(p.tokens), 0);
    for (int64_t t = 0; t < p.tokens; ++t) {
        const double* x = &logits[static_cast<size_t>(t * E)];
        std::vector<double> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
        const double m = *std::max_element(x, x + E);
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(x[e] - m);
        for (int64_t e = 0; e < E; ++e) {
            s[e] = p.scoring == MoeScoring::softmax ? std::exp(x[e] - m) / sum : 1.0 / (1.0 + std::exp(-x[e]));
            choice[e] = p.correction_bias ? s[e] + bias[e] : x[e];
        }
        bool unsure = false;
        std::vector<char> eligible(static_cast<size_t>(E), 1);
        if (p.n_group > 1) {
            const int64_t size = E / p.n_group;
            std::vector<std::pair<double, int64_t>> groups;
            for (int64_t g = 0; g < p.n_group; ++g) {
                std::vector<double> member;
                for (int64_t e = g * size; e < (g + 1) * size; ++e) member.push_back(p.correction_bias ? choice[e] : s[e]);
                std::partial_sort(member.begin(), member.begin() + 2, member.end(), std::greater<>());
                groups.push_back({member[0] + member[1], g});
            }
            std::stable_sort(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.first > b.first; });
            // Exactly equal sums are equal in fp32 too (the same values): the tie rule decides them.
            if (p.topk_group < p.n_group) {
                const double gap = groups[p.topk_group - 1].first - groups[p.topk_group].first;
                unsure = gap > 0 && gap < kDecisionMargin;
            }
            std::fill(eligible.begin(), eligible.end(), 0);
            for (int64_t r = 0; r < p.topk_group; ++r)
                for (int64_t e = groups[r].second * size; e < (groups[r].second + 1) * size; ++e) eligible[e] = 1;
        }
        std::vector<int> order;
        for (int64_t e = 0; e < E; ++e)
            if (eligible[e]) order.push_back(static_cast<int>(e));
        // Descending choice; equal choices in ascending index (stable on an ascending list).
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return choice[a] > choice[b]; });
        if (p.correction_bias && K < static_cast<int64_t>(order.size())) {  // fp32 sums: the k-th and the next may swap
            const double gap = choice[order[K - 1]] - choice[order[K]];
            unsure = unsure || (gap > 0 && gap < kDecisionMargin);
        }
        std::vector<int> ids(order.begin(), order.begin() + K);
        const std::vector<double> w = weights_of(p, x, ids);
        ref.ids.insert(ref.ids.end(), ids.begin(), ids.end());
        ref.weights.insert(ref.weights.end(), w.begin(), w.end());
        ref.ambiguous[static_cast<size_t>(t)] = unsure;
        ref.choice.insert(ref.choice.end(), choice.begin(), choice.end());
    }
    return ref;
}

struct TopKOutcome {
    int64_t ambiguous = 0;
};

// Runs MoeTopK on logits (as uploaded) and checks ids and weights against the reference.
TopKOutcome run_topk(MoeTopKProblem p, const std::vector<double>& logits, int64_t pad = 0, uint64_t seed = 5) {
    Runtime& runtime = shared_runtime();
    p.logits_stride = p.experts + pad;
    INFO("moe_topk " << p.tokens << "x" << p.experts << "x" << p.k << " " << dtype_name(p.dtype) << " "
                     << moe_scoring_name(p.scoring) << (p.renormalize ? " renorm" : "") << " groups " << p.n_group << "/"
                     << p.topk_group << (p.correction_bias ? " bias" : "") << " pad " << pad);
    std::vector<double> bias = test::random_values(static_cast<size_t>(p.experts), seed + 1, -0.5, 0.5);
    for (double& b : bias) b = static_cast<float>(b);
    DeviceMatrix d_logits(p.dtype, p.tokens, p.experts, p.logits_stride);
    d_logits.upload(logits);
    DeviceMatrix d_bias(DType::fp32, 1, p.experts);
    d_bias.upload(bias);
    DeviceMatrix d_weights(DType::fp32, p.tokens + 1, p.k), d_ids(DType::int32, p.tokens + 1, p.k);  // a guard row
    MoeTopK op(p);
    if (p.correction_bias)
        op.run(runtime, {d_logits.data(), d_bias.data()}, {d_weights.data(), d_ids.data()});
    else
        op.run(runtime, {d_logits.data()}, {d_weights.data(), d_ids.data()});
    const std::vector<double> weights = d_weights.download(), ids = d_ids.download();
    const TopKReference ref = topk_reference(p, logits, bias);
    TopKOutcome outcome;
    int64_t wrong_ids = 0, wrong_weights = 0, invalid = 0;
    for (int64_t t = 0; t < p.tokens; ++t) {
        std::vector<int> got;
        for (int64_t j = 0; j < p.k; ++j) got.push_back(static_cast<int>(ids[static_cast<size_t>(t * p.k + j)]));
        std::vector<int> sorted = got;
        std::sort(sorted.begin(), sorted.end());
        const bool valid = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() && sorted.front() >= 0 &&
                           sorted.back() < p.experts;
        if (!valid) {
            if (++invalid <= 3) UNSCOPED_INFO("token " << t << ": ids not distinct or out of range");
            continue;
        }
        const std::vector<int> want(ref.ids.begin() + t * p.k, ref.ids.begin() + (t + 1) * p.k);
        const bool ambiguous = ref.ambiguous[static_cast<size_t>(t)] != 0;
        outcome.ambiguous += ambiguous;
        // Near-equal choices (fp32 sigmoid + bias) may come in either order: same set, and each
        // position's choice within the margin of the reference's.
        bool reordered = got != want && std::is_permutation(got.begin(), got.end(), want.begin());
        for (int64_t j = 0; reordered && j < p.k; ++j)
            reordered = std::fabs(ref.choice[static_cast<size_t>(t * p.experts + got[j])] -
                                  ref.choice[static_cast<size_t>(t * p.experts + want[j])]) < kDecisionMargin;
        if (got != want && !ambiguous && !reordered) {
            if (++wrong_ids <= 3) UNSCOPED_INFO("token " << t << ": ids differ from the reference's, first " << got[0] << " vs " << want[0]);
            continue;
        }
        // The weights of the ids chosen (the reference's, or the kernel's where the choice was a near tie).
        const std::vector<double> w = weights_of(p, &logits[static_cast<size_t>(t * p.experts)], got);
        for (int64_t j = 0; j < p.k; ++j) {
            const double g = weights[static_cast<size_t>(t * p.k + j)];
            if (!(std::fabs(g - w[j]) <= kWeightTolerance * std::fabs(w[j]) + 1e-30) && ++wrong_weights <= 3)
                UNSCOPED_INFO("token " << t << " choice " << j << ": weight " << g << ", want " << w[j]);
        }
    }
    CHECK(invalid == 0);
    CHECK(wrong_ids == 0);
    CHECK(wrong_weights == 0);
    for (size_t i = static_cast<size_t>(p.tokens * p.k); i < weights.size(); ++i) CHECK(std::isnan(weights[i]));
    for (size_t i = static_cast<size_t>(p.tokens * p.k); i < ids.size(); ++i) CHECK(ids[i] == -1);  // poison bits
    return outcome;
}

MoeTopKProblem topk(int64_t tokens, int64_t experts, int64_t k, DType dtype, MoeScoring scoring, bool renormalize) {
    MoeTopKProblem p;
    p.tokens = tokens, p.experts = experts, p.k = k, p.dtype = dtype, p.scoring = scoring, p.renormalize = renormalize;
    return p;
}

MoeTopKProblem deepseek(int64_t tokens, DType dtype = DType::bf16) {
    MoeTopKProblem p = topk(tokens, 256, 8, dtype, MoeScoring::sigmoid, true);
    p.n_group = 8, p.topk_group = 4, p.correction_bias = true, p.routed_scaling_factor = 2.5f;
    return p;
}

// ---- permute ----------------------------------------------------------------------------------

struct PermuteReference {
    std::vector<int> info;     // offsets [experts + 1] or counts [experts]
    std::vector<int> row_map;  // [tokens, k]
};

PermuteReference permute_reference(const MoePermuteProblem& p, const std::vector<int>& ids) {
    const int64_t E = p.experts;
    std::vector<int64_t> count(static_cast<size_t>(E), 0);
    std::vector<int64_t> rank(ids.size(), -1);
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= 0 && ids[i] < E) rank[i] = count[static_cast<size_t>(ids[i])]++;
    PermuteReference ref;
    ref.row_map.assign(ids.size(), -1);
    if (p.layout == MoeLayout::contiguous) {
        ref.info.assign(static_cast<size_t>(E + 1), 0);
        for (int64_t e = 0; e < E; ++e) ref.info[e + 1] = ref.info[e] + static_cast<int>(count[e]);
        for (size_t i = 0; i < ids.size(); ++i)
            if (rank[i] >= 0) ref.row_map[i] = ref.info[static_cast<size_t>(ids[i])] + static_cast<int>(rank[i]);
    } else {
        for (int64_t e = 0; e < E; ++e) ref.info.push_back(static_cast<int>(std::min<int64_t>(count[e], p.capacity)));
        for (size_t i = 0; i < ids.size(); ++i)
            if (rank[i] >= 0 && rank[i] < p.capacity) ref.row_map[i] = static_cast<int>(ids[i] * p.capacity + rank[i]);
    }
    return ref;
}

// Random ids in [0, experts) (a few hot experts when skewed), with hostile ones where asked.
std::vector<int> ids_of(int64_t tokens, int64_t k, int64_t experts, uint64_t seed, bool hostile, bool skewed = false) {
    const std::vector<double> u = test::random_values(static_cast<size_t>(tokens * k), seed, 0.0, 1.0);
    std::vector<int> ids(u.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const double v = skewed ? u[i] * u[i] * u[i] : u[i];
        ids[i] = std::min(static_cast<int>(v * static_cast<double>(experts)), static_cast<int>(experts - 1));
    }
    if (hostile) {
        const int bad[] = {-1, static_cast<int>(experts), INT_MIN, INT_MAX, static_cast<int>(experts) + 1000};
        for (size_t i = 3; i < ids.size(); i += 7) ids[i] = bad[(i / 7) % 5];
    }
    return ids;
}

std::vector<double> as_doubles(const std::vector<int>& v) { return {v.begin(), v.end()}; }

struct PermuteShape {
    int64_t tokens, hidden, experts, k;
    DType dtype = DType::bf16;
    int64_t capacity = 0;  // masked when > 0
    int64_t x_pad = 0, out_pad = 0;
    size_t x_misalign = 0, out_misalign = 0;  // elements off a 16-byte boundary
    bool hostile = false, skewed = false;
};

MoePermuteProblem permute_problem(const PermuteShape& s) {
    MoePermuteProblem p{s.tokens, s.hidden, s.experts, s.k, s.dtype};
    if (s.capacity > 0) p.layout = MoeLayout::masked, p.capacity = s.capacity;
    p.x_stride = s.hidden + s.x_pad;
    p.out_stride = s.hidden + s.out_pad;
    return p;
}

// Buffers of a permute problem, poisoned; row_map pre-filled with a value no run writes.
struct PermuteBuffers {
    PermuteBuffers(const MoePermuteProblem& p, const PermuteShape& s)
        : x(p.dtype, p.tokens, p.hidden, p.x_stride, s.x_misalign * dtype_size(p.dtype)),
          ids(DType::int32, p.tokens, p.k),
          out(p.dtype, rows(p), p.hidden, p.out_stride, s.out_misalign * dtype_size(p.dtype)),
          info(DType::int32, 1, p.layout == MoeLayout::masked ? p.experts : p.experts + 1),
          row_map(DType::int32, p.tokens, p.k) {}
    static int64_t rows(const MoePermuteProblem& p) {
        return p.layout == MoeLayout::masked ? p.experts * p.capacity : p.tokens * p.k;
    }
    void reset(const MoePermuteProblem& p) {
        out.poison();
        info.poison();
        row_map.upload(std::vector<double>(static_cast<size_t>(p.tokens * p.k), 7777777.0));
    }
    DeviceMatrix x, ids, out, info, row_map;
};

// Checks the permute's outputs against the host's, given the x and ids it ran on.
void check_permute(const MoePermuteProblem& p, PermuteBuffers& b, const std::vector<double>& x,
                   const std::vector<int>& ids) {
    const PermuteReference ref = permute_reference(p, ids);
    const std::vector<double> info = b.info.download(), row_map = b.row_map.download(), out = b.out.download();
    CHECK(info == as_doubles(ref.info));
    int64_t wrong_map = 0;
    for (size_t i = 0; i < ids.size(); ++i)
        if (row_map[i] != ref.row_map[i] && ++wrong_map <= 3)
            UNSCOPED_INFO("entry " << i << " (id " << ids[i] << "): row " << row_map[i] << ", want " << ref.row_map[i]);
    CHECK(wrong_map == 0);
    // Every permuted row a copy of its token's row; every other row still poison.
    const int64_t rows = PermuteBuffers::rows(p);
    std::vector<int64_t> source(static_cast<size_t>(rows), -1);
    for (size_t i = 0; i < ids.size(); ++i)
        if (ref.row_map[i] >= 0) source[static_cast<size_t>(ref.row_map[i])] = static_cast<int64_t>(i) / p.k;
    int64_t wrong_rows = 0, written_unrouted = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const double* got = &out[static_cast<size_t>(r * p.hidden)];
        if (source[r] < 0) {
            for (int64_t c = 0; c < p.hidden; ++c)
                if (!std::isnan(got[c])) {
                    ++written_unrouted;
                    break;
                }
            continue;
        }
        if (!std::equal(got, got + p.hidden, &x[static_cast<size_t>(source[r] * p.hidden)]) && ++wrong_rows <= 3)
            UNSCOPED_INFO("row " << r << " is not token " << source[r] << "'s row");
    }
    CHECK(wrong_rows == 0);
    CHECK(written_unrouted == 0);
    CHECK(b.out.gaps_untouched());
}

void run_permute(const PermuteShape& s, uint64_t seed) {
    Runtime& runtime = shared_runtime();
    const MoePermuteProblem p = permute_problem(s);
    INFO("moe_permute " << s.tokens << "x" << s.hidden << "x" << s.experts << "x" << s.k << " " << dtype_name(s.dtype)
                        << " capacity " << s.capacity << " pads " << s.x_pad << "/" << s.out_pad << " misaligned "
                        << s.x_misalign << "/" << s.out_misalign << (s.hostile ? " hostile" : "")
                        << (s.skewed ? " skewed" : ""));
    PermuteBuffers b(p, s);
    const std::vector<double> x =
        test::round_to(p.dtype, logits_of(DType::fp32, p.tokens, p.hidden, seed, p.dtype == DType::fp8_e4m3 ? 400.0 : 2.0));
    b.x.upload(x);
    MoePermute op(p);
    // Twice, with other ids the second time: the routing kernel's counter must be back at zero.
    for (uint64_t round = 0; round < 2; ++round) {
        const std::vector<int> ids = ids_of(p.tokens, p.k, p.experts, seed + 10 + round, s.hostile, s.skewed);
        b.ids.upload(as_doubles(ids));
        b.reset(p);
        op.run(runtime, {b.x.data(), b.ids.data()}, {b.out.data(), b.info.data(), b.row_map.data()});
        check_permute(p, b, x, ids);
    }
}

// fp8 rows with their scales: the rows as run_permute checks them, and perm_scales[b, row] equal
// to x_scales[b, token] for every routed row, the rest still poison.
void run_scaled_permute(const PermuteShape& s, int64_t scale_blocks, int64_t scales_pad, uint64_t seed) {
    Runtime& runtime = shared_runtime();
    MoePermuteProblem p = permute_problem(s);
    p.scale_blocks = scale_blocks;
    p.scales_stride = scale_blocks > 1 ? p.tokens + scales_pad : 0;
    INFO("moe_permute " << s.tokens << "x" << s.hidden << "x" << s.experts << "x" << s.k << " capacity " << s.capacity
                        << ", " << scale_blocks << " scales a row, their stride padded by " << scales_pad);
    PermuteBuffers b(p, s);
    const int64_t blocks = scale_blocks, rows = PermuteBuffers::rows(p);
    DeviceMatrix scales(DType::fp32, blocks, p.tokens, blocks > 1 ? p.scales_stride : 0);
    DeviceMatrix perm_scales(DType::fp32, blocks, rows);
    const std::vector<double> x = test::round_to(p.dtype, logits_of(DType::fp32, p.tokens, p.hidden, seed, 400.0));
    const std::vector<double> scale =
        test::round_to(DType::fp32, test::random_values(static_cast<size_t>(blocks * p.tokens), seed + 1, 1e-4, 1.0));
    b.x.upload(x);
    scales.upload(scale);
    const std::vector<int> ids = ids_of(p.tokens, p.k, p.experts, seed + 10, s.hostile, s.skewed);
    b.ids.upload(as_doubles(ids));
    b.reset(p);
    MoePermute op(p);
    op.run(runtime, {b.x.data(), b.ids.data(), scales.data()},
           {b.out.data(), b.info.data(), b.row_map.data(), perm_scales.data()});
    check_permute(p, b, x, ids);

    const PermuteReference ref = permute_reference(p, ids);
    std::vector<int64_t> source(static_cast<size_t>(rows), -1);
    for (size_t i = 0; i < ids.size(); ++i)
        if (ref.row_map[i] >= 0) source[static_cast<size_t>(ref.row_map[i])] = static_cast<int64_t>(i) / p.k;
    const std::vector<double> got = perm_scales.download();
    int64_t wrong = 0, written_unrouted = 0;
    for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t r = 0; r < rows; ++r) {
            const double value = got[static_cast<size_t>(blk * rows + r)];
            if (source[r] < 0) {
                written_unrouted += std::isnan(value) ? 0 : 1;
            } else if (value != scale[static_cast<size_t>(blk * p.tokens + source[r])] && ++wrong <= 3) {
                UNSCOPED_INFO("block " << blk << " of row " << r << ": " << value << ", want token " << source[r] << "'s "
                                       << scale[static_cast<size_t>(blk * p.tokens + source[r])]);
            }
        }
    CHECK(wrong == 0);
    CHECK(written_unrouted == 0);
    CHECK(scales.gaps_untouched());
}

// ---- unpermute ---------------------------------------------------------------------------------

struct UnpermuteShape {
    int64_t tokens, hidden, k;
    DType dtype = DType::bf16;
    int64_t y_rows = 0;  // 0: tokens x k
    bool accumulate = false;
    int64_t y_pad = 0, out_pad = 0;
    size_t y_misalign = 0, out_misalign = 0;
    bool hostile = false;  // row_map holds -1 and rows out of range
};

double rounding_of(DType dtype) { return dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

void run_unpermute(const UnpermuteShape& s, uint64_t seed) {
    Runtime& runtime = shared_runtime();
    MoeUnpermuteProblem p{s.tokens, s.hidden, s.k, s.dtype, s.y_rows, s.accumulate};
    p.y_stride = s.hidden + s.y_pad;
    p.out_stride = s.hidden + s.out_pad;
    const int64_t y_rows = s.y_rows ? s.y_rows : s.tokens * s.k;
    INFO("moe_unpermute " << s.tokens << "x" << s.hidden << "x" << s.k << " " << dtype_name(s.dtype) << " y_rows "
                          << y_rows << (s.accumulate ? " accumulate" : "") << " pads " << s.y_pad << "/" << s.out_pad
                          << " misaligned " << s.y_misalign << "/" << s.out_misalign << (s.hostile ? " hostile" : ""));
    const std::vector<double> y = logits_of(s.dtype, y_rows, s.hidden, seed, 2.0);
    std::vector<double> weights = test::random_values(static_cast<size_t>(s.tokens * s.k), seed + 1, -1.0, 1.0);
    for (double& w : weights) w = static_cast<float>(w == 0 ? 0.5 : w);
    // A permutation of y's rows (each read once), some entries dropped or hostile.
    std::vector<double> order = test::random_values(static_cast<size_t>(y_rows), seed + 2, 0.0, 1.0);
    std::vector<int> rows(static_cast<size_t>(y_rows));
    std::iota(rows.begin(), rows.end(), 0);
    std::sort(rows.begin(), rows.end(), [&](int a, int b) { return order[a] < order[b]; });
    std::vector<int> row_map(static_cast<size_t>(s.tokens * s.k), -1);
    for (size_t i = 0; i < row_map.size() && i < rows.size(); ++i) row_map[i] = rows[i];
    if (s.hostile) {
        const int bad[] = {-1, static_cast<int>(y_rows), INT_MIN, INT_MAX, -7};
        for (size_t i = 2; i < row_map.size(); i += 5) row_map[i] = bad[(i / 5) % 5];
    }
    const std::vector<double> old_out = logits_of(s.dtype, s.tokens, s.hidden, seed + 3, 2.0);

    DeviceMatrix d_y(s.dtype, y_rows, s.hidden, p.y_stride, s.y_misalign * dtype_size(s.dtype));
    DeviceMatrix d_map(DType::int32, s.tokens, s.k), d_weights(DType::fp32, s.tokens, s.k);
    DeviceMatrix d_out(s.dtype, s.tokens + 1, s.hidden, p.out_stride, s.out_misalign * dtype_size(s.dtype));
    d_y.upload(y);
    d_map.upload(as_doubles(row_map));
    d_weights.upload(weights);
    if (s.accumulate) {  // out's old rows, and a guard row of zeros (gaps stay poisoned)
        std::vector<double> with_guard = old_out;
        with_guard.resize(static_cast<size_t>((s.tokens + 1) * s.hidden), 0.0);
        d_out.upload(with_guard);
    }
    MoeUnpermute op(p);
    op.run(runtime, {d_y.data(), d_map.data(), d_weights.data()}, {d_out.data()});
    const std::vector<double> out = d_out.download();
    int64_t wrong = 0;
    for (int64_t t = 0; t < s.tokens; ++t)
        for (int64_t c = 0; c < s.hidden; ++c) {
            double want = s.accumulate ? old_out[static_cast<size_t>(t * s.hidden + c)] : 0.0;
            double magnitude = std::fabs(want);
            for (int64_t j = 0; j < s.k; ++j) {
                const int r = row_map[static_cast<size_t>(t * s.k + j)];
                if (r < 0 || r >= y_rows) continue;
                const double term = weights[static_cast<size_t>(t * s.k + j)] * y[static_cast<size_t>(r * s.hidden + c)];
                want += term;
                magnitude += std::fabs(term);
            }
            const double got = out[static_cast<size_t>(t * s.hidden + c)];
            if (!(std::fabs(got - want) <= rounding_of(s.dtype) * std::fabs(want) + 1e-6 * magnitude + 1e-30) && ++wrong <= 3)
                UNSCOPED_INFO("token " << t << " col " << c << ": " << got << ", want " << want);
        }
    CHECK(wrong == 0);
    bool guard = true;  // the row past the last stays what it was
    for (int64_t c = 0; c < s.hidden; ++c)
        guard &= s.accumulate ? out[static_cast<size_t>(s.tokens * s.hidden + c)] == 0.0
                              : std::isnan(out[static_cast<size_t>(s.tokens * s.hidden + c)]);
    CHECK(guard);
    CHECK(d_out.gaps_untouched());
}

}  // namespace

TEST_CASE("MoeTopK matches a double-precision reference on real routers", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::bf16, DType::fp16, DType::fp32);
    int64_t ambiguous = 0, tokens = 0;
    for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{333}, int64_t{4096}}) {
        const auto run = [&](const MoeTopKProblem& p, int64_t pad = 0, double skew = 0.0) {
            ambiguous += run_topk(p, logits_of(dtype, p.tokens, p.experts, 100 + static_cast<uint64_t>(p.experts), 3.0, skew), pad).ambiguous;
            tokens += p.tokens;
        };
        run(topk(n, 8, 2, dtype, MoeScoring::softmax, true));    // Mixtral
        run(topk(n, 128, 8, dtype, MoeScoring::softmax, true));  // Qwen3-30B-A3B
        run(deepseek(n, dtype));                                 // DeepSeek-V3
        run(topk(n, 60, 4, dtype, MoeScoring::softmax, false), 3);
        run(topk(n, 97, 8, dtype, MoeScoring::sigmoid, false), 1, 4.0);  // skewed
        run(topk(n, 512, 32, dtype, MoeScoring::softmax, true));
        run(topk(n, 64, 1, dtype, MoeScoring::sigmoid, true));  // k = 1: the weight renormalizes to 1
        MoeTopKProblem grouped = topk(n, 96, 6, dtype, MoeScoring::softmax, false);
        grouped.n_group = 12, grouped.topk_group = 3;  // groups of 8, softmax scores
        run(grouped, 5);
        MoeTopKProblem biased = topk(n, 160, 6, dtype, MoeScoring::sigmoid, true);
        biased.correction_bias = true;  // a bias without groups
        run(biased);
    }
    run_topk(topk(16384, 128, 8, dtype, MoeScoring::softmax, true), logits_of(dtype, 16384, 128, 9));
    run_topk(deepseek(16384, dtype), logits_of(dtype, 16384, 256, 10));
    INFO(ambiguous << " of " << tokens << " tokens had a decision within " << kDecisionMargin);
    CHECK(ambiguous * 100 <= tokens);
}

TEST_CASE("MoeTopK breaks exact ties toward the lower expert index", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    for (const MoeScoring scoring : {MoeScoring::softmax, MoeScoring::sigmoid}) {
        // Every logit of a row equal (rows of different values): the first k experts, in order.
        MoeTopKProblem p = topk(40, 97, 8, DType::bf16, scoring, true);
        std::vector<double> x(static_cast<size_t>(40 * 97));
        for (size_t i = 0; i < x.size(); ++i) x[i] = 0.125 * static_cast<double>(i / 97 % 9) - 0.5;
        run_topk(p, x);
        // Pairs of equal logits: the lower index of each pair first.
        std::vector<double> pairs = logits_of(DType::bf16, 40, 97, 77);
        for (int64_t t = 0; t < 40; ++t)
            for (int64_t e = 1; e < 97; e += 2) pairs[static_cast<size_t>(t * 97 + e)] = pairs[static_cast<size_t>(t * 97 + e - 1)];
        run_topk(p, pairs);
    }
    // DeepSeek-V3 with equal groups: every group's experts the same scores; the first groups kept.
    MoeTopKProblem p = deepseek(8);
    p.correction_bias = false;
    std::vector<double> x(static_cast<size_t>(8 * 256));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25 * static_cast<double>(i % 32 % 5) - 0.5;
    run_topk(p, x);
}

TEST_CASE("MoePermute places every row as the host does, contiguous and masked, hostile ids too", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::bf16, DType::fp16, DType::fp8_e4m3);
    for (const PermuteShape& s : {
             PermuteShape{1, 7168, 256, 8, dtype},                       // a decode step
             PermuteShape{64, 7168, 256, 8, dtype},
             PermuteShape{4096, 7168, 256, 8, dtype},                    // DeepSeek-V3's serving batch
             PermuteShape{512, 4096, 8, 2, dtype},                       // Mixtral
             PermuteShape{777, 2048, 128, 8, dtype, 0, 0, 0, 0, 0, false, true},  // Qwen3, skewed
             PermuteShape{16384, 64, 60, 4, dtype},                      // 128 runs of several rounds
             PermuteShape{100001, 16, 97, 3, dtype},                     // more entries than 128 runs x ...
             PermuteShape{33, 2050, 512, 32, dtype},                     // 512 experts, k = 32
             PermuteShape{300, 1000, 64, 6, dtype, 0, 8, 24, 0, 0, true},         // strided, hostile ids
             PermuteShape{300, 1000, 64, 6, dtype, 0, 0, 0, 1, 0},       // x one element off its vector
             PermuteShape{300, 1000, 64, 6, dtype, 0, 0, 0, 0, 3},       // out three elements off
             PermuteShape{7, 3, 5, 5, dtype, 0, 1, 2, 1, 1, true},       // tiny, odd everything
             PermuteShape{64, 7168, 256, 8, dtype, 4},                   // masked: drops
             PermuteShape{200, 1024, 16, 4, dtype, 500, 0, 8, 0, 0, true},  // masked, roomy, hostile
             PermuteShape{1000, 512, 8, 2, dtype, 100, 0, 0, 0, 0, false, true},  // masked, skewed: hot experts drop
         })
        run_permute(s, 40 + static_cast<uint64_t>(s.tokens));
}

TEST_CASE("MoePermute carries fp8 rows' scales along, per token and in 1 x 128 blocks", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType fp8 = DType::fp8_e4m3;
    // DeepSeek-V3's serving batch and a decode step, contiguous and masked (with drops), a hidden
    // size that leaves a short last block, hostile ids, padded scale rows.
    run_scaled_permute(PermuteShape{4096, 7168, 256, 8, fp8}, 56, 0, 1);
    run_scaled_permute(PermuteShape{4096, 7168, 256, 8, fp8}, 1, 0, 2);
    run_scaled_permute(PermuteShape{1, 7168, 256, 8, fp8}, 56, 0, 3);
    run_scaled_permute(PermuteShape{64, 7168, 256, 8, fp8, 4}, 56, 0, 4);
    run_scaled_permute(PermuteShape{64, 7168, 256, 8, fp8, 128}, 1, 0, 5);
    run_scaled_permute(PermuteShape{300, 1000, 64, 6, fp8, 0, 8, 24, 0, 0, true}, 8, 5, 6);
    run_scaled_permute(PermuteShape{33, 2050, 512, 32, fp8}, 17, 3, 7);
    run_scaled_permute(PermuteShape{7, 3, 5, 5, fp8, 0, 1, 2, 1, 1, true}, 1, 0, 8);
}

TEST_CASE("MoePermute's workspace comes back reset: run after run and from a CUDA graph", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    for (const int64_t capacity : {int64_t{0}, int64_t{48}}) {
        const PermuteShape s{2048, 1024, 64, 8, DType::bf16, capacity};
        const MoePermuteProblem p = permute_problem(s);
        PermuteBuffers b(p, s);
        const std::vector<double> x = logits_of(DType::bf16, p.tokens, p.hidden, 3, 2.0);
        b.x.upload(x);
        MoePermute op(p);
        for (uint64_t round = 0; round < 4; ++round) {  // eager: hostile and skewed ids by turns
            const std::vector<int> ids = ids_of(p.tokens, p.k, p.experts, 60 + round, round % 2 == 1, round >= 2);
            b.ids.upload(as_doubles(ids));
            b.reset(p);
            op.run(runtime, {b.x.data(), b.ids.data()}, {b.out.data(), b.info.data(), b.row_map.data()});
            check_permute(p, b, x, ids);
        }
        const auto& cu = cuda::driver();
        CUstream stream = nullptr;
        TILEOPS_CU_CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
        CUgraph graph = nullptr;
        CUgraphExec exec = nullptr;
        TILEOPS_CU_CHECK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        op.run(runtime, {b.x.data(), b.ids.data()}, {b.out.data(), b.info.data(), b.row_map.data()}, stream);
        TILEOPS_CU_CHECK(cu.cuStreamEndCapture(stream, &graph));
        TILEOPS_CU_CHECK(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
        for (uint64_t round = 0; round < 3; ++round) {
            const std::vector<int> ids = ids_of(p.tokens, p.k, p.experts, 70 + round, round == 1, round == 2);
            b.ids.upload(as_doubles(ids));
            b.reset(p);
            TILEOPS_CU_CHECK(cu.cuGraphLaunch(exec, stream));
            TILEOPS_CU_CHECK(cu.cuStreamSynchronize(stream));
            check_permute(p, b, x, ids);
        }
        cu.cuGraphExecDestroy(exec);
        cu.cuGraphDestroy(graph);
        cu.cuStreamDestroy(stream);
    }
}

TEST_CASE("MoeUnpermute matches a double-precision weighted sum", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::bf16, DType::fp16);
    for (const UnpermuteShape& s : {
             UnpermuteShape{1, 7168, 8, dtype},
             UnpermuteShape{64, 7168, 8, dtype, 256 * 4, false, 0, 0, 0, 0, true},  // masked rows, drops
             UnpermuteShape{4096, 7168, 8, dtype},
             UnpermuteShape{512, 4096, 2, dtype, 0, true},                // accumulate (a residual)
             UnpermuteShape{777, 2048, 8, dtype, 0, false, 0, 0, 0, 0, true},
             UnpermuteShape{33, 2050, 32, dtype},
             UnpermuteShape{300, 1000, 6, dtype, 0, true, 8, 24, 0, 0, true},  // strided
             UnpermuteShape{300, 1000, 6, dtype, 0, false, 0, 0, 1, 0},   // y one element off
             UnpermuteShape{300, 1000, 5, dtype, 0, true, 0, 0, 0, 3},    // out three elements off
             UnpermuteShape{7, 3, 5, dtype, 0, false, 1, 2, 1, 1, true},
             UnpermuteShape{100001, 16, 3, dtype},
         })
        run_unpermute(s, 90 + static_cast<uint64_t>(s.tokens));
}

TEST_CASE("MoE routing end to end: topk, permute, identity experts, unpermute", "[gpu][moe_routing]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    for (const int64_t capacity : {int64_t{0}, int64_t{1000}}) {  // masked: room for every token, no drops
        const int64_t tokens = 1000, hidden = capacity ? 512 : 7168, experts = 256, k = 8;
        const MoeTopKProblem router = deepseek(tokens);
        const std::vector<double> logits = logits_of(DType::bf16, tokens, experts, 5);
        const std::vector<double> bias = test::random_values(experts, 6, -0.5, 0.5);
        const std::vector<double> x = logits_of(DType::bf16, tokens, hidden, 7, 2.0);
        DeviceMatrix d_logits(DType::bf16, tokens, experts), d_bias(DType::fp32, 1, experts);
        DeviceMatrix d_weights(DType::fp32, tokens, k), d_ids(DType::int32, tokens, k), d_x(DType::bf16, tokens, hidden);
        d_logits.upload(logits);
        d_bias.upload(bias);
        d_x.upload(x);
        // Named ops: each lives until the results are read (the permute's workspace with it).
        MoeTopK route(router);
        route.run(runtime, {d_logits.data(), d_bias.data()}, {d_weights.data(), d_ids.data()});
        MoePermuteProblem pp{tokens, hidden, experts, k};
        if (capacity) pp.layout = MoeLayout::masked, pp.capacity = capacity;
        const int64_t rows = capacity ? experts * capacity : tokens * k;
        DeviceMatrix d_perm(DType::bf16, rows, hidden), d_info(DType::int32, 1, capacity ? experts : experts + 1);
        DeviceMatrix d_map(DType::int32, tokens, k), d_out(DType::bf16, tokens, hidden);
        MoePermute permute(pp);
        permute.run(runtime, {d_x.data(), d_ids.data()}, {d_perm.data(), d_info.data(), d_map.data()});
        MoeUnpermute unpermute({tokens, hidden, k, DType::bf16, rows});
        unpermute.run(runtime, {d_perm.data(), d_map.data(), d_weights.data()}, {d_out.data()});
        const std::vector<double> weights = d_weights.download(), out = d_out.download();
        int64_t wrong = 0;
        for (int64_t t = 0; t < tokens; ++t) {
            double sum = 0;
            for (int64_t j = 0; j < k; ++j) sum += weights[static_cast<size_t>(t * k + j)];
            CHECK(std::fabs(sum - 2.5) <= 1e-5);  // renormalized, times the scaling factor
            for (int64_t c = 0; c < hidden; ++c) {
                const double want = x[static_cast<size_t>(t * hidden + c)] * sum;
                const double got = out[static_cast<size_t>(t * hidden + c)];
                if (!(std::fabs(got - want) <= std::ldexp(1.0, -8) * std::fabs(want) + 1e-5 * std::fabs(want)) && ++wrong <= 3)
                    UNSCOPED_INFO("token " << t << " col " << c << ": " << got << ", want " << want);
            }
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("MoE routing: every config of each search space is correct at every vector width",
          "[gpu][moe_routing][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    const auto& cu = cuda::driver();
    // Each op's outputs under every config must equal the heuristic's (checked against the host
    // above) bit for bit: the kernels are deterministic and sum in the same order (the top-k's
    // renormalizing sum too, with its k = 8 weights in lanes 0-7 of teams of 16 or 32).
    // Float outputs are poisoned with NaN; int32 ones with -7, which no id, row or count holds
    // (their 0xff poison reads -1, what row_map holds for a dropped id).
    const auto poison = [](const std::vector<DeviceMatrix*>& outputs) {
        for (DeviceMatrix* m : outputs) {
            m->poison();
            if (m->dtype() == DType::int32) m->fill(-7);
        }
    };
    const auto sweep = [&](Op& op, std::vector<TensorArg> in, std::vector<OutputArg> out,
                           std::vector<DeviceMatrix*> outputs) {
        poison(outputs);
        op.run(runtime, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()));
        TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
        std::vector<std::vector<double>> want;
        for (DeviceMatrix* m : outputs) want.push_back(m->download());
        const std::vector<Config> configs = test::this_shard(op.model().search_space(runtime.device()));
        std::vector<detail::LaunchPlan> plans;
        for (const Config& config : configs)
            for (int vec : op.model().vector_widths(config)) plans.push_back(op.model().plan(config, vec, runtime.device()));
        test::build_kernels(runtime, plans);
        for (const Config& config : configs)
            for (int vec : op.model().vector_widths(config)) {
                INFO(op.describe() << " config " << tuning::config_text(config) << " width " << vec);
                poison(outputs);
                const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, vec);
                op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
                TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
                for (size_t i = 0; i < outputs.size(); ++i) {
                    const std::vector<double> got = outputs[i]->download();
                    bool same = got.size() == want[i].size();
                    for (size_t e = 0; same && e < got.size(); ++e)
                        same = got[e] == want[i][e] || (std::isnan(got[e]) && std::isnan(want[i][e]));
                    CHECK(same);
                }
            }
    };
    {
        const MoeTopKProblem p = deepseek(300);
        MoeTopK op(p);
        DeviceMatrix logits(DType::bf16, 300, 256), bias(DType::fp32, 1, 256), w(DType::fp32, 300, 8), ids(DType::int32, 300, 8);
        logits.upload(logits_of(DType::bf16, 300, 256, 1));
        bias.upload(test::random_values(256, 2, -0.5, 0.5));
        sweep(op, {logits.data(), bias.data()}, {w.data(), ids.data()}, {&w, &ids});
    }
    for (const int64_t capacity : {int64_t{0}, int64_t{20}}) {
        const PermuteShape s{300, 1000, 64, 6, DType::bf16, capacity, 8, 24, 0, 0, true};
        const MoePermuteProblem p = permute_problem(s);
        PermuteBuffers b(p, s);
        b.x.upload(logits_of(DType::bf16, p.tokens, p.hidden, 3, 2.0));
        b.ids.upload(as_doubles(ids_of(p.tokens, p.k, p.experts, 4, true)));
        MoePermute op(p);
        sweep(op, {b.x.data(), b.ids.data()}, {b.out.data(), b.info.data(), b.row_map.data()}, {&b.out, &b.info, &b.row_map});
    }
    {
        MoeUnpermuteProblem p{300, 1000, 6, DType::bf16};
        p.y_stride = 1008;
        MoeUnpermute op(p);
        DeviceMatrix y(DType::bf16, 1800, 1000, 1008), map(DType::int32, 300, 6), w(DType::fp32, 300, 6), out(DType::bf16, 300, 1000);
        y.upload(logits_of(DType::bf16, 1800, 1000, 5, 2.0));
        std::vector<double> rows(1800);
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<double>((i * 7919 + 13) % 1800);
        rows[5] = -1;
        map.upload(rows);
        w.upload(test::random_values(1800, 6, -1.0, 1.0));
        sweep(op, {y.data(), map.data(), w.data()}, {out.data()}, {&out});
    }
}
