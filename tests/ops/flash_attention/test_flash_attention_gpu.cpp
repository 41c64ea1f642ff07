// FlashAttention against a double-precision reference on the CPU: random inputs (scores spread
// enough that the softmax is far from uniform), poisoned outputs, sequence lengths that are not
// tile multiples (1, 17, 1000, 4097, ...), head dims 64/128/256 and ones that are not multiples of
// 64 (80, 96, 112, 160, 192, ...), a value head dim other than Q/K's, MHA and GQA, causal or not,
// windows, seqlen_q != seqlen_k, both layouts, padded strides, varlen batches and the LSE. Every
// case runs the heuristic's kernel and, where the device runs the sm_90 kernel, the sm_80 kernel
// too. Long sequences are checked on a sample of rows (the first and last rows of the sequence and
// around tile borders included).
#include <algorithm>
#include <cmath>
#include <limits>
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

struct FlashCase {
    FlashAttentionProblem p;
    std::vector<int> lens_q, lens_k;  // varlen: each sequence's lengths
    // Varlen: offsets handed to the op instead of the lengths' prefix sums (malformed ones, which
    // the kernels must clamp to the lengths above), and rows of poison after O and the LSE that
    // must stay untouched.
    std::vector<int> cu_q_given, cu_k_given;
    int64_t guard_rows = 0;
    int64_t seq_pad = 0;              // extra elements between consecutive rows (BSHD) or heads' rows (BHSD)
    int64_t max_rows_checked = 160;   // per (sequence, head)
};

// Element offset of (batch, row, head) in a tensor with the problem's normalized strides.
struct Strides {
    int64_t batch, seq, head;
    int64_t at(int64_t b, int64_t row, int64_t h) const { return b * batch + row * seq + h * head; }
};

// The value (and output) head dim.
int64_t value_dim(const FlashAttentionProblem& p) { return p.head_dim_v == 0 ? p.head_dim : p.head_dim_v; }

// The strides normalized() would choose, with `pad` added to the row stride.
void fill_strides(FlashCase& c) {
    FlashAttentionProblem& p = c.p;
    const int64_t pad = c.seq_pad;
    const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
    const int64_t kv_heads = p.num_kv_heads == 0 ? p.num_heads : p.num_kv_heads;
    auto set = [&](int64_t rows, int64_t heads, int64_t d, int64_t& bs, int64_t& ss, int64_t& hs) {
        if (p.layout == AttentionLayout::bhsd && !p.varlen) {
            ss = d + pad, hs = rows * ss, bs = heads * hs;
        } else {
            hs = d, ss = heads * d + pad, bs = p.varlen ? 0 : rows * ss;
        }
    };
    const int64_t dv = value_dim(p);
    set(rows_q, p.num_heads, p.head_dim, p.q_batch_stride, p.q_seq_stride, p.q_head_stride);
    set(rows_k, kv_heads, p.head_dim, p.k_batch_stride, p.k_seq_stride, p.k_head_stride);
    set(rows_k, kv_heads, dv, p.v_batch_stride, p.v_seq_stride, p.v_head_stride);
    set(rows_q, p.num_heads, dv, p.o_batch_stride, p.o_seq_stride, p.o_head_stride);
}

// Elements of a tensor of rows of `dim` elements with these strides.
int64_t tensor_elements(const FlashAttentionProblem& p, const Strides& s, int64_t rows, int64_t heads, int64_t dim) {
    const int64_t outer = p.varlen ? 1 : p.batch;
    return (outer - 1) * s.batch + (rows - 1) * s.seq + (heads - 1) * s.head + dim;
}

struct Result {
    std::vector<double> out, lse;
    bool guard_poisoned = true;  // nothing written past the outputs (FlashCase::guard_rows)
};

