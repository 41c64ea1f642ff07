// The row ops' heuristic: what an untuned problem gets (CPU only; speed is measured in bench/).
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "ops/row_config.hpp"
#include "tileops/device_info.hpp"

using tileops::DeviceInfo;
using tileops::detail::row_heuristic;
using tileops::detail::row_invalid_reason;
using tileops::detail::RowConfig;
using tileops::detail::RowInputs;

TEST_CASE("the row heuristic splits long rows over a prefetching cluster on sm_90", "[row_config]") {
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");

    SECTION("one input: 1024-thread CTAs holding 64 bytes a thread") {
        const RowConfig bf16_64k = row_heuristic(65536, 2, RowInputs{2, 1}, hopper);
        CHECK(bf16_64k.cluster == 2);
        CHECK(bf16_64k.threads_per_row == 1024);
        CHECK(bf16_64k.items * bf16_64k.vec * 2 == 64);
        CHECK(bf16_64k.prefetch == 1);
        const RowConfig fp32_256k = row_heuristic(262144, 4, RowInputs{4, 1}, hopper);
        CHECK(fp32_256k.cluster == 16);
        CHECK(fp32_256k.threads_per_row == 1024);
        CHECK(fp32_256k.prefetch == 1);
    }
    SECTION("two inputs (the residual add): smaller CTAs, so both inputs' stages fit in shared memory") {
        const RowConfig residual = row_heuristic(65536, 2, RowInputs{2, 2}, hopper);
        CHECK(residual.threads_per_row == 512);
        CHECK(residual.cluster == 4);
        CHECK(residual.prefetch == 1);
        CHECK_FALSE(row_invalid_reason(residual, 65536, 2, RowInputs{2, 2}, hopper).has_value());
    }
    SECTION("rows longer than 16 CTAs hold stream") {
        const RowConfig huge = row_heuristic(int64_t{1} << 22, 4, RowInputs{4, 1}, hopper);
        CHECK(huge.items == 0);
        CHECK(huge.cluster == 1);
        CHECK(huge.prefetch == 0);
    }
}

TEST_CASE("every row heuristic config is valid for its problem", "[row_config]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    for (const int64_t cols : {1, 7, 1000, 4097, 16384, 65536, 100000, 262144, 1 << 20}) {
        for (const size_t bytes : {size_t{2}, size_t{4}}) {
            for (const int count : {1, 2}) {
                const RowInputs inputs{bytes, count};
                const RowConfig c = row_heuristic(cols, bytes, inputs, device);
                INFO(arch << " cols " << cols << " element bytes " << bytes << " inputs " << count);
                CHECK_FALSE(row_invalid_reason(c, cols, bytes, inputs, device).has_value());
                if (device.sm() < 90) CHECK(c.cluster == 1);
            }
        }
    }
}
