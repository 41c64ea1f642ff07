// Rope against a double-precision reference: neox and gptj pairs, partial rotation, Llama 3
// scaling, positions far past the fast range of sincosf, in place and out of place, a fused QKV
// row, misaligned operands, and the append to bf16 and fp8 caches, where slots that are negative
// or past the cache leave it untouched (poisoned rows stay poisoned). Every config of the search
// space runs on one problem.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/build_kernels.hpp"
#include "support/device_tensor.hpp"
#include "support/row_checks.hpp"
#include "support/test_support.hpp"
#include "tileops/rope.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

constexpr double kFp8Max = 448.0;

struct RopeCase {
    RopeProblem p;
    int64_t pad = 0;       // elements past each token row of every token operand (its stride)
    size_t misalign = 0;   // elements every token operand is moved off a 16-byte boundary
    bool in_place = false; // q_out is q and k_out is k
    bool fused = false;    // q, k and v in one row [q | k | v] of a QKV projection, rotated in place
};

// Positions: most within a context of 8k, every fourth far past 105615 (where sincosf leaves its
// fast path). Slots: distinct, every seventh token padding (-1), every eleventh past the cache.
struct TokenPlacement {
    std::vector<double> positions, slots;
};

TokenPlacement place_tokens(const RopeProblem& p, uint64_t seed) {
    std::mt19937_64 rng(seed);
    TokenPlacement placement;
    const int64_t num_slots = p.num_pages * p.page_size;
    std::vector<int64_t> free_slots(static_cast<size_t>(std::max<int64_t>(num_slots, 0)));
    std::iota(free_slots.begin(), free_slots.end(), 0);
    std::shuffle(free_slots.begin(), free_slots.end(), rng);
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        const bool far = t % 4 == 1;
        placement.positions.push_back(static_cast<double>(rng() % (far ? 150000 : 8192) + (far ? 100000 : 0)));
        if (!p.append_kv) continue;
        double slot = static_cast<double>(free_slots[static_cast<size_t>(t)]);
        if (t % 7 == 3) slot = -1.0;
        if (t % 11 == 5) slot = static_cast<double>(num_slots + t);
        placement.slots.push_back(slot);
    }
    return placement;
}

// Rotates each head of `x` ([tokens, heads, head_dim] rows `stride` apart) as the op defines it:
// the angle is float(position) x the fp32 frequency, rounded to fp32; the rest in double.
void rotate_reference(std::vector<double>& x, const RopeProblem& p, int64_t heads, const std::vector<double>& positions,
                      const std::vector<float>& inv_freq) {
    const int64_t d = p.head_dim, half = p.rotary_dim / 2;
    for (int64_t t = 0; t < p.num_tokens; ++t)
        for (int64_t i = 0; i < half; ++i) {
            const float angle = static_cast<float>(positions[static_cast<size_t>(t)]) * inv_freq[static_cast<size_t>(i)];
            const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
            const int64_t a = p.style == RopeStyle::neox ? i : 2 * i, b = p.style == RopeStyle::neox ? i + half : 2 * i + 1;
            for (int64_t h = 0; h < heads; ++h) {
                double* head = &x[static_cast<size_t>((t * heads + h) * d)];
                const double xa = head[a], xb = head[b];
                head[a] = xa * c - xb * s;
                head[b] = xb * c + xa * s;
            }
        }
}

// What a cache row of `values` (already rotated) holds: the values, or for fp8 value x (1 / scale)
// saturated at the largest finite code.
std::vector<double> cache_reference(std::vector<double> values, const RopeProblem& p, float scale) {
    const double scale_inv = static_cast<double>(1.0f / scale);
    if (*p.kv_dtype == DType::fp8_e4m3)
        for (double& v : values) v = std::clamp(v * scale_inv, -kFp8Max, kFp8Max);
    return values;
}

// Checks a cache: each appended token's row holds its reference row; every other row is untouched.
void check_cache(const DeviceMatrix& cache, const std::vector<double>& reference, const RopeProblem& p,
                 const std::vector<double>& slots, const char* what) {
    const int64_t cols = p.num_kv_heads * p.head_dim, num_slots = p.num_pages * p.page_size;
    const std::vector<double> stored = cache.download();
    std::vector<double> got, want;
    std::vector<bool> written(static_cast<size_t>(num_slots), false);
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        const double slot = slots[static_cast<size_t>(t)];
        if (slot < 0 || slot >= static_cast<double>(num_slots)) continue;
        const auto row = static_cast<size_t>(slot);
        written[row] = true;
        got.insert(got.end(), stored.begin() + static_cast<ptrdiff_t>(row * cols),
                   stored.begin() + static_cast<ptrdiff_t>((row + 1) * cols));
        want.insert(want.end(), reference.begin() + t * cols, reference.begin() + (t + 1) * cols);
    }
    REQUIRE(!got.empty());
    test::expect_close(got, want, *p.kv_dtype, what);
    bool untouched = true;
    for (int64_t row = 0; row < num_slots; ++row)
        if (!written[static_cast<size_t>(row)])
            for (int64_t c = 0; c < cols; ++c) untouched = untouched && std::isnan(stored[static_cast<size_t>(row * cols + c)]);
    CHECK(untouched);
}

