// Each memory-bound op against a double-precision reference on the CPU, on random inputs, with
// poisoned outputs, padded row strides and row lengths that are not multiples of any tile.
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "support/device_tensor.hpp"
#include "support/row_reference.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

struct Shape {
    int64_t rows, cols;
};

// 1 row; tiny and odd rows; rows longer than a block; longer than a cluster can hold at fp32.
const Shape kShapes[] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}, {2, 65536}, {2, 70001}, {3, 262144}, {130, 4096}};

std::string label(const char* op, Shape s, DType dtype, int64_t pad) {
    return fmt::format("{} {}x{} {} pad {}", op, s.rows, s.cols, dtype_name(dtype), pad);
}

// Compares with the reference as the output dtype stores it (what an exact kernel would write):
// the tolerance then covers the kernel's arithmetic, not the format (fp16 softmax outputs of
// 1e-6 are subnormal, for instance).
void expect_close(const std::vector<double>& out, const std::vector<double>& ref, DType out_dtype, const std::string& what) {
    const double error = test::relative_error(out, test::round_to(out_dtype, ref));
    INFO(what << ": relative error " << error << " (tolerance " << test::tolerance(out_dtype) << ")");
    CHECK(error <= test::tolerance(out_dtype));
}

}  // namespace

TEST_CASE("RmsNorm matches a double-precision reference", "[gpu][rmsnorm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    const bool residual = GENERATE(false, true);
    const int64_t pad = GENERATE(0, 8);
    for (Shape s : kShapes) {
        const int64_t stride = s.cols + pad;
        RmsNormProblem problem{s.rows, s.cols, dtype, {}, 1e-5f, residual, stride, stride, stride};
        RmsNorm op(problem);
        auto x = test::round_to(dtype, test::random_values(s.rows * s.cols, 1 + s.cols));
        auto r = test::round_to(dtype, test::random_values(s.rows * s.cols, 2 + s.cols));
        auto w = test::round_to(dtype, test::random_values(s.cols, 3 + s.cols, 0.5, 1.5));
        DeviceMatrix dx(dtype, s.rows, s.cols, stride), dr(dtype, s.rows, s.cols, stride), dw(dtype, 1, s.cols);
        DeviceMatrix dy(dtype, s.rows, s.cols, stride), dsum(dtype, s.rows, s.cols, stride);
        dx.upload(x);
        dr.upload(r);
        dw.upload(w);
        if (residual)
            op.run(shared_runtime(), {dx.data(), dr.data(), dw.data()}, {dy.data(), dsum.data()});
        else
            op.run(shared_runtime(), {dx.data(), dw.data()}, {dy.data()});
        std::vector<double> sum_ref;
        const auto y_ref =
            test::rmsnorm_reference(x, residual ? r : std::vector<double>{}, w, s.rows, s.cols, 1e-5, &sum_ref);
        const std::string what = label(residual ? "rmsnorm+residual" : "rmsnorm", s, dtype, pad);
        expect_close(dy.download(), y_ref, dtype, what);
        CHECK(dy.gaps_untouched());
        if (residual) {
            expect_close(dsum.download(), test::round_to(dtype, sum_ref), dtype, what + " sum");
            CHECK(dsum.gaps_untouched());
        }
    }
}

