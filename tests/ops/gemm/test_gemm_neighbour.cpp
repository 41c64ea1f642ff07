// A GEMM config tuned for one shape serves a near untuned shape only where its tiles fill the GPU's
// waves about as well there, and where its kernel would not copy rows the skinny kernel reads in
// place: the lookup of the nearest tuned shape asks the op
// (OpModel::neighbour_misfit) and falls back to the heuristic otherwise. CPU only.
#include <filesystem>
#include <fstream>
#include <tuple>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ops/gemm/gemm_config.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"
#include "tileops/tuning_db.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {

Gemm nt_gemm(int64_t m, int64_t n, int64_t k) {
    GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    p.layout = GemmLayout::nt;
    return Gemm(p);
}

// The 64 x 32 TMA tiles the H200's database holds for 64 x 4096 x 4096: 128 tiles, one wave.
Config narrow_tiles() {
    return {{"kernel", 1}, {"block_m", 64}, {"block_n", 32}, {"block_k", 64}, {"stages", 16}, {"consumers", 1},
            {"pingpong", 0}, {"cluster", 1}, {"split_k", 1}, {"group_m", 8}, {"vec", 8}};
}

}  // namespace

TEST_CASE("slot fill: work units over whole waves, times the tiles' area inside the matrix", "[gemm][tuning]") {
    using detail::GemmConfig;
    using detail::GemmShape;
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    REQUIRE(hopper.sm_count == 132);
    const GemmConfig c = GemmConfig::from(narrow_tiles());
    const auto shape = [](int64_t m, int64_t n) { return GemmShape{1, m, n, 4096, 2, true, 2}; };
    CHECK(detail::gemm_slot_fill(c, shape(64, 4096), hopper) == Catch::Approx(128.0 / 132));
    CHECK(detail::gemm_slot_fill(c, shape(64, 4608), hopper) == Catch::Approx(144.0 / 264));  // two waves
    CHECK(detail::gemm_slot_fill(c, shape(64, 4080), hopper) == Catch::Approx(128.0 / 132 * 4080 / 4096));
    GemmConfig split = c;
    split.split_k = 2;
    CHECK(detail::gemm_slot_fill(split, shape(64, 2048), hopper) == Catch::Approx(128.0 / 132));
    // Ping-pong's two tiles a block take turns on one SM's tensor cores: still an SM a slot
    // (512 x 4544 x 4544 on the 128 x 128 ping-pong tiles tuned for 512 x 4096 x 4096, 144 tiles,
    // ran 49.3 us on an H200 where the heuristic's one wave of 128 x 160 tiles runs 37.0).
    GemmConfig pingpong = c;
    pingpong.pingpong = 1;
    CHECK(detail::gemm_slot_fill(pingpong, shape(64, 4608), hopper) == Catch::Approx(144.0 / 264));
}

