// Rows of any length at any alignment (the ragged kernels, kernel_templates/common/row_frame.cuh):
// each row op and elementwise op on odd row lengths, odd row strides and pointers moved off a
// vector by a few elements, against a double-precision reference, outputs poisoned. Covers the
// register, streaming and resident kernels (row lengths up to 100003 fp32), the residual add,
// weights whose offset differs from the rows', a bf16 -> fp32 output, and operands whose rows
// start at different offsets (one element an access).
#include <string>
#include <vector>

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
using tileops::test::shared_runtime;

namespace {

// Where the operands lie: rows of `cols` with `pad` elements between them; x and y (and the
// residual and sum) start `offset` elements past an aligned address, y at `y_offset` when it
// differs; the weights and biases at `weight_offset`.
struct Placement {
    int64_t pad;
    size_t offset, y_offset, weight_offset;
};

struct RaggedCase {
    int64_t rows, cols;
    DType dtype, out_dtype;
    Placement at;
};

std::string describe(const char* op, const RaggedCase& c) {
    return fmt::format("{} {}x{} {}->{} pad {} offsets x {} y {} weight {}", op, c.rows, c.cols, dtype_name(c.dtype),
                       dtype_name(c.out_dtype), c.at.pad, c.at.offset, c.at.y_offset, c.at.weight_offset);
}

// Odd lengths from one element to a resident fp32 row; offsets that give heads of 1-7 elements;
// odd and even pads, so that successive rows start at different offsets. (fp16 takes bf16's paths.)
std::vector<RaggedCase> ragged_cases() {
    std::vector<RaggedCase> cases;
    const Placement placements[] = {{0, 1, 1, 0}, {3, 3, 3, 5}, {1, 0, 0, 1}, {0, 2, 5, 0}};
    const std::pair<int64_t, int64_t> shapes[] = {{1, 3}, {5, 9}, {33, 3001}, {9, 50257}, {2, 100003}};
    for (const auto& [rows, cols] : shapes)
        for (const Placement& at : placements)
            for (const auto& [in, out] : {std::pair{DType::bf16, DType::bf16}, std::pair{DType::fp32, DType::fp32},
                                          std::pair{DType::bf16, DType::fp32}})
                cases.push_back({rows, cols, in, out, at});
    return cases;
}

// The launch width run() takes for these operands is the ragged kernels' where the rows share a
// frame (x's offset and stride are y's) and the shape or the pointers are off a vector.
void check_width(const Op& op, std::initializer_list<TensorArg> inputs, std::initializer_list<OutputArg> outputs,
                 const RaggedCase& c) {
    const int width = op.vector_width(inputs, outputs);
    const bool shares_frame = c.at.offset == c.at.y_offset;
    INFO("launch width " << width);
    CHECK(detail::is_ragged_width(width) == shares_frame);
    if (!shares_frame) CHECK(width == 1);
}

size_t bytes(DType dtype, size_t elements) { return elements * dtype_size(dtype); }

}  // namespace