TEST_CASE("RmsNorm with the residual sum written in place", "[gpu][rmsnorm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = DType::bf16;
    const int64_t rows = 17, cols = 4096;
    RmsNorm op({rows, cols, dtype, {}, 1e-6f, true});
    auto x = test::round_to(dtype, test::random_values(rows * cols, 11));
    auto r = test::round_to(dtype, test::random_values(rows * cols, 12));
    auto w = test::round_to(dtype, test::random_values(cols, 13, 0.5, 1.5));
    DeviceMatrix dx(dtype, rows, cols), dr(dtype, rows, cols), dw(dtype, 1, cols), dy(dtype, rows, cols);
    dx.upload(x);
    dr.upload(r);
    dw.upload(w);
    op.run(shared_runtime(), {dx.data(), dr.data(), dw.data()}, {dy.data(), dr.data()});  // sum over residual
    std::vector<double> sum(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + r[i];
    expect_close(dr.download(), test::round_to(dtype, sum), dtype, "in-place sum");
}

TEST_CASE("RmsNorm writes fp32 output from bf16 input", "[gpu][rmsnorm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const int64_t rows = 9, cols = 1000;
    RmsNorm op({rows, cols, DType::bf16, DType::fp32, 1e-6f});
    auto x = test::round_to(DType::bf16, test::random_values(rows * cols, 21));
    auto w = test::round_to(DType::bf16, test::random_values(cols, 22, 0.5, 1.5));
    DeviceMatrix dx(DType::bf16, rows, cols), dw(DType::bf16, 1, cols), dy(DType::fp32, rows, cols);
    dx.upload(x);
    dw.upload(w);
    op.run(shared_runtime(), {dx.data(), dw.data()}, {dy.data()});
    const auto ref = test::rmsnorm_reference(x, {}, w, rows, cols, 1e-6);
    // fp32 output of a bf16 computation: the inputs are exact, so only fp32 rounding remains.
    expect_close(dy.download(), ref, DType::fp32, "rmsnorm bf16->fp32");
}

TEST_CASE("LayerNorm matches a double-precision reference", "[gpu][layernorm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    const int64_t pad = GENERATE(0, 8);
    for (Shape s : kShapes) {
        const int64_t stride = s.cols + pad;
        LayerNorm op({s.rows, s.cols, dtype, {}, 1e-5f, stride, stride});
        // An offset mean checks that the variance is computed stably.
        auto x = test::round_to(dtype, test::random_values(s.rows * s.cols, 31 + s.cols, 2.0, 6.0));
        auto w = test::round_to(dtype, test::random_values(s.cols, 32, 0.5, 1.5));
        auto b = test::round_to(dtype, test::random_values(s.cols, 33, -1.0, 1.0));
        DeviceMatrix dx(dtype, s.rows, s.cols, stride), dw(dtype, 1, s.cols), db(dtype, 1, s.cols);
        DeviceMatrix dy(dtype, s.rows, s.cols, stride);
        dx.upload(x);
        dw.upload(w);
        db.upload(b);
        op.run(shared_runtime(), {dx.data(), dw.data(), db.data()}, {dy.data()});
        const auto ref = test::layernorm_reference(x, w, b, s.rows, s.cols, 1e-5);
        expect_close(dy.download(), ref, dtype, label("layernorm", s, dtype, pad));
        CHECK(dy.gaps_untouched());
    }
}

TEST_CASE("LayerNorm stays exact on rows far from zero (fp32, mean 1000, spread 1)", "[gpu][layernorm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    // E[x^2] - E[x]^2 would lose every digit here (1e6 against a variance near 0.3); the kernels
    // merge per-thread means and squared deviations, which must not.
    for (Shape s : kShapes) {
        LayerNorm op({s.rows, s.cols, DType::fp32});
        const auto x = test::round_to(DType::fp32, test::random_values(s.rows * s.cols, 71 + s.cols, 999.0, 1001.0));
        const auto w = test::round_to(DType::fp32, test::random_values(s.cols, 72, 0.5, 1.5));
        const auto b = test::round_to(DType::fp32, test::random_values(s.cols, 73, -1.0, 1.0));
        DeviceMatrix dx(DType::fp32, s.rows, s.cols), dw(DType::fp32, 1, s.cols), db(DType::fp32, 1, s.cols);
        DeviceMatrix dy(DType::fp32, s.rows, s.cols);
        dx.upload(x);
        dw.upload(w);
        db.upload(b);
        op.run(shared_runtime(), {dx.data(), dw.data(), db.data()}, {dy.data()});
        // Deviations are 1e-3 of the values, so fp32 sums of the values (the thread means) keep
        // about 1e-4 of a deviation: the bound; a cancelling variance would be off by 10-20%.
        const double error = test::relative_error(dy.download(), test::layernorm_reference(x, w, b, s.rows, s.cols, 1e-5));
        INFO(label("layernorm far from zero", s, DType::fp32, 0) << ": relative error " << error);
        CHECK(error <= 1e-4);
    }
}

TEST_CASE("Softmax and log-softmax match a double-precision reference", "[gpu][softmax]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    const bool log = GENERATE(false, true);
    const int64_t pad = GENERATE(0, 8);
    for (Shape s : kShapes) {
        const int64_t stride = s.cols + pad;
        Softmax op({s.rows, s.cols, dtype, {}, log, stride, stride});
        // A wide range, so the softmax is far from uniform.
        auto x = test::round_to(dtype, test::random_values(s.rows * s.cols, 41 + s.cols, -8.0, 8.0));
        DeviceMatrix dx(dtype, s.rows, s.cols, stride), dy(dtype, s.rows, s.cols, stride);
        dx.upload(x);
        op.run(shared_runtime(), {dx.data()}, {dy.data()});
        const auto ref = test::softmax_reference(x, s.rows, s.cols, log);
        expect_close(dy.download(), ref, dtype, label(log ? "log_softmax" : "softmax", s, dtype, pad));
        CHECK(dy.gaps_untouched());
    }
}

TEST_CASE("Softmax of rows with -inf entries (masked attention scores)", "[gpu][softmax]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::fp32, DType::bf16);
    const bool log = GENERATE(false, true);
    const double neg_inf = -std::numeric_limits<double>::infinity();
    // Row 0 is all -inf (NaN out, as torch); row 1 has its first half masked, so whole warps,
    // blocks or CTAs of a cluster see nothing but -inf; row 2 has every third entry masked.
    for (Shape s : {Shape{37, 1000}, Shape{5, 4097}, Shape{3, 70001}, Shape{3, 262144}}) {
        Softmax op({s.rows, s.cols, dtype, {}, log});
        auto x = test::round_to(dtype, test::random_values(s.rows * s.cols, 43 + s.cols, -8.0, 8.0));
        for (int64_t j = 0; j < s.cols; ++j) {
            x[j] = neg_inf;
            if (j < s.cols / 2) x[s.cols + j] = neg_inf;
            if (j % 3 == 0) x[2 * s.cols + j] = neg_inf;
        }
        DeviceMatrix dx(dtype, s.rows, s.cols, s.cols), dy(dtype, s.rows, s.cols, s.cols);
        dx.upload(x);
        op.run(shared_runtime(), {dx.data()}, {dy.data()});
        const std::vector<double> y = dy.download();
        const std::vector<double> ref = test::softmax_reference(x, s.rows, s.cols, log);
        const std::string what = label(log ? "log_softmax" : "softmax", s, dtype, 0);
        INFO(what);
        std::vector<double> unmasked_out, unmasked_ref;
        int64_t nan_in_masked_row = 0, wrong_masked = 0;
        for (int64_t i = 0; i < s.rows * s.cols; ++i) {
            if (i < s.cols) {
                nan_in_masked_row += std::isnan(y[i]);
            } else if (x[i] == neg_inf) {
                wrong_masked += log ? y[i] != neg_inf : y[i] != 0.0;
            } else {
                unmasked_out.push_back(y[i]);
                unmasked_ref.push_back(ref[i]);
            }
        }
        CHECK(nan_in_masked_row == s.cols);
        CHECK(wrong_masked == 0);
        expect_close(unmasked_out, unmasked_ref, dtype, what);
    }
}

namespace {

double reference_elementwise(ElementwiseOp op, double a, double b) {
    switch (op) {
        // 1 + erf(x) = erfc(-x), without the cancellation of 1 + erf for negative x.
        case ElementwiseOp::gelu: return 0.5 * a * std::erfc(-a / std::sqrt(2.0));
        case ElementwiseOp::gelu_tanh:
            return 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
        case ElementwiseOp::silu: return a / (1.0 + std::exp(-a));
        case ElementwiseOp::silu_mul: return a / (1.0 + std::exp(-a)) * b;
        case ElementwiseOp::add: return a + b;
        case ElementwiseOp::mul: return a * b;
    }
    return 0;
}

}  // namespace

TEST_CASE("Elementwise ops match a double-precision reference", "[gpu][elementwise]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const ElementwiseOp kind = GENERATE(ElementwiseOp::gelu, ElementwiseOp::gelu_tanh, ElementwiseOp::silu,
                                        ElementwiseOp::silu_mul, ElementwiseOp::add, ElementwiseOp::mul);
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    const int64_t pad = GENERATE(0, 8);
    const bool broadcast = is_binary(kind) && kind != ElementwiseOp::silu_mul ? GENERATE(false, true) : false;
    for (Shape s : kShapes) {
        const int64_t stride = s.cols + pad;
        ElementwiseProblem problem{kind, s.rows, s.cols, dtype, {}, broadcast, stride, stride, stride};
        Elementwise op(problem);
        auto a = test::round_to(dtype, test::random_values(s.rows * s.cols, 51 + s.cols, -4.0, 4.0));
        const int64_t b_rows = broadcast ? 1 : s.rows;
        auto b = test::round_to(dtype, test::random_values(b_rows * s.cols, 52 + s.cols, -4.0, 4.0));
        DeviceMatrix da(dtype, s.rows, s.cols, stride), db(dtype, b_rows, s.cols, broadcast ? 0 : stride);
        DeviceMatrix dy(dtype, s.rows, s.cols, stride);
        da.upload(a);
        db.upload(b);
        if (is_binary(kind))
            op.run(shared_runtime(), {da.data(), db.data()}, {dy.data()});
        else
            op.run(shared_runtime(), {da.data()}, {dy.data()});
        std::vector<double> ref(a.size());
        for (int64_t i = 0; i < s.rows; ++i)
            for (int64_t j = 0; j < s.cols; ++j)
                ref[i * s.cols + j] = reference_elementwise(kind, a[i * s.cols + j], b[(broadcast ? 0 : i) * s.cols + j]);
        expect_close(dy.download(), ref, dtype,
                     label(elementwise_op_name(kind), s, dtype, pad) + (broadcast ? " broadcast" : ""));
        CHECK(dy.gaps_untouched());
    }
}

