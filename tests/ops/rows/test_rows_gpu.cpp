// Each row op (RMSNorm, LayerNorm, softmax) against a double-precision reference on the CPU, on
// random inputs, with poisoned outputs, padded row strides and row lengths that are not multiples
// of any tile.
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "core/op_model.hpp"
#include "support/device_tensor.hpp"
#include "support/row_checks.hpp"
#include "support/row_reference.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::expect_close;
using tileops::test::kShapes;
using tileops::test::label;
using tileops::test::Shape;
using tileops::test::shared_runtime;

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
    std::vector<double> sum_ref;
    const auto y_ref = test::rmsnorm_reference(x, r, w, rows, cols, 1e-6, &sum_ref);
    expect_close(dr.download(), test::round_to(dtype, sum_ref), dtype, "in-place sum");
    expect_close(dy.download(), y_ref, dtype, "y beside the in-place sum");
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
        // One fp32 unit in the last place of a mean near 1000 (6e-5) is 1e-4 of the deviation
        // (0.58): the bound allows the mean two of them, which the sums of a few thousand thread
        // partials may take; a cancelling variance would be off by 10-20%.
        const double error = test::relative_error(dy.download(), test::layernorm_reference(x, w, b, s.rows, s.cols, 1e-5));
        INFO(label("layernorm far from zero", s, DType::fp32, 0) << ": relative error " << error);
        CHECK(error <= 2e-4);
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

TEST_CASE("Softmax of long rows held on chip by the heuristic's resident kernel", "[gpu][softmax]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    struct Case {
        int64_t rows, cols;
        DType dtype;
        bool log;
        int64_t pad;
    };
    // Rows of 100 KB (held from 96 KB once they fill the SMs) to 300 KB (clusters of two CTAs),
    // and fewer rows than SMs held by clusters of eight CTAs, up to 768 KB (24 slots a thread);
    // odd lengths and padded strides, so rows start off the vector width.
    for (const Case& c : {Case{100, 50257, DType::fp32, false, 0}, Case{256, 50432, DType::bf16, true, 0},
                          Case{200, 151936, DType::bf16, false, 8}, Case{130, 100277, DType::fp16, true, 3},
                          Case{160, 65023, DType::bf16, false, 1}, Case{33, 92417, DType::bf16, true, 5},
                          Case{64, 50257, DType::fp32, false, 0}, Case{17, 196607, DType::fp32, false, 2}}) {
        const int64_t stride = c.cols + c.pad;
        Softmax op({c.rows, c.cols, c.dtype, {}, c.log, stride, stride});
        const Config chosen = op.model().heuristic(shared_runtime().device());
        INFO(op.describe() << ": cluster " << chosen.at("cluster") << " x " << chosen.at("threads_per_row") << " threads");
        if (shared_runtime().device().sm() >= 90) CHECK(chosen.count("slots"));
        auto x = test::round_to(c.dtype, test::random_values(c.rows * c.cols, 7 + c.cols, -8.0, 8.0));
        DeviceMatrix dx(c.dtype, c.rows, c.cols, stride), dy(c.dtype, c.rows, c.cols, stride);
        dx.upload(x);
        op.run(shared_runtime(), {dx.data()}, {dy.data()});
        expect_close(dy.download(), test::softmax_reference(x, c.rows, c.cols, c.log), c.dtype,
                     label(c.log ? "log_softmax" : "softmax", Shape{c.rows, c.cols}, c.dtype, c.pad));
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
