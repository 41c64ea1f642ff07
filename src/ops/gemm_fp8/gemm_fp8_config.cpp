#include "ops/gemm_fp8/gemm_fp8_config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/op_model.hpp"
#include "gemm_fp8/gemm_fp8_args.cuh"  // kernel_templates/: the block scales' slot

namespace tileops::detail {
namespace {

constexpr int kStepBytes = 128;  // a stage holds 128 elements (bytes) of K of each row
constexpr int kMaxStages = 16;
// Alignment slack (the ring starts on 1024 bytes: the swizzle's period) and two 8-byte barriers a stage.
constexpr unsigned kSharedExtra = 1024 + 2 * 8 * kMaxStages;
// Accumulators a consumer thread holds, `acc` and the K step's `part` together (the kernel's
// comment): 64 x 256 (256) spills 308 bytes with the consumers' 232 registers, 64 x 224 does not
// (the compile test checks every config).
constexpr int kMaxAccumulators = 224;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The deepest ring that fits, or 0 when not even two stages do.
int deepest_ring(GemmFp8Config c, const GemmFp8Shape& s, const DeviceInfo& device) {
    for (c.stages = kMaxStages; c.stages >= 2; --c.stages)
        if (!gemm_fp8_invalid_reason(c, s, device)) return c.stages;
    return 0;
}

// The heuristic's ring. With block scales, at most 96 KB of stages: tuned on an H200, they ran
// faster with shallow rings (2048 x 24576 x 7168, 128 x 128 tiles: 619 us with 3 stages of 32 KB,
// 747 with 5; 512 x 8192 x 8192: 67 against 71; 64 x 24576 x 7168: 64 x 128 tiles with 4 stages
// of 24 KB). Not L1 serving the scales (they come through shared memory with the stage, and the
// gap stayed); under ncu's locked clocks 5 stages beat 3, so the loss comes with full clocks
// (power or clock limits, docs/perf/gemm_fp8.md). Otherwise the deepest ring that fits.
int heuristic_ring(const GemmFp8Config& c, const GemmFp8Shape& s, const DeviceInfo& device) {
    const int deepest = deepest_ring(c, s, device);
    if (!s.block_scales || deepest == 0) return deepest;
    constexpr int kBlockScalesRingBytes = 96 * 1024;
    const int stage_bytes = (c.block_m + c.block_n) * kStepBytes;
    // 128 x 192 tiles (40 KB stages) want three all the same: 862 us against 955 with two at
    // 4096 x 7168 x 16384 (H100, 2026-12-06).
    return std::min(deepest, std::max(3, kBlockScalesRingBytes / stage_bytes));
}

// The tiles worth having: (block_m, consumers, block_n) and a rough relative efficiency per output
// element (larger tiles reuse each loaded byte more). 128 x 192 tiles store D with TMA in three
// whole boxes (160 and 224 store from registers) and ran 10% faster than 128 x 128 where both
// fill their waves alike (H200 tunes, 2026-12-04, per tensor: 8192^3 696-736 against 826 us,
// 2048 x 24576 x 7168 487 against 538); where 128 x 128 fills its waves better it stays (4096^3
// 110.1 against 110.6, 2048 x 4096 x 4096 per row 65.3 against 68.1). 128 x 224 tiles (224
// accumulators a thread, D stored from registers) lost to 128 x 128 even where they take one wave
// against two: 128 x 28672 x 4096 per row 52.4 us against 43.6 (H200 tune, 2026-12-04).
struct Tile {
    int bm, consumers, bn;
    double efficiency;
};
constexpr Tile kTiles[] = {{128, 2, 128, 1.0},  {128, 2, 160, 0.98}, {128, 2, 192, 1.03}, {128, 2, 224, 0.85},
                           {128, 2, 96, 0.9},   {128, 2, 64, 0.8},   {256, 2, 64, 0.85},  {64, 1, 224, 0.78},
                           {64, 1, 192, 0.77},  {64, 1, 160, 0.75},  {64, 1, 128, 0.72},  {64, 1, 96, 0.65},
                           {64, 1, 64, 0.55},   {64, 1, 32, 0.3}};

// Block-scaled 128 x 192 tiles (three stages) gain more on 128 x 128 than the per-tensor figure
// above says (each A tile loaded, scaled and promoted once for 1.5x the outputs). H100 A/B,
// 2026-12-06 (us, 128 x 128 against 128 x 192): 4096 x 7168 x 16384 907 -> 862, 2048 x 24576 x
// 7168 628 -> 567, 8192 x 28672 x 4096 1665 -> 1483, 8192^3 1054 -> 922; fitted over their waves,
// 1.11-1.13 where 1.0 is 128 x 128's. 512 x 8192 x 8192 (two waves either way) 69 -> 87 stays on 128.
constexpr double kBlockScaled192Efficiency = 1.12;

}  // namespace

GemmFp8Config GemmFp8Config::from(const Config& config) {
    const std::string op = "GemmFp8";
    GemmFp8Config c;
    c.block_m = static_cast<int>(config_value(config, "block_m", op));
    c.block_n = static_cast<int>(config_value(config, "block_n", op));
    c.consumers = static_cast<int>(config_value(config, "consumers", op));
    c.stages = static_cast<int>(config_value(config, "stages", op));
    c.group_m = static_cast<int>(config_value(config, "group_m", op));
    return c;
}

Config GemmFp8Config::to_config() const {
    return {{"block_m", block_m}, {"block_n", block_n}, {"consumers", consumers}, {"stages", stages}, {"group_m", group_m}};
}

unsigned GemmFp8Config::shared_bytes(const GemmFp8Shape& s) const {
    const size_t out_boxes = gemm_fp8_stores_with_tma(s, *this) ? static_cast<size_t>(consumers) * 2 * 64 * 64 * s.out_bytes : 0;
    const size_t scale_slots =
        s.block_scales ? static_cast<size_t>(stages) * gemm_fp8_scale_slot_floats(block_m) * sizeof(float) : 0;
    return static_cast<unsigned>(static_cast<size_t>(stages) * (block_m + block_n) * kStepBytes + out_boxes + scale_slots +
                                 kSharedExtra);
}

// Whole 64-column boxes only: see the kernel's static_assert on TMA_STORE.
bool gemm_fp8_stores_with_tma(const GemmFp8Shape& s, const GemmFp8Config& c) { return s.out_bytes == 2 && c.block_n % 64 == 0; }

std::string gemm_fp8_kernel_name(const GemmFp8Config& c, const std::string& out_type, int scaling,
                                 const std::string& epilogue, bool tma_store, int groups) {
    return fmt::format("tileops::gemm_fp8_sm90_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}{}>", out_type, c.block_m, c.block_n,
                       c.stages, c.consumers, c.group_m, scaling, epilogue, tma_store ? "true" : "false",
                       groups == 0 ? "" : fmt::format(", {}", groups));
}

int64_t gemm_fp8_tiles(const GemmFp8Config& c, const GemmFp8Shape& s) {
    return ceil_div(s.m, c.block_m) * ceil_div(s.n, c.block_n) * s.batch;
}

std::optional<std::string> gemm_fp8_invalid_reason(const GemmFp8Config& c, const GemmFp8Shape& s, const DeviceInfo& device) {
    if (device.sm() != 90)
        return fmt::format("the FP8 GEMM (wgmma on e4m3, TMA) needs sm_90, the device is {}", device.arch());
    if (c.consumers != 1 && c.consumers != 2) return fmt::format("consumers = {} is not 1 or 2", c.consumers);
    const int rows = c.block_m / c.consumers;
    if (c.block_m % c.consumers != 0 || (rows != 64 && rows != 128))
        return fmt::format("block_m / consumers = {} / {} is not 64 or 128", c.block_m, c.consumers);
    if (c.block_n < 32 || c.block_n > 256 || c.block_n % 32 != 0)
        return fmt::format("block_n = {} is not 32, 64, ..., 256 (the wgmma widths instantiated)", c.block_n);
    if (rows / 64 * c.block_n > kMaxAccumulators)
        return fmt::format("a consumer's tile {} x {} needs {} accumulators a thread (with the K step's), more than {}",
                           rows, c.block_n, rows / 64 * c.block_n, kMaxAccumulators);
    if (s.block_scales && 128 % c.block_n != 0 && c.block_n != 192)
        return fmt::format("block_n = {} with 128 x 128 scale blocks of B: a tile must lie in one block (32, 64 or 128) "
                           "or span exactly two (192)",
                           c.block_n);
    if (c.stages < 2 || c.stages > kMaxStages) return fmt::format("stages = {} is not in [2, {}]", c.stages, kMaxStages);
    if (c.group_m < 1 || c.group_m > 64) return fmt::format("group_m = {} is not in [1, 64]", c.group_m);
    if (c.threads() > device.max_threads_per_block)
        return fmt::format("{} threads exceed the device's {}", c.threads(), device.max_threads_per_block);
    if (c.shared_bytes(s) > static_cast<unsigned>(device.max_shared_memory_per_block_optin))
        return fmt::format("needs {} bytes of shared memory, the device allows {}", c.shared_bytes(s),
                           device.max_shared_memory_per_block_optin);
    if (ceil_div(s.m, c.block_m) * ceil_div(s.n, c.block_n) > 0x7fffffffLL) return "too many tiles for one launch";
    return std::nullopt;
}

std::optional<std::string> gemm_fp8_unsupported_reason(const DeviceInfo& device) {
    if (device.sm() == 90) return std::nullopt;
    return fmt::format("the FP8 GEMM multiplies with sm_90's FP8 wgmma (H100, H200); {} has none", device.arch());
}

// As the 16-bit GEMM's heuristic: where the tiles of the widest config leave SMs idle, the most
// blocks that fit in one wave (small M is bound by how many SMs stream B); else the fewest
// modelled cycles (waves x tile area / efficiency). Tiles taller than M needs are skipped.
GemmFp8Config gemm_fp8_heuristic(const GemmFp8Shape& s, const DeviceInfo& device) {
    const int64_t sm_count = device.sm_count;
    GemmFp8Config widest;
    const bool one_wave = gemm_fp8_tiles(widest, s) <= sm_count;
    GemmFp8Config best;
    double best_score = 0;
    bool found = false;
    for (const Tile& t : kTiles) {
        if (t.bm > 64 && s.m <= t.bm / 2) continue;
        GemmFp8Config c;
        c.block_m = t.bm, c.consumers = t.consumers, c.block_n = t.bn;
        c.stages = heuristic_ring(c, s, device);
        if (c.stages == 0) continue;  // no ring is valid (with block scales: 96, 160, 224 columns)
        const int64_t tiles = gemm_fp8_tiles(c, s);
        double score;
        if (one_wave) {
            if (tiles > sm_count) continue;
            score = static_cast<double>(tiles);
        } else {
            const double efficiency = s.block_scales && t.bm == 128 && t.bn == 192 ? kBlockScaled192Efficiency : t.efficiency;
            score = -static_cast<double>(ceil_div(tiles, sm_count)) * t.bm * t.bn / efficiency;
        }
        if (!found || score > best_score) best = c, best_score = score, found = true;
    }
    if (!found) {  // nothing valid (another arch): the default, which says why when resolved
        best.stages = 4;
    }
    return best;
}

std::vector<GemmFp8Config> gemm_fp8_search_space(const GemmFp8Shape& s, const DeviceInfo& device) {
    std::vector<GemmFp8Config> space;
    for (const Tile& t : kTiles) {
        if (t.bm > 64 && s.m <= t.bm / 2) continue;
        GemmFp8Config c;
        c.block_m = t.bm, c.consumers = t.consumers, c.block_n = t.bn;
        const int deepest = deepest_ring(c, s, device);
        if (deepest == 0) continue;
        // The deepest ring, a shallower one (fewer bytes in flight, more L1), and the heuristic's.
        for (int stages : {deepest, std::max(2, deepest / 2), heuristic_ring(c, s, device)}) {
            c.stages = stages;
            if (std::none_of(space.begin(), space.end(), [&](const GemmFp8Config& o) { return o.to_config() == c.to_config(); }))
                space.push_back(c);
        }
    }
    return space;
}

}  // namespace tileops::detail