// The norm-wise check above is dominated by large outputs; GELU's negative tail (outputs down to
// 1e-32, computed through erfc) is checked element by element: within one unit in the last place
// of a 16-bit output format (half an ulp of rounding, the rest for the arithmetic); fp32 within
// 2e-5 (near x = -12, outputs near 1e-32, the fp32 rounding of erfc's exponent -x^2 / 2, about 72,
// costs 1.2e-5; measured on H100).
TEST_CASE("GELU is accurate element by element down its negative tail", "[gpu][elementwise]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    const int64_t cols = 4097;
    std::vector<double> a(cols);
    for (int64_t j = 0; j < cols; ++j) a[j] = -12.0 + 16.0 * static_cast<double>(j) / (cols - 1);  // [-12, 4]
    a = test::round_to(dtype, a);
    DeviceMatrix da(dtype, 1, cols), dy(dtype, 1, cols);
    da.upload(a);
    Elementwise op({ElementwiseOp::gelu, 1, cols, dtype});
    op.run(shared_runtime(), {da.data()}, {dy.data()});
    const std::vector<double> y = dy.download();
    // Unit in the last place relative to the value, and the smallest subnormal of the format.
    const double ulp = dtype == DType::fp32 ? 2e-5 : dtype == DType::fp16 ? 0x1p-10 : 0x1p-7;
    const double tiny = dtype == DType::fp32 ? 0x1p-149 : dtype == DType::fp16 ? 0x1p-24 : 0x1p-133;
    int64_t bad = 0;
    std::string first_bad;
    for (int64_t j = 0; j < cols; ++j) {
        const double ref = reference_elementwise(ElementwiseOp::gelu, a[j], 0);
        if (std::abs(y[j] - ref) > ulp * std::abs(ref) + tiny && bad++ == 0)
            first_bad = fmt::format("gelu({}) = {}, reference {}", a[j], y[j], ref);
    }
    INFO(dtype_name(dtype) << ": " << bad << " elements off, first " << first_bad);
    CHECK(bad == 0);
}

