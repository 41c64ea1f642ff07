// The row ops' heuristic: what an untuned problem gets (CPU only; speed is measured in bench/).
#include <tuple>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "ops/rows/row_config.hpp"
#include "tileops/device_info.hpp"
#include "tileops/tileops.hpp"

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
    SECTION("one input row of 128-512 KB: the resident kernel, in the smallest cluster that holds it") {
        const RowConfig fp32_64k = row_heuristic(65536, 4, RowInputs{4, 1}, hopper);
        CHECK(fp32_64k.slots == 14);
        CHECK(fp32_64k.items == 2);
        CHECK(fp32_64k.cluster == 1);
        CHECK(fp32_64k.threads_per_row == 1024);
        const RowConfig bf16_256k = row_heuristic(262144, 2, RowInputs{2, 1}, hopper);
        CHECK(bf16_256k.slots == 14);
        CHECK(bf16_256k.cluster == 2);
        CHECK(row_heuristic(65536, 2, RowInputs{2, 1}, hopper).slots == 0);        // 128 KB
        CHECK(row_heuristic(262144, 4, RowInputs{4, 1}, hopper).slots == 0);       // 1 MB
        CHECK(row_heuristic(262144, 2, RowInputs{2, 2}, hopper).slots == 0);       // the residual add
        CHECK(row_heuristic(65536, 4, RowInputs{4, 1}, DeviceInfo::for_arch("sm_80")).slots == 0);  // 163 KB
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

namespace {

// A resident config for a 512 KB bf16 row: two CTAs of 1024 threads, 2 vectors a thread in
// registers and 14 in shared memory.
RowConfig bf16_512k_pair() {
    RowConfig c;
    c.threads_per_row = 1024;
    c.vec = 8;
    c.items = 2;
    c.slots = 14;
    c.cluster = 2;
    return c;
}

}  // namespace

TEST_CASE("long rows get resident configs that hold the row in registers and shared memory", "[row_config]") {
    using tileops::detail::row_launch;
    using tileops::detail::row_search_space;
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    const RowInputs bf16{2, 1};

    SECTION("a 512 KB bf16 row: clusters of two CTAs holding 256 KB each, within shared memory") {
        bool found_pair = false;
        for (const auto& config : row_search_space(256, 262144, 2, bf16, hopper)) {
            if (!config.count("slots")) continue;
            const RowConfig c = RowConfig::from(config, "rmsnorm");
            INFO("threads " << c.threads_per_row << " items " << c.items << " slots " << c.slots << " cluster "
                            << c.cluster);
            CHECK_FALSE(row_invalid_reason(c, 262144, 2, bf16, hopper).has_value());
            CHECK(int64_t{c.cluster} * c.threads_per_row * c.vec * (c.items + c.slots) >= 262144);
            CHECK(c.items * c.vec * 2 <= tileops::detail::resident_held_bytes_limit(c.threads_per_row));
            const auto launch = row_launch(c, c.vec, 256, 262144, bf16);
            CHECK(launch.slots == c.slots);
            CHECK(launch.shared_bytes == static_cast<unsigned>(c.slots * c.threads_per_row * c.vec * 2));
            CHECK(launch.shared_bytes + 1024 <= static_cast<unsigned>(hopper.max_shared_memory_per_block_optin));
            CHECK(launch.grid == static_cast<unsigned>(256 * c.cluster));
            found_pair = found_pair || c.cluster == 2;
        }
        CHECK(found_pair);
    }
    SECTION("a 1 MB fp32 row: also clusters of 8-16 with chunks small enough for two CTAs an SM") {
        const RowInputs fp32{4, 1};
        bool found_two_per_sm = false;
        for (const auto& config : row_search_space(256, 262144, 4, fp32, hopper)) {
            if (!config.count("slots")) continue;
            const RowConfig c = RowConfig::from(config, "softmax");
            CHECK_FALSE(row_invalid_reason(c, 262144, 4, fp32, hopper).has_value());
            // The tuned choice on the H100 (docs/perf/rows.md).
            found_two_per_sm = found_two_per_sm || (c.cluster == 16 && c.threads_per_row == 512 && c.items == 0 && c.slots == 8);
        }
        CHECK(found_two_per_sm);
        for (const auto& config : row_search_space(256, 262144, 4, fp32, DeviceInfo::for_arch("sm_80")))
            CHECK(RowConfig::from(config, "softmax").cluster == 1);
    }
    SECTION("short rows and the residual add have none") {
        for (const auto& config : row_search_space(16384, 4096, 2, bf16, hopper)) CHECK_FALSE(config.count("slots"));
        for (const auto& config : row_search_space(256, 262144, 2, RowInputs{2, 2}, hopper))
            CHECK_FALSE(config.count("slots"));
    }
    SECTION("what a resident config refuses, and why") {
        const RowConfig c = bf16_512k_pair();
        CHECK_FALSE(row_invalid_reason(c, 262144, 2, bf16, hopper).has_value());
        RowConfig too_many_registers = c;
        too_many_registers.items = 4;  // 64 bytes at 1024 threads next to slots: spills
        CHECK(row_invalid_reason(too_many_registers, 262144, 2, bf16, hopper).value().find("spill") != std::string::npos);
        RowConfig too_much_shared = c;
        too_much_shared.slots = 16;  // 256 KB
        CHECK(row_invalid_reason(too_much_shared, 262144, 2, bf16, hopper).value().find("shared memory") !=
              std::string::npos);
        RowConfig too_short = c;
        too_short.cluster = 1;
        CHECK(row_invalid_reason(too_short, 262144, 2, bf16, hopper).value().find("fewer than cols") != std::string::npos);
        CHECK(row_invalid_reason(c, 262144, 2, RowInputs{2, 2}, hopper).value().find("residual") != std::string::npos);
        RowConfig with_prefetch = c;
        with_prefetch.prefetch = 1;
        CHECK(row_invalid_reason(with_prefetch, 262144, 2, bf16, hopper).has_value());
    }
    SECTION("a misaligned pointer keeps the bytes held with narrower copies, or streams past 32 vectors") {
        const RowConfig c = bf16_512k_pair();
        const auto narrow = row_launch(c, 4, 256, 262144, bf16);
        CHECK(narrow.items == 4);
        CHECK(narrow.slots == 28);
        CHECK(narrow.shared_bytes == 14u * 1024 * 16);
        for (const int vec : {2, 1}) {
            const auto streaming = row_launch(c, vec, 256, 262144, bf16);
            CHECK(streaming.slots == 0);
            CHECK(streaming.items == 0);
            CHECK(streaming.cluster == 1);
        }
    }
}

TEST_CASE("row counts past what a grid holds cap the grid instead of wrapping it", "[row_config]") {
    using tileops::detail::row_launch;
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    // Rows past the grid are walked in steps of it, so any grid from 1 to 2^30 blocks is correct;
    // 2^32 + 1 rows once wrapped to a grid of 1 block, 2^32 rows to 0.
    for (const int64_t rows : {(int64_t{1} << 32) + 1, int64_t{1} << 32, int64_t{1} << 40}) {
        const RowConfig streaming{256, 1, 8, 0, 1, 0};
        CHECK(row_launch(streaming, 8, rows, 2048, RowInputs{2, 1}).grid == (1u << 30));
        const RowConfig several_rows{32, 4, 4, 1, 1, 0};
        CHECK(row_launch(several_rows, 4, rows, 64, RowInputs{2, 1}).grid == (1u << 30));
        const RowConfig cluster = row_heuristic(65536, 2, RowInputs{2, 1}, hopper);
        REQUIRE(cluster.cluster > 1);
        const auto launch = row_launch(cluster, cluster.vec, rows, 65536, RowInputs{2, 1});
        CHECK(launch.grid == (1u << 30));
        CHECK(launch.grid % static_cast<unsigned>(launch.cluster) == 0);
    }
    CHECK(row_launch(RowConfig{256, 1, 8, 0, 1, 0}, 8, 7, 2048, RowInputs{2, 1}).grid == 7);
}

TEST_CASE("few long rows are split over the grid; many rows or short ones are not", "[row_config]") {
    using tileops::detail::split_heuristic;
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    const auto one_long_row = split_heuristic(1, 1048576, 2, hopper);
    REQUIRE(one_long_row.has_value());
    CHECK(one_long_row->split >= hopper.sm_count);  // every SM streams part of the row
    CHECK(one_long_row->split <= one_long_row->threads_per_row);
    CHECK_FALSE(row_invalid_reason(*one_long_row, 1048576, 2, RowInputs{2, 1}, hopper).has_value());
    CHECK(split_heuristic(8, 262144, 2, hopper).has_value());
    CHECK_FALSE(split_heuristic(256, 262144, 2, hopper).has_value());  // the rows fill the GPU
    CHECK_FALSE(split_heuristic(1, 50257, 2, hopper).has_value());     // too short to pay a second launch
    // 16 rows of 250 KB on 16 CTAs left 116 SMs idle (26 us against torch.compile's 18 on H100).
    CHECK(split_heuristic(16, 128256, 2, hopper).has_value());
    CHECK(split_heuristic(1, 65536, 2, hopper).has_value());        // 128 KB
    CHECK_FALSE(split_heuristic(1, 32768, 2, hopper).has_value());  // 64 KB
    RowConfig bad = *one_long_row;
    bad.split = 3;
    CHECK(row_invalid_reason(bad, 1048576, 2, RowInputs{2, 1}, hopper).has_value());
    bad.split = 2048;
    CHECK(row_invalid_reason(bad, 1048576, 2, RowInputs{2, 1}, hopper).has_value());
    bad = *one_long_row;
    bad.items = 4;
    CHECK(row_invalid_reason(bad, 1048576, 2, RowInputs{2, 1}, hopper).has_value());
}

TEST_CASE("softmax holds rows from 96 KB on chip once they fill the SMs; the norms from 128 KB", "[row_config]") {
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    auto heuristic = [&](const char* op, long long rows, long long cols, const char* dtype) {
        return tileops::detail::make_op({op, {rows, cols}, dtype, ""})->model().heuristic(hopper);
    };
    // One resident 1024-thread CTA a row (A/B on an H100: 256 x 51200 bf16 29.3 -> 22.3 us).
    for (const auto& [op, rows, cols, dtype] : {std::tuple{"softmax", 256LL, 51200LL, "bf16"},
                                                {"log_softmax", 384LL, 32000LL, "fp32"},
                                                {"softmax", 160LL, 65024LL, "bf16"}}) {
        const tileops::Config c = heuristic(op, rows, cols, dtype);
        INFO(op << " " << rows << "x" << cols << " " << dtype);
        CHECK(c.at("slots") > 0);
        CHECK(c.at("cluster") == 1);
        CHECK(c.at("threads_per_row") == 1024);
        CHECK_FALSE(tileops::detail::make_op({op, {rows, cols}, dtype, ""})->model().invalid_reason(c, hopper));
    }
    // Not where the rows leave SMs idle (clusters of small CTAs, the next test), nor for the norms
    // under 128 KB, nor below 96 KB.
    CHECK(heuristic("softmax", 64, 51200, "bf16").at("threads_per_row") == 256);
    CHECK_FALSE(heuristic("rmsnorm", 256, 51200, "bf16").count("slots"));
    CHECK_FALSE(heuristic("softmax", 256, 32768, "bf16").count("slots"));
    // Past 128 KB every op holds its rows (unchanged).
    CHECK(heuristic("rmsnorm", 256, 100000, "fp32").count("slots"));
}

TEST_CASE("softmax's rows fewer than the SMs are held by clusters of eight small CTAs", "[row_config]") {
    using tileops::detail::clustered_resident_heuristic;
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    auto heuristic = [&](const char* op, long long rows, long long cols, const char* dtype) {
        return tileops::detail::make_op({op, {rows, cols}, dtype, ""})->model().heuristic(hopper);
    };
    // From 17 rows (8 CTAs each reach every SM) to 7/8 of the SMs, rows of 96 KB to 768 KB.
    for (const auto& [op, rows, cols, dtype] : {std::tuple{"softmax", 33LL, 92416LL, "bf16"},
                                                {"log_softmax", 64LL, 128256LL, "bf16"},
                                                {"softmax", 17LL, 196608LL, "fp32"},
                                                {"softmax", 115LL, 49152LL, "bf16"}}) {
        const tileops::Config c = heuristic(op, rows, cols, dtype);
        INFO(op << " " << rows << "x" << cols << " " << dtype);
        CHECK(c.at("cluster") == 8);
        CHECK(c.at("threads_per_row") == 256);
        CHECK(c.at("items") == 0);
        CHECK(c.at("slots") * 8 * 256 * c.at("vec") >= cols);  // the whole row on chip
        CHECK_FALSE(tileops::detail::make_op({op, {rows, cols}, dtype, ""})->model().invalid_reason(c, hopper));
    }
    const RowInputs bf16{2, 1};
    CHECK_FALSE(clustered_resident_heuristic(16, 128256, 2, bf16, hopper));    // few_rows or split rows
    CHECK_FALSE(clustered_resident_heuristic(116, 128256, 2, bf16, hopper));   // a wide CTA a row fills the SMs
    CHECK_FALSE(clustered_resident_heuristic(64, 32768, 2, bf16, hopper));     // 64 KB rows
    CHECK_FALSE(clustered_resident_heuristic(40, 262144, 4, RowInputs{4, 1}, hopper));  // 1 MB: 32 slots
    CHECK_FALSE(clustered_resident_heuristic(64, 1048576, 2, bf16, hopper));   // 2 MB rows
    CHECK_FALSE(clustered_resident_heuristic(100, 256000, 2, bf16, hopper));   // 200 wide CTAs: 1.5 an SM
    CHECK(clustered_resident_heuristic(72, 202048, 2, bf16, hopper));          // 144 wide CTAs
    CHECK_FALSE(clustered_resident_heuristic(64, 128256, 2, bf16, DeviceInfo::for_arch("sm_80")));  // no clusters
    CHECK_FALSE(clustered_resident_heuristic(64, 128256, 2, RowInputs{2, 2}, hopper));  // two inputs
    // Only for ops that reread their rows: the norms keep their heuristics.
    CHECK(heuristic("rmsnorm", 64, 128256, "bf16").at("cluster") != 8);
}

TEST_CASE("few short rows spread over the SMs, one row a block", "[row_config]") {
    // A problem of a few KB is one memory round trip: the SMs taking part set its time.
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    auto rows_per_block = [&](long long rows, long long cols) {
        auto op = tileops::detail::make_op({"rmsnorm", {rows, cols}, "bf16", ""});
        return op->model().heuristic(hopper).at("rows_per_block");
    };
    CHECK(rows_per_block(64, 896) == 1);     // 64 blocks, not 8 of 8 rows
    CHECK(rows_per_block(8192, 896) == 8);   // enough blocks either way: 256-thread blocks
    CHECK(rows_per_block(512, 896) == 1);    // 512 blocks of 128 threads: still one wave
    CHECK(rows_per_block(1100, 896) == 8);   // past one wave (1100 x 128 threads): 138 blocks of 8 rows
}

TEST_CASE("fewer rows than SMs spread each row as wide as it goes", "[row_config]") {
    using tileops::detail::few_rows_heuristic;
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    const RowInputs bf16{2, 1};

    SECTION("rows of up to 2048 vectors: one CTA, one or two vectors a thread") {
        const auto three = few_rows_heuristic(3, 4096, 2, bf16, hopper);
        REQUIRE(three.has_value());
        CHECK(three->cluster == 1);
        CHECK(three->threads_per_row == 512);
        CHECK(three->items == 1);
        const auto ragged = few_rows_heuristic(17, 3000, 2, bf16, hopper);  // 375 vectors
        REQUIRE(ragged.has_value());
        CHECK(ragged->threads_per_row == 512);
        CHECK(ragged->items == 1);
        const auto two_each = few_rows_heuristic(64, 16384, 2, bf16, hopper);
        REQUIRE(two_each.has_value());
        CHECK(two_each->threads_per_row == 1024);
        CHECK(two_each->items == 2);
        CHECK_FALSE(row_invalid_reason(*two_each, 16384, 2, bf16, hopper).has_value());
    }
    SECTION("more rows than SMs in one wave (half an SM's threads): still one vector a thread") {
        const auto layernorm = few_rows_heuristic(255, 896, 2, bf16, hopper);  // 112 vectors
        REQUIRE(layernorm.has_value());
        CHECK(layernorm->threads_per_row == 128);
        CHECK(layernorm->items == 1);
        CHECK(few_rows_heuristic(264, 4096, 2, bf16, hopper).has_value());  // 264 x 512 threads: the edge
    }
    SECTION("longer rows, at most two CTAs an SM: clusters of 16 holding up to four vectors a thread") {
        const auto vocabulary = few_rows_heuristic(5, 50432, 2, bf16, hopper);
        REQUIRE(vocabulary.has_value());
        CHECK(vocabulary->cluster == 16);
        CHECK(vocabulary->threads_per_row == 256);
        CHECK(vocabulary->items == 2);
        const auto fp32 = few_rows_heuristic(1, 50432, 4, RowInputs{4, 1}, hopper);
        REQUIRE(fp32.has_value());
        CHECK(fp32->items == 4);
        CHECK_FALSE(row_invalid_reason(*fp32, 50432, 4, RowInputs{4, 1}, hopper).has_value());
    }
    SECTION("the other heuristics decide elsewhere") {
        CHECK_FALSE(few_rows_heuristic(300, 4096, 2, bf16, hopper).has_value());     // 300 CTAs of 512: two waves
        CHECK_FALSE(few_rows_heuristic(133, 50432, 2, bf16, hopper).has_value());    // more rows than SMs, clusters
        CHECK_FALSE(few_rows_heuristic(4, 256, 2, bf16, hopper).has_value());        // rows under 1 KB
        CHECK_FALSE(few_rows_heuristic(17, 50432, 2, bf16, hopper).has_value());     // 272 CTAs: over two an SM
        CHECK_FALSE(few_rows_heuristic(1, 1048576, 2, bf16, hopper).has_value());    // too long to hold: split
        CHECK_FALSE(few_rows_heuristic(1, 50432, 2, bf16, DeviceInfo::for_arch("sm_80")).has_value());  // no clusters
    }
    SECTION("the op's heuristic takes it before the split kernels") {
        const tileops::Softmax vocabulary({5, 50432, tileops::DType::bf16, {}, false, 50432, 50432});
        CHECK(vocabulary.model().heuristic(hopper).at("cluster") == 16);
        const tileops::Softmax long_row({1, 1048576, tileops::DType::bf16, {}, false, 1048576, 1048576});
        CHECK(long_row.model().heuristic(hopper).count("split") == 1);
        // The norms too, with the residual add.
        const tileops::RmsNorm norm({1, 1048576, tileops::DType::bf16, {}, 1e-5f, true});
        CHECK(norm.model().heuristic(hopper).count("split") == 1);
        const tileops::LayerNorm layer_norm({2, 1000003, tileops::DType::fp32});
        CHECK(layer_norm.model().heuristic(hopper).count("split") == 1);
    }
}
