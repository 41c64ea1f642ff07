// Quantize against a host reference computed in double from the same random inputs (never zeros),
// with rows holding a few huge values, an all-zero row and a row of tiny values; odd cols (4095,
// 50257), cols below 128 and not a multiple of 128, one row, a million rows (the grid walks
// them), row strides, pointers one element off their vectors, and poisoned outputs whose
// unwritten parts (gaps between rows, a guard row past the end, the scales' gaps) must stay
// poisoned. Every scaling, bf16 and fp16; every config of each search space; the computed
// per-tensor scale run after run and from a CUDA graph (its workspace must come back to zero).
//
// What is exact: each scale is within 1e-6 (relative) of max(amax / 448, 2^-126) computed in
// double. Each code is exactly e4m3(x * (1 / scale)) with fp32 arithmetic (what the kernel
// computes, reproduced on the host), and equals the rounding of the double quotient x / scale
// except where that quotient lies within 1e-6 (relative) of the midpoint between two codes, where
// it may be one e4m3 step off (the fp32 product rounded the other way).
#include <algorithm>
#include <cmath>
#include <cstdint>
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
#include "tileops/quantize.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

constexpr double kMinScale = 1.17549435082228750797e-38;  // 2^-126
constexpr int64_t kBlock = 128;

// Every non-negative finite e4m3 value, ascending: codes 0 to 126 (127 is NaN).
const std::vector<double>& e4m3_values() {
    static const std::vector<double> values = [] {
        std::vector<uint8_t> codes(127);
        for (int i = 0; i < 127; ++i) codes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
        return test::decode(DType::fp8_e4m3, codes);
    }();
    return values;
}

// The e4m3 value nearest to v (ties to the even code), saturated to +-448; exact.
double round_e4m3(double v) {
    const std::vector<double>& values = e4m3_values();
    const double a = std::fabs(v);
    if (a >= values.back()) return std::copysign(values.back(), v);
    const size_t hi = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    if (values[hi] == a) return std::copysign(a, v);
    const size_t lo = hi - 1;
    const double mid = (values[lo] + values[hi]) / 2;  // exact: both have 4 significant bits
    const size_t nearest = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
    return std::copysign(values[nearest], v);
}

// Whether |v| lies within `relative` of the midpoint between the two codes around it.
bool near_midpoint(double v, double relative) {
    const std::vector<double>& values = e4m3_values();
    const double a = std::fabs(v);
    if (a >= values.back()) return false;
    const size_t hi = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    if (hi == 0) return false;
    const double mid = (values[hi - 1] + values[hi]) / 2;
    return std::fabs(a - mid) <= relative * mid;
}

// One step of e4m3 at v's magnitude (the gap to the next code up, or down at 448).
double e4m3_step(double v) {
    const std::vector<double>& values = e4m3_values();
    const double a = std::fabs(v);
    const size_t i = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    if (i + 1 >= values.size()) return values.back() - values[values.size() - 2];
    return values[i + 1] - values[i];
}

// x in [-2, 2], never zero except row 1 (all zeros, when rows > 3); row 0 holds a few huge values
// (up to 3000: past 448 x a small scale), row 2 (when rows > 4) values of ~1e-37 (their amax / 448
// below 2^-126 for bf16; zeros in fp16). Rounded to the dtype.
std::vector<double> inputs(DType dtype, int64_t rows, int64_t cols, uint64_t seed, double scale = 1.0) {
    std::vector<double> x = test::random_values(static_cast<size_t>(rows * cols), seed);
    for (double& v : x) {
        v *= scale;
        if (v == 0) v = 0.5;
    }
    auto at = [&](int64_t r, int64_t c) -> double& { return x[static_cast<size_t>(r * cols + c)]; };
    if (rows > 2)
        for (int64_t c = 3; c < cols; c += std::max<int64_t>(1, cols / 5))
            at(0, c) = (c % 2 ? -1.0 : 1.0) * (300.0 + std::fmod(0.9 * static_cast<double>(c), 2700.0));
    if (rows > 3)
        for (int64_t c = 0; c < cols; ++c) at(1, c) = 0;
    if (rows > 4)
        for (int64_t c = 0; c < cols; ++c) at(2, c) *= 1e-37;
    return test::round_to(dtype, x);
}