class FlashRun {
public:
    explicit FlashRun(const FlashCase& c) : c_(c), p_(c.p) {
        if (p_.num_kv_heads == 0) p_.num_kv_heads = p_.num_heads;
        if (p_.seqlen_k == 0) p_.seqlen_k = p_.seqlen_q;
        const int64_t rows_q = p_.varlen ? p_.total_q : p_.seqlen_q, rows_k = p_.varlen ? p_.total_k : p_.seqlen_k;
        qs_ = {p_.q_batch_stride, p_.q_seq_stride, p_.q_head_stride};
        ks_ = {p_.k_batch_stride, p_.k_seq_stride, p_.k_head_stride};
        vs_ = {p_.v_batch_stride, p_.v_seq_stride, p_.v_head_stride};
        os_ = {p_.o_batch_stride, p_.o_seq_stride, p_.o_head_stride};
        const uint64_t seed = static_cast<uint64_t>(p_.seqlen_q * 7 + p_.seqlen_k * 13 + p_.head_dim + p_.causal);
        // q spread wider than k: scores of a few units, a peaked softmax.
        dv_dim_ = value_dim(p_);
        const int64_t q_elements = tensor_elements(p_, qs_, rows_q, p_.num_heads, p_.head_dim);
        q_ = test::round_to(p_.dtype, test::random_values(q_elements, seed + 1, -4, 4));
        k_ = test::round_to(p_.dtype,
                            test::random_values(tensor_elements(p_, ks_, rows_k, p_.num_kv_heads, p_.head_dim), seed + 2));
        v_ = test::round_to(p_.dtype, test::random_values(tensor_elements(p_, vs_, rows_k, p_.num_kv_heads, dv_dim_), seed + 3));
        out_elements_ = tensor_elements(p_, os_, rows_q, p_.num_heads, dv_dim_);
        dq_ = std::make_unique<DeviceMatrix>(p_.dtype, 1, static_cast<int64_t>(q_.size()));
        dk_ = std::make_unique<DeviceMatrix>(p_.dtype, 1, static_cast<int64_t>(k_.size()));
        dv_ = std::make_unique<DeviceMatrix>(p_.dtype, 1, static_cast<int64_t>(v_.size()));
        dq_->upload(q_);
        dk_->upload(k_);
        dv_->upload(v_);
        if (p_.varlen) {
            cu_q_ = offsets(c.lens_q);
            cu_k_ = offsets(c.lens_k);
            dcu_q_ = upload_ints(c.cu_q_given.empty() ? cu_q_ : c.cu_q_given);
            dcu_k_ = upload_ints(c.cu_k_given.empty() ? cu_k_ : c.cu_k_given);
        }
    }

