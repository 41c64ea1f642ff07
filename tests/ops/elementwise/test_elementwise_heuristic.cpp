// The elementwise heuristic (CPU only): how much work a block takes for the problem's size.
#include <catch2/catch_test_macros.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "tileops/device_info.hpp"

TEST_CASE("small elementwise problems spread over the SMs", "[elementwise]") {
    const tileops::DeviceInfo hopper = tileops::DeviceInfo::for_arch("sm_90a");
    auto config = [&](const char* op, long long rows, long long cols) {
        return tileops::detail::make_op({op, {rows, cols}, "bf16", ""})->model().heuristic(hopper);
    };
    auto blocks = [](const tileops::Config& c, long long elements) {
        return (elements + c.at("threads") * c.at("vec") * c.at("unroll") - 1) / (c.at("threads") * c.at("vec") * c.at("unroll"));
    };
    // 24576 elements: 3 blocks of 256 x 8 x 4 before; now the fewest elements a block.
    const tileops::Config small = config("silu_mul", 3, 8192);
    CHECK(small.at("unroll") == 1);
    CHECK(small.at("threads") == 128);
    CHECK(blocks(small, 3 * 8192) == 24);
    // A large one keeps four vectors a thread in flight.
    const tileops::Config large = config("add", 8192, 4096);
    CHECK(large.at("unroll") == 4);
    CHECK(large.at("threads") == 256);
}