struct Shape {
    int64_t rows, cols;
    int64_t x_pad = 0, q_pad = 0;   // elements between rows beyond cols
    size_t x_misalign = 0, q_misalign = 0;  // elements the pointers are moved off a 16-byte boundary
};

struct Outcome {
    int64_t mismatches_near_midpoint = 0;
};

// The op's scales as one value per element's group, checked against the reference's.
class Checker {
public:
    Checker(const QuantizeProblem& p, const std::vector<double>& x) : p_(p), x_(x) {}

    // Checks the downloaded codes against x and the scales the op used (scale_of(r, c)).
    template <class ScaleOf>
    void check_codes(const std::vector<double>& q, ScaleOf scale_of, Outcome& outcome) const {
        int64_t wrong = 0, unexplained = 0;
        for (int64_t r = 0; r < p_.rows; ++r)
            for (int64_t c = 0; c < p_.cols; ++c) {
                const size_t i = static_cast<size_t>(r * p_.cols + c);
                const float scale = static_cast<float>(scale_of(r, c));
                const float inv = 1.0f / scale;
                const float product = static_cast<float>(x_[i]) * inv;  // what the kernel computes
                const double got = q[i];
                if (!(got == round_e4m3(product))) {
                    if (++wrong <= 5) UNSCOPED_INFO("row " << r << " col " << c << ": x " << x_[i] << " scale " << scale
                                                           << " code " << got << ", fp32 rounding "
                                                           << round_e4m3(product));
                    continue;
                }
                const double exact = x_[i] / static_cast<double>(scale);
                if (got != round_e4m3(exact)) {
                    if (near_midpoint(exact, 1e-6) && std::fabs(got - round_e4m3(exact)) <= e4m3_step(exact))
                        ++outcome.mismatches_near_midpoint;
                    else
                        ++unexplained;
                }
            }
        CHECK(wrong == 0);
        CHECK(unexplained == 0);
    }

    // max(amax / 448, 2^-126) over the elements [r0, r1) x [c0, c1).
    double reference_scale(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
        double amax = 0;
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x_[static_cast<size_t>(r * p_.cols + c)]));
        return std::max(amax / 448.0, kMinScale);
    }

private:
    QuantizeProblem p_;
    const std::vector<double>& x_;
};

bool scale_close(double got, double want) { return std::fabs(got - want) <= 1e-6 * want; }

// Every element of `values` from `begin` on is NaN (the poison), i.e. was never written.
bool poisoned_from(const std::vector<double>& values, size_t begin) {
    for (size_t i = begin; i < values.size(); ++i)
        if (!std::isnan(values[i])) return false;
    return true;
}