// The device operands of one case (its problem normalized) and the host values uploaded to them.
class RopeBuffers {
public:
    explicit RopeBuffers(const RopeCase& c) : c_(c) {
        const RopeProblem& p = c.p;
        const int64_t d = p.head_dim, q_cols = p.num_heads * d, kv_cols = p.num_kv_heads * d;
        const DType dt = p.dtype;
        const size_t offset = c.misalign * dtype_size(dt);
        if (c.fused) {
            const int64_t cols = q_cols + 2 * kv_cols;
            qkv_.emplace(dt, p.num_tokens, cols, cols + c.pad, offset);
            const auto values = test::round_to(dt, test::random_values(static_cast<size_t>(p.num_tokens * cols), 31));
            qkv_->upload(values);
            for (int64_t t = 0; t < p.num_tokens; ++t) {
                const auto row = values.begin() + t * cols;
                q_.insert(q_.end(), row, row + q_cols);
                k_.insert(k_.end(), row + q_cols, row + q_cols + kv_cols);
                v_.insert(v_.end(), row + q_cols + kv_cols, row + cols);
            }
        } else {
            q_dev_.emplace(dt, p.num_tokens, q_cols, q_cols + c.pad, offset);
            k_dev_.emplace(dt, p.num_tokens, kv_cols, kv_cols + c.pad, offset);
            q_ = test::round_to(dt, test::random_values(static_cast<size_t>(p.num_tokens * q_cols), 32));
            k_ = test::round_to(dt, test::random_values(static_cast<size_t>(p.num_tokens * kv_cols), 33));
            q_dev_->upload(q_);
            k_dev_->upload(k_);
            if (p.append_kv) {
                v_dev_.emplace(dt, p.num_tokens, kv_cols, kv_cols + c.pad, offset);
                v_ = test::round_to(dt, test::random_values(static_cast<size_t>(p.num_tokens * kv_cols), 34));
                v_dev_->upload(v_);
            }
            if (!c.in_place) {
                q_out_.emplace(dt, p.num_tokens, q_cols, q_cols + c.pad, offset);
                k_out_.emplace(dt, p.num_tokens, kv_cols, kv_cols + c.pad, offset);
            }
        }
        placement_ = place_tokens(p, 35);
        positions_.upload(placement_.positions);
        if (p.append_kv) {
            slots_.upload(placement_.slots);
            k_cache_.emplace(*p.kv_dtype, p.num_pages * p.page_size, kv_cols);
            v_cache_.emplace(*p.kv_dtype, p.num_pages * p.page_size, kv_cols);
        }
    }

    std::vector<TensorArg> inputs() const {
        std::vector<TensorArg> in{q(), k()};
        if (c_.p.append_kv) in.emplace_back(v());
        in.emplace_back(positions_.data());
        if (c_.p.append_kv) in.emplace_back(slots_.data());
        return in;
    }
    std::vector<OutputArg> outputs() const {
        std::vector<OutputArg> out{q_out(), k_out()};
        if (c_.p.append_kv) out.insert(out.end(), {k_cache_->data(), v_cache_->data()});
        return out;
    }

    // Poisons every output again (a case whose outputs are apart from its inputs): a launch after
    // the first that wrote nothing, or only some rows, must not pass on what the one before wrote.
    void poison_outputs() {
        REQUIRE_FALSE(c_.fused);
        REQUIRE_FALSE(c_.in_place);
        q_out_->poison();
        k_out_->poison();
        if (k_cache_) k_cache_->poison();
        if (v_cache_) v_cache_->poison();
    }

