// Every op rejects bad problems and bad arguments before any launch, with a message naming the op,
// the argument and what was expected. check() runs run()'s argument checks without a GPU.
#include <cmath>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "core/problem_spec.hpp"
#include "tileops/tileops.hpp"
#include "tileops/tuning_db.hpp"
#include "util/host_dtype.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
// Fake device addresses: check() never dereferences them.
void* const kX = reinterpret_cast<void*>(0x10000);
void* const kW = reinterpret_cast<void*>(0x20000);
void* const kY = reinterpret_cast<void*>(0x30000);
void* const kB = reinterpret_cast<void*>(0x40000);
}  // namespace

TEST_CASE("problems with bad extents, strides or eps are refused", "[validation]") {
    CHECK_THROWS_WITH(RmsNorm({0, 16, DType::bf16}), ContainsSubstring("RmsNorm") && ContainsSubstring("rows must be >= 1"));
    CHECK_THROWS_WITH(LayerNorm({4, -3, DType::bf16}), ContainsSubstring("LayerNorm") && ContainsSubstring("cols must be >= 1"));
    CHECK_THROWS_WITH(Softmax({4, 16, DType::fp32, {}, false, 8}), ContainsSubstring("x_stride = 8 is smaller than a row"));
    CHECK_THROWS_WITH(RmsNorm({4, 16, DType::bf16, {}, -1.0f}), ContainsSubstring("eps must be >= 0"));
    CHECK_THROWS_WITH(RmsNorm({4, 16, DType::bf16, {}, std::nanf("")}), ContainsSubstring("eps"));
    CHECK_THROWS_WITH(RmsNorm({int64_t{1} << 40, int64_t{1} << 40, DType::bf16}), ContainsSubstring("overflows"));
    ElementwiseProblem unary_broadcast{ElementwiseOp::silu, 4, 16, DType::bf16};
    unary_broadcast.broadcast_b = true;
    CHECK_THROWS_WITH(Elementwise(unary_broadcast), ContainsSubstring("broadcast_b needs a binary op"));
    CHECK_THROWS_WITH(Elementwise({static_cast<ElementwiseOp>(42), 4, 16, DType::bf16}), ContainsSubstring("unknown op"));
    CHECK_THROWS_AS(RmsNorm({0, 16, DType::bf16}), InvalidArgument);
    CHECK_THROWS_WITH(RmsNorm({4, 16, DType::bf16, {}, INFINITY}), ContainsSubstring("eps must be >= 0 and finite"));
    CHECK_THROWS_WITH(LayerNorm({4, 16, DType::bf16, {}, INFINITY}), ContainsSubstring("eps must be >= 0 and finite"));
}

TEST_CASE("strides whose rows overflow 64-bit offsets are refused before anything multiplies them", "[validation]") {
    RmsNormProblem norm{int64_t{1} << 33, 8, DType::bf16};
    norm.x_stride = int64_t{1} << 40;  // 2^73 elements
    CHECK_THROWS_WITH(RmsNorm(norm), ContainsSubstring("x_stride spans more than 2^58 elements"));
    norm.x_stride = 0, norm.y_stride = int64_t{1} << 62;
    CHECK_THROWS_WITH(RmsNorm(norm), ContainsSubstring("y_stride") && ContainsSubstring("overflows"));
    ElementwiseProblem add{ElementwiseOp::add, 2, 8, DType::bf16};
    add.b_stride = int64_t{1} << 60;
    CHECK_THROWS_WITH(Elementwise(add), ContainsSubstring("b_stride spans"));
    // rows x cols that no grid could cover (contiguous rows run as one flattened row).
    CHECK_THROWS_WITH(Elementwise({ElementwiseOp::silu, int64_t{1} << 62, 1, DType::bf16}),
                      ContainsSubstring("larger than supported (2^40 elements)"));
    CHECK_THROWS_WITH(Embedding({1, 10, int64_t{1} << 40, DType::bf16}), ContainsSubstring("hidden must be in"));
}