    // Runs with the heuristic (config empty) or the given config; returns what the GPU wrote.
    Result run(FlashAttention& op, const Config* config) {
        const int64_t guard = c_.guard_rows * p_.num_heads;  // elements of poison after each output (x head_dim for O)
        DeviceMatrix out(p_.dtype, 1, out_elements_ + guard * dv_dim_);  // poisoned
        const int64_t lse_count = p_.varlen ? p_.num_heads * p_.total_q : p_.batch * p_.num_heads * p_.seqlen_q;
        DeviceMatrix lse(DType::fp32, 1, lse_count + guard);
        std::vector<TensorArg> in{dq_->data(), dk_->data(), dv_->data()};
        if (p_.varlen) in.insert(in.end(), {dcu_q_->data(), dcu_k_->data()});
        std::vector<OutputArg> outs{out.data()};
        if (p_.return_lse) outs.emplace_back(lse.data());
        if (config == nullptr) {
            op.run(shared_runtime(), Inputs(in.data(), in.size()), Outputs(outs.data(), outs.size()));
        } else {
            const detail::ResolvedLaunch launch = shared_runtime().impl().resolve_config(op.model(), *config, 1);
            op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(outs.data(), outs.size()), nullptr);
        }
        Result r;
        r.out = out.download();
        if (p_.return_lse) r.lse = lse.download();
        auto untouched_tail = [&](std::vector<double>& values, int64_t size) {
            const bool poisoned = std::all_of(values.begin() + size, values.end(), [](double x) { return std::isnan(x); });
            values.resize(static_cast<size_t>(size));
            return poisoned;
        };
        r.guard_poisoned = untouched_tail(r.out, out_elements_);
        if (p_.return_lse) r.guard_poisoned = untouched_tail(r.lse, lse_count) && r.guard_poisoned;
        return r;
    }

    // Compares a result with the reference on the sampled rows; every element of every valid row
    // must be finite (written over its poison).
    void check(const Result& r) const {
        std::vector<double> got, want, lse_got, lse_want;
        bool all_written = true, empty_rows_ok = true;
        for (int64_t b = 0; b < p_.batch; ++b) {
            const int64_t q0 = p_.varlen ? cu_q_[b] : 0, k0 = p_.varlen ? cu_k_[b] : 0;
            const int64_t len_q = p_.varlen ? cu_q_[b + 1] - q0 : p_.seqlen_q;
            const int64_t len_k = p_.varlen ? cu_k_[b + 1] - k0 : p_.seqlen_k;
            const int64_t tb = p_.varlen ? 0 : b;
            for (int64_t h = 0; h < p_.num_heads; ++h) {
                for (int64_t i = 0; i < len_q; ++i)
                    for (int64_t d = 0; d < dv_dim_; ++d)
                        all_written = all_written && std::isfinite(r.out[os_.at(tb, q0 + i, h) + d]);
                for (int64_t i : sampled_rows(len_q, b * 977 + h)) {
                    std::vector<double> ref(dv_dim_);
                    const double lse = reference_row(tb, q0 + i, k0, i, len_q, len_k, h, ref);
                    const int64_t at = os_.at(tb, q0 + i, h);
                    for (int64_t d = 0; d < dv_dim_; ++d) {
                        got.push_back(r.out[at + d]);
                        want.push_back(ref[d]);
                    }
                    if (!p_.return_lse) continue;
                    const double g = r.lse[(p_.varlen ? h * p_.total_q : (b * p_.num_heads + h) * p_.seqlen_q) + q0 + i];
                    if (std::isinf(lse)) {
                        empty_rows_ok = empty_rows_ok && std::isinf(g) && g < 0;
                    } else {
                        lse_got.push_back(g);
                        lse_want.push_back(lse);
                    }
                }
            }
        }
        CHECK(all_written);
        CHECK(empty_rows_ok);
        CHECK(r.guard_poisoned);
        const double error = test::relative_error(got, test::round_to(p_.dtype, want));
        INFO("output relative error " << error << " (tolerance " << test::tolerance(p_.dtype) << ")");
        CHECK(error <= test::tolerance(p_.dtype));
        if (!lse_want.empty()) {
            const double lse_error = test::relative_error(lse_got, lse_want);
            INFO("lse relative error " << lse_error);
            CHECK(lse_error <= 1e-4);
        }
    }