    // Checks every output against the reference.
    void check(const std::vector<float>& inv_freq) const {
        const RopeProblem& p = c_.p;
        const int64_t d = p.head_dim, q_cols = p.num_heads * d, kv_cols = p.num_kv_heads * d;
        std::vector<double> q_ref = q_, k_ref = k_;
        rotate_reference(q_ref, p, p.num_heads, placement_.positions, inv_freq);
        rotate_reference(k_ref, p, p.num_kv_heads, placement_.positions, inv_freq);
        if (c_.fused) {
            const std::vector<double> row = qkv_->download();
            const int64_t cols = q_cols + 2 * kv_cols;
            std::vector<double> q_got, k_got, v_got;
            for (int64_t t = 0; t < p.num_tokens; ++t) {
                const auto r = row.begin() + t * cols;
                q_got.insert(q_got.end(), r, r + q_cols);
                k_got.insert(k_got.end(), r + q_cols, r + q_cols + kv_cols);
                v_got.insert(v_got.end(), r + q_cols + kv_cols, r + cols);
            }
            test::expect_close(q_got, q_ref, p.dtype, "q (fused)");
            test::expect_close(k_got, k_ref, p.dtype, "k (fused)");
            CHECK(v_got == v_);  // read, never written
            CHECK(qkv_->gaps_untouched());
        } else {
            const DeviceMatrix& q_out = c_.in_place ? *q_dev_ : *q_out_;
            const DeviceMatrix& k_out = c_.in_place ? *k_dev_ : *k_out_;
            test::expect_close(q_out.download(), q_ref, p.dtype, "q_out");
            test::expect_close(k_out.download(), k_ref, p.dtype, "k_out");
            CHECK(q_out.gaps_untouched());
            CHECK(k_out.gaps_untouched());
        }
        if (p.append_kv) {
            check_cache(*k_cache_, cache_reference(k_ref, p, p.k_scale), p, placement_.slots, "k_cache");
            check_cache(*v_cache_, cache_reference(v_, p, p.v_scale), p, placement_.slots, "v_cache");
        }
    }

private:
    void* q() const { return c_.fused ? qkv_->data() : q_dev_->data(); }
    void* k() const {
        return c_.fused ? static_cast<char*>(qkv_->data()) + c_.p.num_heads * c_.p.head_dim * dtype_size(c_.p.dtype)
                        : k_dev_->data();
    }
    void* v() const {
        const int64_t offset = (c_.p.num_heads + c_.p.num_kv_heads) * c_.p.head_dim;
        return c_.fused ? static_cast<char*>(qkv_->data()) + offset * dtype_size(c_.p.dtype) : v_dev_->data();
    }
    void* q_out() const { return c_.fused || c_.in_place ? q() : q_out_->data(); }
    void* k_out() const { return c_.fused || c_.in_place ? k() : k_out_->data(); }

    RopeCase c_;
    std::optional<DeviceMatrix> qkv_, q_dev_, k_dev_, v_dev_, q_out_, k_out_, k_cache_, v_cache_;
    DeviceMatrix positions_{DType::int32, 1, c_.p.num_tokens};
    DeviceMatrix slots_{DType::int32, 1, c_.p.num_tokens};
    std::vector<double> q_, k_, v_;
    TokenPlacement placement_;
};

// Fills in the strides a case's layout implies.
RopeCase with_strides(RopeCase c) {
    RopeProblem& p = c.p;
    const int64_t d = p.head_dim;
    if (c.fused) {
        const int64_t stride = (p.num_heads + 2 * p.num_kv_heads) * d + c.pad;
        p.q_stride = p.k_stride = p.q_out_stride = p.k_out_stride = stride;
        if (p.append_kv) p.v_stride = stride;
    } else if (c.pad != 0) {
        p.q_stride = p.q_out_stride = p.num_heads * d + c.pad;
        p.k_stride = p.k_out_stride = p.num_kv_heads * d + c.pad;
        if (p.append_kv) p.v_stride = p.num_kv_heads * d + c.pad;
    }
    return c;
}

void run_and_check(RopeCase c) {
    c = with_strides(c);
    shared_runtime();  // makes the device's context current for the allocations below
    Rope op(c.p);
    c.p = op.problem();  // defaults filled in: the reference reads them
    INFO(op.describe() << " pad " << c.pad << " misalign " << c.misalign << (c.in_place ? " in place" : "")
                       << (c.fused ? " fused qkv" : ""));
    RopeBuffers buffers(c);
    const auto in = buffers.inputs();
    const auto out = buffers.outputs();
    op.run(shared_runtime(), Inputs(in.data(), in.size()), Outputs(out.data(), out.size()));
    buffers.check(op.frequencies());
}

RopeProblem appending(RopeProblem p, int64_t page_size, int64_t num_pages) {
    p.append_kv = true, p.page_size = page_size, p.num_pages = num_pages;
    return p;
}

}  // namespace