TEST_CASE("a near shape's GEMM config is reused only where it fills the waves as well", "[gemm][tuning]") {
    test::TempDir dir;
    test::ScopedEnv no_env_dbs("TILEOPS_TUNING_DB", "");
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    const Gemm tuned = nt_gemm(64, 4096, 4096);
    REQUIRE_FALSE(tuned.model().invalid_reason(narrow_tiles(), hopper));

    TuningDb db;
    db.meta().arch = "sm_90a";
    TuningEntry entry;
    entry.key = tuning::tuned_key_for(tuned.model(), narrow_tiles(), hopper);
    entry.config = narrow_tiles();
    entry.median_us = 14.0;
    entry.device = "Test GPU";
    entry.tuned_at = "2026-12-02T00:00:00Z";
    db.upsert(entry);
    // The same tiles tuned for a decode-sized M (below).
    const Gemm tuned_decode = nt_gemm(16, 4096, 4096);
    entry.key = tuning::tuned_key_for(tuned_decode.model(), narrow_tiles(), hopper);
    db.upsert(entry);
    const std::filesystem::path path = dir.path() / "fleet.json";
    std::ofstream(path) << db.to_json();

    tuning::ResolverOptions options;
    options.arch = "sm_90a";
    options.user_dbs = {path.string()};
    options.shipped_dirs = {(dir.path() / "none").string()};
    options.max_distance = 1.0;
    tuning::ConfigResolver resolver(options);

    // 4096 x 4000: 128 tiles still, the entry serves it.
    const Gemm same_waves = nt_gemm(64, 4000, 4096);
    const tuning::ConfigChoice near = tuning::choose_config(resolver, same_waves.model(), hopper);
    CHECK(near.source == tuning::ConfigSource::nearest);
    CHECK(near.config == narrow_tiles());

    // Falcon's 4608 x 3584 (log2 distance 0.26): 144 tiles in two waves; the heuristic serves it.
    const Gemm two_waves = nt_gemm(64, 4608, 3584);
    REQUIRE_FALSE(two_waves.model().invalid_reason(narrow_tiles(), hopper));
    const tuning::ConfigChoice far = tuning::choose_config(resolver, two_waves.model(), hopper);
    CHECK(far.source == tuning::ConfigSource::heuristic);
    CHECK(far.config == two_waves.model().heuristic(hopper));
    const auto why = two_waves.model().neighbour_misfit({64, 4096, 4096}, narrow_tiles(), hopper);
    REQUIRE(why);
    CHECK_THAT(*why, ContainsSubstring("64 x 32 tiles") && ContainsSubstring("55%") && ContainsSubstring("97%"));
    // The exact shape is never second-guessed.
    CHECK(tuning::choose_config(resolver, tuned.model(), hopper).source == tuning::ConfigSource::user_db);

    // An odd K next to the decode entry (log2 distance 0.0004): its rows are off 16 bytes, where
    // the TMA tiles would copy A and B first; the heuristic's skinny kernel reads them in place.
    const Gemm odd_k = nt_gemm(16, 4096, 4095);
    const tuning::ConfigChoice skinny = tuning::choose_config(resolver, odd_k.model(), hopper);
    CHECK(skinny.source == tuning::ConfigSource::heuristic);
    CHECK(skinny.config.at("kernel") == detail::kGemmSkinny);
    const auto copies = odd_k.model().neighbour_misfit({16, 4096, 4096}, narrow_tiles(), hopper);
    REQUIRE(copies);
    CHECK_THAT(*copies, ContainsSubstring("in place"));
}

// In one wave a tensor-bound problem takes one block's time: the smallest tile work over its
// consumers wins; a memory-bound one takes the most blocks (tiles timed on an H200, docs/perf/gemm.md).
TEST_CASE("one wave: tensor-bound problems take the least work a block, memory-bound ones the most blocks",
          "[gemm][tuning]") {
    const DeviceInfo hopper = DeviceInfo::for_arch("sm_90a");
    const auto tiles = [&](int64_t m, int64_t n, int64_t k) {
        const detail::GemmConfig c = detail::GemmConfig::from(nt_gemm(m, n, k).model().heuristic(hopper));
        REQUIRE(c.kernel == detail::kGemmSm90);
        return std::make_tuple(c.block_m, c.block_n, c.consumers, c.split_k);
    };
    // 64 x 256 with one consumer ran 48.9 us, 128 x 128 with two 29.9.
    CHECK(tiles(2048, 896, 4864) == std::make_tuple(128, 128, 2, 1));
    // 128 x 64 with two consumers, 100 blocks: 22.7 us, against 24.8 for 64 x 128 with one and
    // 35.1 for 128 x 128 with two (52 blocks).
    CHECK(tiles(512, 1600, 6400) == std::make_tuple(128, 64, 2, 1));
    // Memory-bound: 128 blocks of 64 x 32 (H100 and H200 tuned) whatever the work a block.
    CHECK(tiles(64, 4096, 4096) == std::make_tuple(64, 32, 1, 1));
    // At short K the partial sums cost a large share of a wave: 64 x 64 tiles unsplit ran 10.9 us,
    // 64 x 128 split in three 13.8.
    CHECK(tiles(1, 5120, 2048) == std::make_tuple(64, 64, 1, 1));
    // At long K they cost little and wider tiles stream fewer bytes a block: 64 x 64 unsplit
    // (128 blocks) 47.0 us, the split 64 x 192 tiles (132 blocks) 33.2.
    CHECK(tiles(255, 2048, 16384) == std::make_tuple(64, 192, 1, 3));
    // Tensor-bound with one consumer (0.8 of two): 64 x 192, 128 blocks, 17.8 us; 128 x 128 with
    // two consumers, 96 blocks, 20.7.
    CHECK(tiles(512, 3072, 3072) == std::make_tuple(64, 192, 1, 1));
    // At long K, 32-wide tiles keep too few bytes in flight: 64 x 64 split in two, 39.1 us, against 45.0.
    CHECK(tiles(16, 4096, 16384) == std::make_tuple(64, 64, 1, 2));
    // Several waves: the big tiles, unchanged by the one-wave rules.
    CHECK(tiles(4096, 4096, 4096) == std::make_tuple(128, 256, 2, 1));
}