TEST_CASE("elementwise configs count their blocks at the narrowest launch width", "[validation]") {
    // A misaligned pointer narrows the vector to one element; the grid must still fit 2^31 blocks.
    const Elementwise silu({ElementwiseOp::silu, 1, int64_t{1} << 40, DType::bf16});
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    CHECK(silu.model().invalid_reason({{"threads", 128}, {"vec", 8}, {"unroll", 1}}, hopper).has_value());
    CHECK_FALSE(silu.model().invalid_reason({{"threads", 1024}, {"vec", 8}, {"unroll", 8}}, hopper).has_value());
}

TEST_CASE("an op that was moved from throws instead of crashing", "[validation]") {
    RmsNorm a({4, 8, DType::bf16});
    RmsNorm b(std::move(a));
    CHECK(b.describe().find("rmsnorm") != std::string::npos);
    CHECK_THROWS_WITH(a.describe(), ContainsSubstring("moved from"));  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS_WITH(a.check({kX, kW}, {kY}), ContainsSubstring("moved from"));
    CHECK_THROWS_AS(a.model(), InvalidArgument);
}

TEST_CASE("shapes as text are decimal digits between single x's", "[validation]") {
    using detail::parse_shape;
    CHECK(parse_shape("8192x4096") == std::vector<long long>{8192, 4096});
    CHECK(parse_shape("1") == std::vector<long long>{1});
    for (const char* bad : {"", "x", "8xx4096", "x8x4096", "8x4096x", "8x+4096", "8x 4096", " 8x4096", "8x-1", "8x0",
                            "8x4096abc", "0x10", "99999999999999999999x1"})
        CHECK_THROWS_WITH(parse_shape(bad), ContainsSubstring("is not like 8192x4096"));
}

TEST_CASE("argument counts, null and misaligned pointers are refused by name", "[validation]") {
    RmsNorm norm({8, 64, DType::bf16});
    CHECK_NOTHROW(norm.check({kX, kW}, {kY}));
    CHECK_THROWS_WITH(norm.check({kX}, {kY}), ContainsSubstring("expected 2 inputs (x, weight), got 1"));
    CHECK_THROWS_WITH(norm.check({kX, kW}, {kY, kB}), ContainsSubstring("expected 1 outputs (y), got 2"));
    CHECK_THROWS_WITH(norm.check({nullptr, kW}, {kY}), ContainsSubstring("argument 'x' is a null pointer"));
    CHECK_THROWS_WITH(norm.check({kX, nullptr}, {kY}), ContainsSubstring("argument 'weight' is a null pointer"));
    void* odd = reinterpret_cast<char*>(kY) + 1;
    CHECK_THROWS_WITH(norm.check({kX, kW}, {odd}), ContainsSubstring("argument 'y'") && ContainsSubstring("not aligned"));

    RmsNorm fused({8, 64, DType::bf16, {}, 1e-6f, true});
    CHECK_NOTHROW(fused.check({kX, kB, kW}, {kY, kB}));
    CHECK_THROWS_WITH(fused.check({kX, kW}, {kY}), ContainsSubstring("x, residual, weight"));
    CHECK_THROWS_WITH(fused.check({kX, nullptr, kW}, {kY, kB}), ContainsSubstring("'residual' is a null pointer"));

    Elementwise add({ElementwiseOp::add, 8, 64, DType::fp32});
    CHECK_THROWS_WITH(add.check({kX}, {kY}), ContainsSubstring("expected 2 inputs (a, b)"));
    CHECK_THROWS_WITH(add.check({kX, nullptr}, {kY}), ContainsSubstring("'b' is a null pointer"));
    LayerNorm ln({8, 64, DType::fp16});
    CHECK_THROWS_WITH(ln.check({kX, kW, nullptr}, {kY}), ContainsSubstring("'bias' is a null pointer"));
    Softmax sm({8, 64, DType::fp16});
    CHECK_THROWS_WITH(sm.check({kX}, {nullptr}), ContainsSubstring("'y' is a null pointer"));
}