TEST_CASE("Rope with the KV append matches a double-precision reference", "[gpu][rope]") {
    TILEOPS_REQUIRE_GPU();
    RopeProblem llama{1, 32, 8, 128};
    llama.theta = 500000.0, llama.scaling = RopeScaling::llama3();
    SECTION("Llama 3 decode steps into a paged bf16 cache") {
        for (int64_t tokens : {1, 7, 64}) {
            llama.num_tokens = tokens;
            run_and_check({appending(llama, 16, 8)});
        }
    }
    SECTION("a varlen prefill into an fp8 cache, saturating keys") {
        llama.num_tokens = 777;
        RopeProblem p = appending(llama, 32, 30);
        p.kv_dtype = DType::fp8_e4m3, p.k_scale = 0.005f, p.v_scale = 0.02f;
        run_and_check({p});
        p.dtype = DType::fp16, p.k_scale = 0.5f, p.v_scale = 2.0f;
        run_and_check({p, 0, 0, true});
    }
    SECTION("a fused QKV row rotated in place, appended to a contiguous cache") {
        RopeProblem phi{130, 32, 32, 80, 32};  // Phi-2: 32 of 80 elements rotate
        phi.dtype = DType::fp16;
        run_and_check({appending(phi, 200, 1), 0, 0, false, true});
        phi.dtype = DType::bf16;
        run_and_check({appending(phi, 64, 3), 6, 0, false, true});
    }
    SECTION("GPT-2: no rotation, a fused QKV row copied in place and appended") {
        RopeProblem gpt2{37, 12, 12, 64};
        gpt2.style = RopeStyle::none;
        run_and_check({appending(gpt2, 16, 4), 0, 0, true, true});
        gpt2.dtype = DType::fp32;
        run_and_check({appending(gpt2, 16, 4), 2, 1, false});
    }
    SECTION("misaligned operands with rows not a multiple of 16 bytes") {
        RopeProblem p{9, 8, 2, 64};
        p.dtype = DType::bf16, p.style = RopeStyle::gptj;
        run_and_check({appending(p, 16, 1), 3, 1});
        p.style = RopeStyle::neox, p.rotary_dim = 34, p.head_dim = 96;  // 17 pairs: one element at a time
        run_and_check({appending(p, 16, 1), 0, 0});
    }
}

TEST_CASE("Rope without the append: styles, dtypes, partial rotation, in place", "[gpu][rope]") {
    TILEOPS_REQUIRE_GPU();
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    RopeProblem gptj{33, 16, 16, 256, 64};  // GPT-J
    gptj.style = RopeStyle::gptj, gptj.dtype = dtype;
    run_and_check({gptj, 0, 0, true});
    run_and_check({gptj, 8, 0, false});
    RopeProblem neox{5000, 8, 4, 64};  // many tokens: the grid walks them
    neox.dtype = dtype, neox.scaling = {RopeScaling::Type::linear, 4.0};
    run_and_check({neox, 0, 0, false});
    RopeProblem partial{3, 4, 1, 128, 32};
    partial.dtype = dtype;
    run_and_check({partial, 0, 1, true});
    run_and_check({partial, 2, 1, false});
}

TEST_CASE("Every Rope config in the search space is correct", "[gpu][rope]") {
    TILEOPS_REQUIRE_GPU();
    RopeProblem p{100, 12, 4, 128};
    p.theta = 500000.0;
    for (const bool gptj : {false, true}) {
        p.style = gptj ? RopeStyle::gptj : RopeStyle::neox;
        Runtime& runtime = shared_runtime();
        detail::RuntimeImpl& impl = runtime.impl();
        Rope op(appending(p, 16, 8));
        const RopeCase c{op.problem()};
        RopeBuffers buffers(c);
        const auto in = buffers.inputs();
        const auto out = buffers.outputs();
        std::vector<Config> configs = op.model().search_space(runtime.device());
        configs.push_back({{"threads", 32}, {"vec", 1}, {"heads_per_thread", 16}});
        configs.push_back({{"threads", 1024}, {"vec", 8}, {"heads_per_thread", 3}});
        std::vector<detail::LaunchPlan> plans;
        for (const Config& config : configs)
            for (int vec : op.model().vector_widths(config)) plans.push_back(op.model().plan(config, vec, runtime.device()));
        test::build_kernels(runtime, plans);
        for (const Config& config : configs) {
            INFO((gptj ? "gptj" : "neox") << " config " << tuning::config_text(config));
            for (int vec : op.model().vector_widths(config)) {
                INFO("vector width " << vec);
                const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, vec);
                buffers.poison_outputs();
                op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
                buffers.check(op.frequencies());
            }
        }
    }
}