private:
    static std::vector<int> offsets(const std::vector<int>& lens) {
        std::vector<int> cu{0};
        for (int len : lens) cu.push_back(cu.back() + len);
        return cu;
    }
    static std::unique_ptr<DeviceMatrix> upload_ints(const std::vector<int>& values) {
        auto m = std::make_unique<DeviceMatrix>(DType::int32, 1, static_cast<int64_t>(values.size()));
        m->upload(std::vector<double>(values.begin(), values.end()));
        return m;
    }

    // Rows of a sequence to check: all of a short one; else the ends, tile borders and random ones.
    std::vector<int64_t> sampled_rows(int64_t len, uint64_t seed) const {
        std::vector<int64_t> rows;
        if (len <= c_.max_rows_checked) {
            for (int64_t i = 0; i < len; ++i) rows.push_back(i);
            return rows;
        }
        for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{127}, int64_t{128}, len - 2, len - 1})
            if (i >= 0 && i < len) rows.push_back(i);
        std::mt19937_64 rng(seed);
        while (static_cast<int64_t>(rows.size()) < c_.max_rows_checked) rows.push_back(static_cast<int64_t>(rng() % len));
        return rows;
    }

    // out[d] and the lse of query row i (row `row` of the tensor) of sequence b, head h.
    double reference_row(int64_t tb, int64_t row, int64_t k0, int64_t i, int64_t len_q, int64_t len_k, int64_t h,
                         std::vector<double>& out) const {
        const int64_t kv_head = h / (p_.num_heads / p_.num_kv_heads);
        const int64_t offset = len_k - len_q;
        const double* q = q_.data() + qs_.at(tb, row, h);
        std::vector<double> scores;
        std::vector<int64_t> keys;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < len_k; ++j) {
            if (p_.causal && j > i + offset) continue;
            if (p_.window_left >= 0 && j < i + offset - p_.window_left) continue;
            const double* k = k_.data() + ks_.at(tb, k0 + j, kv_head);
            double s = 0;
            for (int64_t d = 0; d < p_.head_dim; ++d) s += q[d] * k[d];
            s *= p_.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(p_.head_dim)) : p_.scale;
            scores.push_back(s);
            keys.push_back(j);
            max = std::max(max, s);
        }
        std::fill(out.begin(), out.end(), 0.0);
        if (keys.empty()) return -std::numeric_limits<double>::infinity();
        double sum = 0;
        for (size_t n = 0; n < keys.size(); ++n) {
            const double w = std::exp(scores[n] - max);
            sum += w;
            const double* v = v_.data() + vs_.at(tb, k0 + keys[n], kv_head);
            for (int64_t d = 0; d < dv_dim_; ++d) out[d] += w * v[d];
        }
        for (double& x : out) x /= sum;
        return max + std::log(sum);
    }

    FlashCase c_;
    FlashAttentionProblem p_;
    Strides qs_{}, ks_{}, vs_{}, os_{};
    int64_t dv_dim_ = 0;  // the value head dim
    std::vector<double> q_, k_, v_;
    int64_t out_elements_ = 0;
    std::unique_ptr<DeviceMatrix> dq_, dk_, dv_, dcu_q_, dcu_k_;
    std::vector<int> cu_q_, cu_k_;
};

std::string describe(const FlashCase& c) {
    const FlashAttentionProblem& p = c.p;
    return fmt::format("batch {} heads {}/{} d {}/{} q {} k {} {} causal {} window {} {} {} pad {}", p.batch, p.num_heads,
                       p.num_kv_heads, p.head_dim, value_dim(p), p.seqlen_q, p.seqlen_k, dtype_name(p.dtype), p.causal, p.window_left,
                       p.varlen ? "varlen" : p.layout == AttentionLayout::bhsd ? "bhsd" : "bshd", p.return_lse ? "lse" : "",
                       c.seq_pad);
}

// The heuristic's kernel, and the sm_80 kernel too where the heuristic picked the sm_90 one.
void run_and_check(FlashCase c) {
    fill_strides(c);
    INFO(describe(c));
    FlashAttention op(c.p);
    FlashRun run(c);
    run.check(run.run(op, nullptr));
    const Config heuristic = op.model().heuristic(shared_runtime().device());
    if (heuristic.at("kernel") == 1) {
        const Config sm80 = op.model().heuristic(DeviceInfo::for_arch("sm_80"));
        INFO("forced sm_80 kernel");
        run.check(run.run(op, &sm80));
    }
}

FlashAttentionProblem problem(DType dtype, int64_t batch, int64_t heads, int64_t kv_heads, int64_t d, int64_t seqlen_q,
                              int64_t seqlen_k, bool causal) {
    FlashAttentionProblem p;
    p.batch = batch, p.num_heads = heads, p.num_kv_heads = kv_heads, p.head_dim = d;
    p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k, p.dtype = dtype, p.causal = causal, p.return_lse = true;
    return p;
}

