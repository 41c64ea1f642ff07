// Each elementwise op against a double-precision reference on the CPU, on random inputs, with
// poisoned outputs, padded row strides, row lengths that are not multiples of any tile and
// misaligned pointers.
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

TEST_CASE("Misaligned pointers take the ragged kernels and stay correct", "[gpu][elementwise]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = DType::bf16;
    const int64_t rows = 4, cols = 4096;
    // One element past a 16-byte boundary: each row's body of whole vectors starts 7 elements in.
    DeviceMatrix da(dtype, rows, cols, 0, 2), dy(dtype, rows, cols, 0, 2);
    auto a = test::round_to(dtype, test::random_values(rows * cols, 61));
    da.upload(a);
    Elementwise op({ElementwiseOp::silu, rows, cols, dtype});
    CHECK(detail::is_ragged_width(op.vector_width({da.data()}, {dy.data()})));
    op.run(shared_runtime(), {da.data()}, {dy.data()});
    std::vector<double> ref(a.size());
    for (size_t i = 0; i < a.size(); ++i) ref[i] = reference_elementwise(ElementwiseOp::silu, a[i], 0);
    expect_close(dy.download(), ref, dtype, "silu misaligned");

    // The weights one element off too.
    RmsNorm norm({rows, cols, dtype});
    DeviceMatrix dw(dtype, 1, cols, 0, 2);
    const auto w = test::round_to(dtype, test::random_values(cols, 62, 0.5, 1.5));
    dw.upload(w);
    dy.poison();
    norm.run(shared_runtime(), {da.data(), dw.data()}, {dy.data()});
    expect_close(dy.download(), test::rmsnorm_reference(a, {}, w, rows, cols, 1e-6), dtype, "rmsnorm misaligned");
}