// Runs the problem (strides and offsets from `shape`) on inputs from `seed` and checks it all.
Outcome run_and_check(QuantizeProblem p, const Shape& shape, uint64_t seed, double input_scale = 1.0) {
    Runtime& runtime = shared_runtime();
    const int64_t rows = p.rows, cols = p.cols, blocks = (cols + kBlock - 1) / kBlock;
    p.x_stride = cols + shape.x_pad;
    p.q_stride = cols + shape.q_pad;
    if (p.scaling == QuantizeScaling::block_1x128) p.scale_stride = rows + 3;
    INFO(quantize_scaling_name(p.scaling) << (p.static_scale ? " static" : "") << " " << dtype_name(p.dtype) << " "
                                          << rows << "x" << cols << " pads " << shape.x_pad << "/" << shape.q_pad
                                          << " misaligned " << shape.x_misalign << "/" << shape.q_misalign);
    const std::vector<double> x = inputs(p.dtype, rows, cols, seed, input_scale);
    DeviceMatrix d_x(p.dtype, rows, cols, p.x_stride, shape.x_misalign * dtype_size(p.dtype));
    d_x.upload(x);
    // One guard row past the end of q and of the scales: it must stay poisoned.
    DeviceMatrix d_q(DType::fp8_e4m3, rows + 1, cols, p.q_stride, shape.q_misalign);
    const bool blocks_scaled = p.scaling == QuantizeScaling::block_1x128;
    const int64_t vector_scales = p.scaling == QuantizeScaling::per_token ? rows : 1;
    DeviceMatrix d_scales = blocks_scaled ? DeviceMatrix(DType::fp32, blocks + 1, rows, p.scale_stride)
                                          : DeviceMatrix(DType::fp32, 1, vector_scales + 1);
    // A static scale that saturates row 0's huge values.
    const double given_scale = 2.0 / 448.0 * input_scale;
    DeviceMatrix d_scale(DType::fp32, 1, 1);
    d_scale.upload({given_scale});

    Quantize op(p);
    if (p.static_scale)
        op.run(runtime, {d_x.data(), d_scale.data()}, {d_q.data()});
    else
        op.run(runtime, {d_x.data()}, {d_q.data(), d_scales.data()});

    const std::vector<double> q_all = d_q.download();
    CHECK(poisoned_from(q_all, static_cast<size_t>(rows * cols)));  // the guard row
    CHECK(d_q.gaps_untouched());
    const std::vector<double> q(q_all.begin(), q_all.begin() + rows * cols);
    const std::vector<double> scales = d_scales.download();
    const Checker checker(p, x);
    Outcome outcome;
    switch (p.scaling) {
        case QuantizeScaling::per_token: {
            CHECK(poisoned_from(scales, static_cast<size_t>(rows)));
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; ++r) {
                const double want = checker.reference_scale(r, r + 1, 0, cols);
                if (!scale_close(scales[static_cast<size_t>(r)], want) && ++bad <= 5)
                    UNSCOPED_INFO("row " << r << ": scale " << scales[static_cast<size_t>(r)] << ", want " << want);
            }
            CHECK(bad == 0);
            checker.check_codes(q, [&](int64_t r, int64_t) { return scales[static_cast<size_t>(r)]; }, outcome);
            if (rows > 3) {  // the zero row: the smallest scale, zero codes
                CHECK(scales[1] == kMinScale);
                for (int64_t c = 0; c < cols; ++c) CHECK(q[static_cast<size_t>(cols + c)] == 0);
            }
            break;
        }
        case QuantizeScaling::block_1x128: {
            CHECK(poisoned_from(scales, static_cast<size_t>(blocks * rows)));
            CHECK(d_scales.gaps_untouched());
            int64_t bad = 0;
            for (int64_t b = 0; b < blocks; ++b)
                for (int64_t r = 0; r < rows; ++r) {
                    const double want = checker.reference_scale(r, r + 1, b * kBlock, std::min(cols, (b + 1) * kBlock));
                    const double got = scales[static_cast<size_t>(b * rows + r)];
                    if (!scale_close(got, want) && ++bad <= 5)
                        UNSCOPED_INFO("row " << r << " block " << b << ": scale " << got << ", want " << want);
                }
            CHECK(bad == 0);
            checker.check_codes(
                q, [&](int64_t r, int64_t c) { return scales[static_cast<size_t>((c / kBlock) * rows + r)]; }, outcome);
            break;
        }
        case QuantizeScaling::per_tensor: {
            if (p.static_scale) {
                const double used = static_cast<float>(given_scale);
                checker.check_codes(q, [&](int64_t, int64_t) { return used; }, outcome);
                if (rows > 2) {  // row 0's huge values saturate
                    bool saturated = false;
                    for (int64_t c = 0; c < cols; ++c) saturated |= std::fabs(q[static_cast<size_t>(c)]) == 448.0;
                    CHECK(saturated);
                }
            } else {
                CHECK(poisoned_from(scales, 1));
                CHECK(scale_close(scales[0], checker.reference_scale(0, rows, 0, cols)));
                checker.check_codes(q, [&](int64_t, int64_t) { return scales[0]; }, outcome);
            }
            break;
        }
    }
    // Dequantized values are finite.
    for (size_t i = 0; i < q.size(); ++i)
        if (!std::isfinite(q[i])) {
            CHECK(std::isfinite(q[i]));
            break;
        }
    return outcome;
}

