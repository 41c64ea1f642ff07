// Which kernel run() takes for rows that are off a vector (CPU only): the ragged kernels at full
// width where every row operand starts as far past a vector as x does, one element an access
// where they do not, the aligned kernels where nothing is off; and that `warm` lists each.
#include <set>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "core/op_model.hpp"
#include "runtime/op_state.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using detail::is_ragged_width;
using detail::ragged_width;

namespace {

// An address `elements` past a 256-byte boundary in region `region` (256 MB apart, so that no
// two operands overlap); never dereferenced.
void* at(size_t elements, size_t element_bytes, int region = 0) {
    return reinterpret_cast<void*>((uintptr_t{1} << 28) * (region + 1) + elements * element_bytes);
}

}  // namespace

TEST_CASE("launch widths name ragged kernels apart from vector widths", "[ragged]") {
    CHECK(ragged_width(8) == -8);
    CHECK(is_ragged_width(ragged_width(2)));
    CHECK_FALSE(is_ragged_width(8));
    CHECK(detail::width_vector(ragged_width(4)) == 4);
    std::set<int> slots;
    for (int width : {1, 2, 4, 8, 16, ragged_width(1), ragged_width(2), ragged_width(4), ragged_width(8), ragged_width(16)}) {
        const int slot = detail::vector_slot(width);
        CHECK(slot >= 0);
        CHECK(slot < detail::kVectorSlots);
        slots.insert(slot);
    }
    CHECK(slots.size() == 10);  // every width its own launch slot
}

TEST_CASE("rows off a vector take the ragged kernels where their operands share a frame", "[ragged]") {
    const detail::RowOperand x{at(0, 2), 4096, 2}, y{at(0, 2), 4096, 2};
    CHECK(detail::ragged_launch_width(8, 2, {x, y}) == 8);  // nothing off a vector
    CHECK(detail::ragged_launch_width(8, 4, {x, y}) == 8);  // wider than fp32's widest: kept, the config caps it
    const detail::RowOperand odd_x{at(3, 2), 50257, 2}, odd_y{at(3, 2), 50257, 2};
    CHECK(detail::ragged_launch_width(1, 2, {odd_x, odd_y}) == ragged_width(8));
    // y one element further on: its rows would need their own frame.
    const detail::RowOperand shifted_y{at(4, 2), 50257, 2};
    CHECK(detail::ragged_launch_width(1, 2, {odd_x, shifted_y}) == 1);
    // Strides that agree modulo the vector keep the frame row after row; others do not.
    CHECK(detail::rows_share_frame(8, {{at(1, 2), 9, 2}, {at(1, 2), 17, 2}}));
    CHECK_FALSE(detail::rows_share_frame(8, {{at(1, 2), 9, 2}, {at(1, 2), 10, 2}}));
    // bf16 in, fp32 out: frames in elements, vectors of 4.
    CHECK(detail::ragged_launch_width(1, 4, {{at(1, 2), 7, 2}, {at(1, 4), 7, 4}}) == ragged_width(4));
}

TEST_CASE("row ops and elementwise ops list and launch their ragged kernels", "[ragged]") {
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    SECTION("an odd row length: the ragged kernel at full width, and the one-element fallback") {
        Softmax op({4, 50257, DType::bf16});
        const Config config = op.model().heuristic(hopper);
        const auto widths = op.model().vector_widths(config);
        REQUIRE(widths.size() == 2);
        CHECK(widths[0] == ragged_width(8));
        CHECK(widths[1] == 1);
        CHECK(op.vector_width({at(0, 2)}, {at(0, 2, 1)}) == ragged_width(8));
        CHECK(op.vector_width({at(1, 2)}, {at(2, 2, 1)}) == 1);
        const std::string name = op.model().plan(config, ragged_width(8), hopper).name_expression;
        INFO(name);
        CHECK(name.find("_ragged_kernel<__nv_bfloat16, __nv_bfloat16, ") != std::string::npos);
    }
    SECTION("an aligned shape: the aligned kernel, the ragged one for misaligned pointers, and the fallback") {
        RmsNorm op({16, 4096, DType::bf16, {}, 1e-5f, true});
        const Config config = op.model().heuristic(hopper);
        const auto widths = op.model().vector_widths(config);
        REQUIRE(widths.size() == 3);
        CHECK(widths[0] == 8);
        CHECK(widths[1] == ragged_width(8));
        // x, residual, weight; y, sum.
        CHECK(op.vector_width({at(0, 2), at(0, 2, 1), at(5, 2, 2)}, {at(0, 2, 3), at(0, 2, 4)}) == ragged_width(8));
        CHECK(op.vector_width({at(1, 2), at(1, 2, 1), at(0, 2, 2)}, {at(1, 2, 3), at(1, 2, 4)}) == ragged_width(8));
        CHECK(op.vector_width({at(1, 2), at(2, 2, 1), at(0, 2, 2)}, {at(1, 2, 3), at(1, 2, 4)}) == 1);
        CHECK(op.vector_width({at(0, 2), at(0, 2, 1), at(0, 2, 2)}, {at(0, 2, 3), at(0, 2, 4)}) == 8);
        CHECK(op.model().plan(config, ragged_width(8), hopper).name_expression.find("rmsnorm_ragged_kernel<") !=
              std::string::npos);
        CHECK(op.model().plan(config, 8, hopper).name_expression.find("rmsnorm_kernel<") != std::string::npos);
    }
    SECTION("row strides that disagree modulo the vector: no ragged kernel") {
        LayerNorm op({16, 4096, DType::bf16, {}, 1e-5f, 4097, 4098});
        const auto widths = op.model().vector_widths(op.model().heuristic(hopper));
        CHECK(widths == std::vector<int>{1});
    }
    SECTION("elementwise: one long odd row, and a broadcast row read element by element") {
        Elementwise flat({ElementwiseOp::silu_mul, 3, 50257, DType::bf16});
        CHECK(flat.vector_width({at(0, 2), at(0, 2, 1)}, {at(0, 2, 2)}) == ragged_width(8));
        const Config config = flat.model().heuristic(hopper);
        CHECK(flat.model().plan(config, ragged_width(8), hopper).name_expression.find("elementwise_ragged_kernel<") !=
              std::string::npos);
        Elementwise broadcast({ElementwiseOp::add, 3, 4096, DType::bf16, {}, true});
        CHECK(broadcast.vector_width({at(0, 2), at(3, 2, 1)}, {at(0, 2, 2)}) == ragged_width(8));
        CHECK(broadcast.vector_width({at(0, 2), at(0, 2, 1)}, {at(0, 2, 2)}) == 8);
    }
}