TEST_CASE("tensor views must agree with the problem", "[validation]") {
    RmsNorm norm({8, 64, DType::bf16});
    TensorView x = TensorView::contiguous(kX, DType::bf16, {8, 64});
    TensorView w = TensorView::contiguous(kW, DType::bf16, {64});
    TensorView y = TensorView::contiguous(kY, DType::bf16, {8, 64});
    CHECK_NOTHROW(norm.check({x, w}, {y}));
    CHECK_THROWS_WITH(norm.check({TensorView::contiguous(kX, DType::fp16, {8, 64}), w}, {y}),
                      ContainsSubstring("'x' has dtype fp16, expected bf16"));
    CHECK_THROWS_WITH(norm.check({TensorView::contiguous(kX, DType::bf16, {8, 32}), w}, {y}),
                      ContainsSubstring("'x' must have shape [8, 64]"));
    CHECK_THROWS_WITH(norm.check({x, TensorView::contiguous(kW, DType::bf16, {32})}, {y}),
                      ContainsSubstring("'weight' must be a contiguous vector of 64 elements"));
    CHECK_THROWS_WITH(norm.check({x, w}, {TensorView::rows(kY, DType::bf16, 8, 64, 128)}),
                      ContainsSubstring("'y' must have strides [64, 1]"));
    // A view whose row stride matches the problem's is accepted.
    Softmax padded({8, 64, DType::bf16, {}, false, 128, 128});
    CHECK_NOTHROW(padded.check({TensorView::rows(kX, DType::bf16, 8, 64, 128)}, {TensorView::rows(kY, DType::bf16, 8, 64, 128)}));
}

TEST_CASE("dtype names parse and print", "[validation]") {
    CHECK(parse_dtype("bf16") == DType::bf16);
    CHECK(parse_dtype("float16") == DType::fp16);
    CHECK(std::string(dtype_name(DType::fp32)) == "fp32");
    CHECK(parse_dtype("float8_e4m3fn") == DType::fp8_e4m3);
    CHECK(std::string(dtype_name(DType::fp8_e4m3)) == "fp8_e4m3");
    CHECK(dtype_size(DType::fp8_e4m3) == 1);
    CHECK_THROWS_WITH(parse_dtype("int8"), ContainsSubstring("unknown dtype 'int8'"));
    // fp8 is a cache format: the ops that compute in a dtype refuse it.
    CHECK_THROWS_WITH(RmsNorm({4, 16, DType::fp8_e4m3}), ContainsSubstring("dtype must be fp32, fp16 or bf16, got fp8_e4m3"));
}