TEST_CASE("Misaligned pointers take a narrower vector path and stay correct", "[gpu][elementwise]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = DType::bf16;
    const int64_t rows = 4, cols = 4096;
    // One element past a 16-byte boundary: only 2-byte accesses are possible.
    DeviceMatrix da(dtype, rows, cols, 0, 2), dy(dtype, rows, cols, 0, 2);
    auto a = test::round_to(dtype, test::random_values(rows * cols, 61));
    da.upload(a);
    Elementwise op({ElementwiseOp::silu, rows, cols, dtype});
    op.run(shared_runtime(), {da.data()}, {dy.data()});
    std::vector<double> ref(a.size());
    for (size_t i = 0; i < a.size(); ++i) ref[i] = reference_elementwise(ElementwiseOp::silu, a[i], 0);
    expect_close(dy.download(), ref, dtype, "silu misaligned");

    RmsNorm norm({rows, cols, dtype});
    DeviceMatrix dw(dtype, 1, cols, 0, 2);
    dw.upload(test::round_to(dtype, test::random_values(cols, 62, 0.5, 1.5)));
    norm.run(shared_runtime(), {da.data(), dw.data()}, {dy.data()});
    auto y = dy.download();
    CHECK(test::relative_error(y, y) == 0);  // finite: every element written
}
