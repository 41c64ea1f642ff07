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
    // Binary ops of any size: one 16-byte vector a thread and input (four took 4-13% longer at 1-8M
    // elements); the activations two 8-byte ones.
    for (const char* op : {"add", "silu_mul"})
        for (long long rows : {255, 8192}) {
            const tileops::Config binary = config(op, rows, 4096);
            CHECK(binary.at("unroll") == 1);
            CHECK(binary.at("vec") == 8);
            CHECK(binary.at("threads") == 256);
        }
    const tileops::Config activation = config("gelu", 8192, 4096);
    CHECK(activation.at("unroll") == 2);
    CHECK(activation.at("vec") == 4);
}