TEST_CASE("fp8 e4m3 host encoding: every code round-trips, values round to nearest even and saturate", "[validation]") {
    // The known points of the format: subnormals of 2^-9, the smallest normal 2^-6, 1, the largest 448, NaN.
    CHECK(util::fp8_e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
    CHECK(util::fp8_e4m3_to_float(0x08) == std::ldexp(1.0f, -6));
    CHECK(util::fp8_e4m3_to_float(0x38) == 1.0f);
    CHECK(util::fp8_e4m3_to_float(0x7e) == 448.0f);
    CHECK(util::fp8_e4m3_to_float(0xfe) == -448.0f);
    CHECK(std::isnan(util::fp8_e4m3_to_float(0x7f)));
    for (int code = 0; code < 256; ++code) {
        if ((code & 0x7f) == 0x7f) continue;  // NaN
        const float value = util::fp8_e4m3_to_float(static_cast<uint8_t>(code));
        INFO("code " << code << " value " << value);
        CHECK(util::float_to_fp8_e4m3(value) == code);  // -0 (0x80) keeps its sign
    }
    CHECK(util::float_to_fp8_e4m3(1.0625f) == 0x38);  // halfway between 1 and 1.125: to the even code (1)
    CHECK(util::float_to_fp8_e4m3(1.1875f) == 0x3a);  // halfway between 1.125 and 1.25: to the even code (1.25)
    CHECK(util::float_to_fp8_e4m3(1.07f) == 0x39);    // nearer 1.125
    CHECK(util::float_to_fp8_e4m3(1000.0f) == 0x7e);  // saturates at 448
    CHECK(util::float_to_fp8_e4m3(-1e30f) == 0xfe);
    CHECK(util::float_to_fp8_e4m3(std::nanf("")) == 0x7f);
}

TEST_CASE("row and elementwise outputs over their inputs: exactly in place, or refused by name", "[validation]") {
    // 8 rows of 64 bf16 (1 KB); the fake operands are 64 KB apart.
    auto at = [](void* base, size_t bytes) { return static_cast<void*>(static_cast<char*>(base) + bytes); };

    // Softmax in place with the same dtype: each element is read, then written, by one thread.
    Softmax same(SoftmaxProblem{.rows = 8, .cols = 64, .dtype = DType::bf16});
    CHECK_NOTHROW(same.check({kX}, {kX}));
    CHECK_THROWS_WITH(same.check({kX}, {at(kX, 128)}), ContainsSubstring("output 'y' overlaps 'x'"));
    // x and y as the two column halves of one [8, 128] buffer: interleaved but disjoint.
    Softmax halves(SoftmaxProblem{.rows = 8, .cols = 64, .dtype = DType::bf16, .x_stride = 128, .y_stride = 128});
    CHECK_NOTHROW(halves.check({kX}, {at(kX, 128)}));
    // bf16 in, fp32 out in place: output row r covers input rows 2r and 2r + 1 of other blocks.
    SoftmaxProblem widening{.rows = 8, .cols = 64, .dtype = DType::bf16};
    widening.out_dtype = DType::fp32;
    CHECK_THROWS_WITH(Softmax(widening).check({kX}, {kX}), ContainsSubstring("same pointer, row stride and dtype size"));

    // RmsNorm: the sum may replace x or the residual only where it has their row stride.
    RmsNormProblem fused_problem{.rows = 8, .cols = 64, .dtype = DType::bf16, .residual = true};
    RmsNorm fused(fused_problem);
    CHECK_NOTHROW(fused.check({kX, kB, kW}, {kY, kX}));
    CHECK_NOTHROW(fused.check({kX, kB, kW}, {kY, kB}));
    fused_problem.x_stride = 128;  // x is half of a wider buffer; the sum is written 64 apart
    CHECK_THROWS_WITH(RmsNorm(fused_problem).check({kX, kB, kW}, {kY, kX}), ContainsSubstring("output 'sum' overlaps 'x'"));
    CHECK_THROWS_WITH(fused.check({kX, kB, kW}, {kW, kY}), ContainsSubstring("output 'y' overlaps 'weight'"));
    CHECK_THROWS_WITH(fused.check({kX, kB, kW}, {kY, kY}), ContainsSubstring("output 'y' overlaps 'sum'"));
    // Without a residual its stride is not used: a leftover value refuses nothing.
    RmsNormProblem plain{.rows = 8, .cols = 64, .dtype = DType::bf16};
    plain.residual_stride = 1;
    CHECK_NOTHROW(RmsNorm(plain).check({kX, kW}, {kY}));

    LayerNorm ln(LayerNormProblem{.rows = 8, .cols = 64, .dtype = DType::bf16});
    CHECK_NOTHROW(ln.check({kX, kW, kB}, {kX}));
    CHECK_THROWS_WITH(ln.check({kX, kW, kB}, {at(kB, 64)}), ContainsSubstring("output 'y' overlaps 'bias'"));

    // A broadcast b is read by every row.
    ElementwiseProblem add_row{.op = ElementwiseOp::add, .rows = 8, .cols = 64, .dtype = DType::bf16};
    add_row.broadcast_b = true;
    Elementwise add(add_row);
    CHECK_NOTHROW(add.check({kX, kB}, {kX}));
    CHECK_THROWS_WITH(add.check({kX, kB}, {kB}), ContainsSubstring("output 'y' overlaps 'b'"));
}

TEST_CASE("row configs whose sub-warp rows do not fill whole warps are invalid, not compile errors", "[validation]") {
    Softmax op(SoftmaxProblem{.rows = 1024, .cols = 128, .dtype = DType::bf16});
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    Config config = op.model().heuristic(h100);
    config["threads_per_row"] = 16, config["rows_per_block"] = 1, config["vec"] = 8, config["items"] = 1;
    config["cluster"] = 1, config["prefetch"] = 0;
    CHECK_THAT(op.model().invalid_reason(config, h100).value_or(""), ContainsSubstring("whole warps"));
    config["rows_per_block"] = 2;
    CHECK_FALSE(op.model().invalid_reason(config, h100).has_value());
}