QuantizeProblem problem(int64_t rows, int64_t cols, QuantizeScaling scaling, DType dtype, bool static_scale = false) {
    QuantizeProblem p{rows, cols, dtype, DType::fp8_e4m3, scaling};
    p.static_scale = static_scale;
    return p;
}

}  // namespace

TEST_CASE("Quantize matches a double-precision reference", "[gpu][quantize]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::bf16, DType::fp16);
    struct Mode {
        QuantizeScaling scaling;
        bool static_scale;
    };
    const Mode mode = GENERATE(Mode{QuantizeScaling::per_token, false}, Mode{QuantizeScaling::block_1x128, false},
                               Mode{QuantizeScaling::per_tensor, false}, Mode{QuantizeScaling::per_tensor, true});
    int64_t near_midpoint = 0, elements = 0;
    for (const Shape& s : {Shape{1, 4096}, Shape{37, 4095}, Shape{5, 50257}, Shape{33, 100}, Shape{65, 1000, 8, 24},
                           Shape{17, 768, 0, 0, 1, 0}, Shape{17, 768, 0, 0, 0, 1}, Shape{9, 130, 3, 5, 1, 3},
                           Shape{6, 7, 1, 0, 1, 1}, Shape{1000, 4096}, Shape{1100000, 8},
                           // the search-space test's shapes, whose heuristic output is its reference
                           Shape{67, 1000, 8, 8}, Shape{9, 33000}}) {
        near_midpoint += run_and_check(problem(s.rows, s.cols, mode.scaling, dtype, mode.static_scale), s, 17)
                             .mismatches_near_midpoint;
        elements += s.rows * s.cols;
    }
    // A code one step off the double quotient's rounding needs that quotient within 1e-6 of a
    // midpoint: rare.
    INFO(near_midpoint << " codes of " << elements << " one step off at a midpoint");
    CHECK(near_midpoint * 10000 <= elements);
}

TEST_CASE("Quantize: every config of each search space is correct at every vector width", "[gpu][quantize][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    struct Case {
        QuantizeProblem p;
        Shape shape;
    };
    for (const Case& c : {Case{problem(67, 1000, QuantizeScaling::per_token, DType::bf16), {67, 1000, 8, 8}},
                          Case{problem(9, 33000, QuantizeScaling::per_token, DType::bf16), {9, 33000}},
                          Case{problem(67, 1000, QuantizeScaling::block_1x128, DType::bf16), {67, 1000, 8, 8}},
                          Case{problem(67, 1000, QuantizeScaling::per_tensor, DType::bf16), {67, 1000, 8, 8}},
                          Case{problem(67, 1000, QuantizeScaling::per_tensor, DType::fp16, true), {67, 1000}}}) {
        QuantizeProblem p = c.p;
        p.x_stride = p.cols + c.shape.x_pad, p.q_stride = p.cols + c.shape.q_pad;
        Quantize op(p);
        const std::vector<double> x = inputs(p.dtype, p.rows, p.cols, 23);
        DeviceMatrix d_x(p.dtype, p.rows, p.cols, p.x_stride);
        d_x.upload(x);
        DeviceMatrix d_q(DType::fp8_e4m3, p.rows, p.cols, p.q_stride);
        const int64_t blocks = (p.cols + kBlock - 1) / kBlock;
        DeviceMatrix d_scales = p.scaling == QuantizeScaling::block_1x128
                                    ? DeviceMatrix(DType::fp32, blocks, p.rows)
                                    : DeviceMatrix(DType::fp32, 1, p.scaling == QuantizeScaling::per_token ? p.rows : 1);
        DeviceMatrix d_scale(DType::fp32, 1, 1);
        d_scale.upload({0.01});
        const std::vector<TensorArg> in = p.static_scale ? std::vector<TensorArg>{d_x.data(), d_scale.data()}
                                                         : std::vector<TensorArg>{d_x.data()};
        const std::vector<OutputArg> out = p.static_scale ? std::vector<OutputArg>{d_q.data()}
                                                          : std::vector<OutputArg>{d_q.data(), d_scales.data()};
        // The reference: the heuristic config at the widest width, checked against the host on these
        // shapes by the test above.
        op.run(runtime, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()));
        TILEOPS_CU_CHECK(cuda::driver().cuCtxSynchronize());
        const std::vector<double> want_q = d_q.download(), want_scales = d_scales.download();
        const std::vector<Config> configs = test::this_shard(op.model().search_space(runtime.device()));
        std::vector<detail::LaunchPlan> plans;
        for (const Config& config : configs)
            for (int vec : op.model().vector_widths(config)) plans.push_back(op.model().plan(config, vec, runtime.device()));
        test::build_kernels(runtime, plans);
        for (const Config& config : configs)
            for (int vec : op.model().vector_widths(config)) {
                INFO(op.describe() << " config " << tuning::config_text(config) << " width " << vec);
                d_q.poison();
                d_scales.poison();
                const detail::ResolvedLaunch launch = impl.resolve_config(op.model(), config, vec);
                op.launch_with(launch, Inputs(in.data(), in.size()), Outputs(out.data(), out.size()), nullptr);
                TILEOPS_CU_CHECK(cuda::driver().cuCtxSynchronize());
                CHECK(d_q.download() == want_q);  // no NaN: every code written
                if (!p.static_scale) CHECK(d_scales.download() == want_scales);
            }
    }
}