TEST_CASE("Row ops on rows of any length and alignment", "[gpu][rmsnorm][layernorm][softmax]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    for (const RaggedCase& c : ragged_cases()) {
        const int64_t stride = c.cols + c.at.pad;
        const DType in = c.dtype, out = c.out_dtype;
        const auto x = test::round_to(in, test::random_values(c.rows * c.cols, 81 + c.cols, -4.0, 4.0));
        const auto r = test::round_to(in, test::random_values(c.rows * c.cols, 82 + c.cols));
        const auto w = test::round_to(in, test::random_values(c.cols, 83, 0.5, 1.5));
        const auto b = test::round_to(in, test::random_values(c.cols, 84, -1.0, 1.0));
        DeviceMatrix dx(in, c.rows, c.cols, stride, bytes(in, c.at.offset));
        DeviceMatrix dr(in, c.rows, c.cols, stride, bytes(in, c.at.offset));
        DeviceMatrix dsum(in, c.rows, c.cols, stride, bytes(in, c.at.offset));
        DeviceMatrix dy(out, c.rows, c.cols, stride, bytes(out, c.at.y_offset));
        DeviceMatrix dw(in, 1, c.cols, 0, bytes(in, c.at.weight_offset));
        DeviceMatrix db(in, 1, c.cols, 0, bytes(in, c.at.weight_offset));
        dx.upload(x);
        dr.upload(r);
        dw.upload(w);
        db.upload(b);

        for (const bool residual : {false, true}) {
            if (residual && out != in) continue;  // the sum is stored in the input type: same frame as x
            const std::string what = describe(residual ? "rmsnorm+residual" : "rmsnorm", c);
            INFO(what);
            RmsNorm op({c.rows, c.cols, in, out, 1e-5f, residual, stride, stride, stride});
            dy.poison();
            dsum.poison();
            std::vector<double> sum_ref;
            const auto ref = test::rmsnorm_reference(x, residual ? r : std::vector<double>{}, w, c.rows, c.cols, 1e-5, &sum_ref);
            if (residual) {
                check_width(op, {dx.data(), dr.data(), dw.data()}, {dy.data(), dsum.data()}, c);
                op.run(shared_runtime(), {dx.data(), dr.data(), dw.data()}, {dy.data(), dsum.data()});
                expect_close(dsum.download(), test::round_to(in, sum_ref), in, what + " sum");
                CHECK(dsum.gaps_untouched());
            } else {
                check_width(op, {dx.data(), dw.data()}, {dy.data()}, c);
                op.run(shared_runtime(), {dx.data(), dw.data()}, {dy.data()});
            }
            expect_close(dy.download(), ref, out, what);
            CHECK(dy.gaps_untouched());
        }
        {
            const std::string what = describe("layernorm", c);
            INFO(what);
            LayerNorm op({c.rows, c.cols, in, out, 1e-5f, stride, stride});
            dy.poison();
            check_width(op, {dx.data(), dw.data(), db.data()}, {dy.data()}, c);
            op.run(shared_runtime(), {dx.data(), dw.data(), db.data()}, {dy.data()});
            expect_close(dy.download(), test::layernorm_reference(x, w, b, c.rows, c.cols, 1e-5), out, what);
            CHECK(dy.gaps_untouched());
        }
        for (const bool log : {false, true}) {
            const std::string what = describe(log ? "log_softmax" : "softmax", c);
            INFO(what);
            Softmax op({c.rows, c.cols, in, out, log, stride, stride});
            dy.poison();
            check_width(op, {dx.data()}, {dy.data()}, c);
            op.run(shared_runtime(), {dx.data()}, {dy.data()});
            expect_close(dy.download(), test::softmax_reference(x, c.rows, c.cols, log), out, what);
            CHECK(dy.gaps_untouched());
        }
    }
}

TEST_CASE("Elementwise ops on rows of any length and alignment", "[gpu][elementwise]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const ElementwiseOp kind = GENERATE(ElementwiseOp::gelu, ElementwiseOp::silu_mul, ElementwiseOp::add);
    for (const RaggedCase& c : ragged_cases()) {
        const int64_t stride = c.cols + c.at.pad;
        const DType in = c.dtype, out = c.out_dtype;
        const auto a = test::round_to(in, test::random_values(c.rows * c.cols, 91 + c.cols, -4.0, 4.0));
        const auto b = test::round_to(in, test::random_values(c.rows * c.cols, 92 + c.cols, -4.0, 4.0));
        DeviceMatrix da(in, c.rows, c.cols, stride, bytes(in, c.at.offset));
        DeviceMatrix db(in, c.rows, c.cols, stride, bytes(in, c.at.offset));
        DeviceMatrix dbroadcast(in, 1, c.cols, 0, bytes(in, c.at.weight_offset));
        DeviceMatrix dy(out, c.rows, c.cols, stride, bytes(out, c.at.y_offset));
        da.upload(a);
        db.upload(b);
        dbroadcast.upload(std::vector<double>(b.begin(), b.begin() + c.cols));
        for (const bool broadcast : {false, true}) {
            if (broadcast && !is_binary(kind)) continue;
            const std::string what = describe(elementwise_op_name(kind), c) + (broadcast ? " broadcast" : "");
            INFO(what);
            Elementwise op({kind, c.rows, c.cols, in, out, broadcast, stride, broadcast ? 0 : stride, stride});
            const void* b_data = broadcast ? dbroadcast.data() : db.data();
            dy.poison();
            if (is_binary(kind)) {
                check_width(op, {da.data(), b_data}, {dy.data()}, c);
                op.run(shared_runtime(), {da.data(), b_data}, {dy.data()});
            } else {
                check_width(op, {da.data()}, {dy.data()}, c);
                op.run(shared_runtime(), {da.data()}, {dy.data()});
            }
            std::vector<double> ref(a.size());
            for (int64_t i = 0; i < c.rows; ++i)
                for (int64_t j = 0; j < c.cols; ++j) {
                    const double av = a[i * c.cols + j], bv = b[(broadcast ? 0 : i) * c.cols + j];
                    ref[i * c.cols + j] = kind == ElementwiseOp::gelu       ? 0.5 * av * std::erfc(-av / std::sqrt(2.0))
                                          : kind == ElementwiseOp::silu_mul ? av / (1.0 + std::exp(-av)) * bv
                                                                            : av + bv;
                }
            expect_close(dy.download(), ref, out, what);
            CHECK(dy.gaps_untouched());
        }
    }
}