// Varlen, bf16, 4 query heads over 2 KV heads, one sequence per length: seqlen_q/seqlen_k are the
// longest lengths and total_q/total_k their sums.
FlashCase varlen_case(bool causal, int64_t d, std::vector<int> lens_q, std::vector<int> lens_k) {
    FlashCase c{problem(DType::bf16, static_cast<int64_t>(lens_q.size()), 4, 2, d, 0, 0, causal)};
    c.p.varlen = true;
    c.p.seqlen_q = *std::max_element(lens_q.begin(), lens_q.end());
    c.p.seqlen_k = *std::max_element(lens_k.begin(), lens_k.end());
    c.p.total_q = std::accumulate(lens_q.begin(), lens_q.end(), int64_t{0});
    c.p.total_k = std::accumulate(lens_k.begin(), lens_k.end(), int64_t{0});
    c.lens_q = std::move(lens_q);
    c.lens_k = std::move(lens_k);
    return c;
}

}  // namespace

TEST_CASE("FlashAttention matches a double-precision reference across lengths and head dims", "[gpu][flash]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const int64_t d = GENERATE(64, 128, 256);
    const bool causal = GENERATE(false, true);
    for (int64_t len : {1, 17, 128, 1000, 4097, 8192}) {
        FlashCase c{problem(DType::bf16, len > 1000 ? 1 : 2, 2, 2, d, len, len, causal)};
        c.max_rows_checked = len >= 4097 ? 48 : 160;
        run_and_check(c);
    }
}

// Head dims that are not multiples of 64 end in a TMA box the kernel fills past the dim (sm_90) or
// a shared row it pads (sm_80); a value head dim of its own sizes V, O and the P V product apart
// from Q K^T (DeepSeek's prefill: 192 / 128).
TEST_CASE("FlashAttention head dims that are not multiples of 64, and distinct Q/K and V head dims", "[gpu][flash]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const auto [d, dv] = GENERATE(table<int64_t, int64_t>(
        {{80, 80}, {96, 96}, {112, 112}, {160, 160}, {192, 192}, {16, 16}, {48, 48}, {192, 128}, {128, 192}, {64, 128}}));
    const bool causal = GENERATE(false, true);
    for (int64_t len : {1, 17, 1000, 4097}) {
        FlashCase c{problem(DType::bf16, len > 1000 ? 1 : 2, 4, 2, d, len, len, causal)};
        c.p.head_dim_v = dv;
        c.max_rows_checked = len >= 4097 ? 32 : 96;
        run_and_check(c);
    }
    FlashCase fp16{problem(DType::fp16, 1, 2, 1, d, 300, 700, causal)};
    fp16.p.head_dim_v = dv;
    fp16.p.window_left = 200;
    fp16.seq_pad = 8;  // rows 16 bytes apart beyond packed
    run_and_check(fp16);
    FlashCase varlen = varlen_case(causal, d, {1, 130, 777}, {64, 130, 1500});
    varlen.p.head_dim_v = dv;
    varlen.max_rows_checked = 48;
    run_and_check(varlen);
}

TEST_CASE("FlashAttention fp16, GQA/MQA and the BHSD layout", "[gpu][flash]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const bool causal = GENERATE(false, true);
    run_and_check({problem(DType::fp16, 2, 4, 4, 128, 1000, 1000, causal)});
    run_and_check({problem(DType::fp16, 1, 2, 2, 64, 300, 300, causal)});
    run_and_check({problem(DType::bf16, 2, 8, 2, 128, 333, 333, causal)});   // GQA 4
    run_and_check({problem(DType::fp16, 1, 6, 1, 64, 257, 257, causal)});    // MQA
    FlashAttentionProblem bhsd = problem(DType::bf16, 2, 4, 2, 128, 515, 515, causal);
    bhsd.layout = AttentionLayout::bhsd;
    run_and_check({bhsd});
    // More work tiles (8 x 16 x 4) than SMs: the persistent kernel's blocks take several each.
    FlashCase many{problem(DType::bf16, 4, 16, 4, 128, 1000, 1000, causal)};
    many.max_rows_checked = 24;
    run_and_check(many);
    FlashCase padded{problem(DType::bf16, 2, 3, 3, 64, 200, 200, causal)};
    padded.seq_pad = 24;  // rows 48 bytes apart beyond packed
    run_and_check(padded);
}