TEST_CASE("Quantize: the computed per-tensor scale follows its input run after run and in a CUDA graph", "[gpu][quantize]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    const int64_t rows = 300, cols = 4096;
    const QuantizeProblem p = problem(rows, cols, QuantizeScaling::per_tensor, DType::bf16);
    Quantize op(p);
    DeviceMatrix d_x(DType::bf16, rows, cols), d_q(DType::fp8_e4m3, rows, cols), d_scales(DType::fp32, 1, 1);
    const std::vector<double> big = inputs(DType::bf16, rows, cols, 31);  // amax ~3000
    const std::vector<double> small = inputs(DType::bf16, 2, cols, 32);   // amax < 2, then zeros
    const std::vector<double> small_rows = [&] {
        std::vector<double> v(big.size(), 0.25);
        std::copy(small.begin(), small.end(), v.begin());
        return v;
    }();
    auto amax_of = [](const std::vector<double>& v) {
        double m = 0;
        for (double e : v) m = std::max(m, std::fabs(e));
        return m;
    };
    // Eager, three times over alternating inputs: a maximum left in the workspace would stick.
    for (const std::vector<double>* x : {&big, &small_rows, &big, &small_rows}) {
        d_x.upload(*x);
        op.run(runtime, {d_x.data()}, {d_q.data(), d_scales.data()});
        CHECK(scale_close(d_scales.download()[0], amax_of(*x) / 448.0));
    }
    // Captured once, replayed over new inputs.
    const auto& cu = cuda::driver();
    CUstream stream = nullptr;
    TILEOPS_CU_CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    TILEOPS_CU_CHECK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    op.run(runtime, {d_x.data()}, {d_q.data(), d_scales.data()}, stream);
    TILEOPS_CU_CHECK(cu.cuStreamEndCapture(stream, &graph));
    TILEOPS_CU_CHECK(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (const std::vector<double>* x : {&big, &small_rows}) {
        d_x.upload(*x);
        d_q.poison();
        TILEOPS_CU_CHECK(cu.cuGraphLaunch(exec, stream));
        TILEOPS_CU_CHECK(cu.cuStreamSynchronize(stream));
        const double scale = d_scales.download()[0];
        CHECK(scale_close(scale, amax_of(*x) / 448.0));
        const std::vector<double> q = d_q.download();
        bool match = true;
        for (size_t i = 0; i < q.size() && match; ++i)
            match = q[i] == round_e4m3(static_cast<float>((*x)[i]) * (1.0f / static_cast<float>(scale)));
        CHECK(match);
    }
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
    cu.cuStreamDestroy(stream);
}