TEST_CASE("FlashAttention with seqlen_q != seqlen_k (causal aligned bottom-right) and windows", "[gpu][flash]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const bool causal = GENERATE(false, true);
    run_and_check({problem(DType::bf16, 2, 2, 2, 128, 100, 1000, causal)});
    run_and_check({problem(DType::bf16, 2, 2, 2, 128, 1000, 100, causal)});  // causal: the first 900 rows see nothing
    // The same at head dim 64 (its own kernels: three consumer warpgroups, other tiles).
    run_and_check({problem(DType::fp16, 2, 2, 2, 64, 1000, 100, causal)});
    run_and_check({problem(DType::fp16, 1, 2, 1, 64, 1, 777, causal)});
    run_and_check({problem(DType::bf16, 1, 2, 2, 256, 129, 4000, causal)});
    FlashAttentionProblem window = problem(DType::bf16, 2, 2, 2, 128, 1000, 1000, causal);
    window.window_left = 100;
    run_and_check({window});
    window.window_left = 0;
    run_and_check({window});
    FlashAttentionProblem shifted = problem(DType::bf16, 1, 4, 2, 64, 300, 2000, causal);
    shifted.window_left = 250;
    run_and_check({shifted});
}

TEST_CASE("FlashAttention varlen batches of very different lengths", "[gpu][flash]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const bool causal = GENERATE(false, true);
    const int64_t d = GENERATE(64, 128);
    const std::vector<int> lens = {1, 17, 1000, 130, 4097};
    FlashCase c = varlen_case(causal, d, lens, lens);
    c.max_rows_checked = 64;
    run_and_check(c);
    // Different key lengths (a prefix cache): more keys than queries, and one sequence with fewer.
    FlashCase prefix = varlen_case(causal, d, lens, {300, 17, 1500, 64, 5000});
    prefix.max_rows_checked = 64;
    run_and_check(prefix);
}

TEST_CASE("FlashAttention varlen clamps malformed offsets into the packed tensors", "[gpu][flash]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const bool causal = GENERATE(false, true);
    const int64_t d = GENERATE(64, 128);
    // A negative first offset, an end past the last row (unclamped, 4750 rows: the grid's 150 would
    // write 100 rows past O), an end before its start, and INT_MIN: the kernels must make of them
    // sequences of 100, 0, 150, 50 and 0 rows (300 packed rows, the longest 150).
    FlashCase c = varlen_case(causal, d, {100, 0, 150, 50, 0}, {100, 0, 150, 50, 0});
    c.cu_q_given = {-5, 100, 100, 250, 5000, -3};
    c.cu_k_given = {0, 100, 100, 250, 300, std::numeric_limits<int>::min()};
    c.guard_rows = 400;
    run_and_check(c);
}

TEST_CASE("Every FlashAttention config in the search space is correct", "[gpu][flash][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    const bool causal = GENERATE(false, true);
    const auto [d, dv] = GENERATE(table<int64_t, int64_t>({{64, 64}, {128, 128}, {256, 256}, {80, 80}, {192, 128}}));
    FlashCase c{problem(DType::bf16, 1, 2, 1, d, 700, 900, causal)};
    c.p.head_dim_v = dv;
    fill_strides(c);
    FlashAttention op(c.p);
    FlashRun run(c);
    // The device's search space and, on sm_90, the sm_80 kernel's (which runs there too) at the
    // common head dims; at the others the sm_80 kernel runs its heuristic's config in the tests
    // above, and every config of its search space compiles (test_flash_attention_compile.cpp).
    std::vector<Config> configs = op.model().search_space(runtime.device());
    if (runtime.device().sm() == 90 && d == dv && (d == 64 || d == 128 || d == 256))
        for (const Config& config : op.model().search_space(DeviceInfo::for_arch("sm_80"))) configs.push_back(config);
    for (const Config& config : test::this_shard(configs)) {
        INFO(fmt::format("config {}", config));
        run.check(run.run(op, &config));
    }
}
