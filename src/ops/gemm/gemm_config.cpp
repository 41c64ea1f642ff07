#include "ops/gemm/gemm_config.hpp"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "core/gemm_operands.hpp"
#include "core/op_model.hpp"

namespace tileops::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Barriers and alignment slack of the sm_90 kernel's shared memory: tiles start at a 1024-byte
// boundary (the 128-byte TMA swizzle repeats every 8 rows of 128 bytes); then two 8-byte barriers
// per stage (up to kGemmSm90MaxStages) and the split-K flag.
constexpr unsigned kSm90SharedExtra = 1024 + 2 * 8 * kGemmSm90MaxStages + 16;
// What an sm_90 block may opt in to (H100 and H200 alike).
constexpr size_t kSm90MaxSharedBytes = 227 * 1024;

// The smallest block_m worth using for m rows: a tile much taller than the matrix wastes MMAs.
int useful_block_m(int64_t m) {
    int b = 16;
    while (b < m && b < 256) b *= 2;
    return b;
}

// The ring of A and B stages every kernel keeps in shared memory.
size_t ring_bytes(const GemmConfig& c, const GemmShape& s) {
    return static_cast<size_t>(c.stages) * (c.block_m + c.block_n) * c.block_k * s.in_bytes;
}

// Two 64 x 64 output boxes per consumer warpgroup: the sm_90 kernel's staging for TMA stores.
size_t tma_out_box_bytes(const GemmConfig& c, const GemmShape& s) {
    return static_cast<size_t>(c.consumers) * 2 * 64 * 64 * s.out_bytes;
}

// Drops stages from c's ring (down to 2) until the config is valid: shared memory is what a
// deeper ring runs out of. False when even 2 stages do not make it valid.
bool shorten_ring_to_fit(GemmConfig& c, const GemmShape& s, const DeviceInfo& device) {
    while (c.stages > 2 && gemm_invalid_reason(c, s, device)) --c.stages;
    return !gemm_invalid_reason(c, s, device);
}

}  // namespace

GemmConfig GemmConfig::from(const Config& config) {
    const std::string op = "Gemm";
    GemmConfig c;
    c.kernel = static_cast<int>(config_value(config, "kernel", op));
    c.block_m = static_cast<int>(config_value(config, "block_m", op));
    c.block_n = static_cast<int>(config_value(config, "block_n", op));
    c.block_k = static_cast<int>(config_value(config, "block_k", op));
    c.stages = static_cast<int>(config_value(config, "stages", op));
    c.group_m = static_cast<int>(config_value(config, "group_m", op));
    c.vec = static_cast<int>(config_value(config, "vec", op));
    if (c.kernel == kGemmSm90) {
        c.consumers = static_cast<int>(config_value(config, "consumers", op));
        c.pingpong = static_cast<int>(config_value(config, "pingpong", op));
        c.cluster = static_cast<int>(config_value(config, "cluster", op));
        c.split_k = static_cast<int>(config_value(config, "split_k", op));
    } else if (gemm_reads_in_place(c.kernel)) {
        c.warps = static_cast<int>(config_value(config, "warps", op));
        // The gemv kernel's K split came after its first configs: those without the key split none.
        if (c.kernel == kGemmGemv && config.count("cluster")) c.cluster = static_cast<int>(config_value(config, "cluster", op));
    } else {
        c.warps_m = static_cast<int>(config_value(config, "warps_m", op));
        c.warps_n = static_cast<int>(config_value(config, "warps_n", op));
    }
    return c;
}

Config GemmConfig::to_config() const {
    Config c{{"kernel", kernel}, {"block_m", block_m}, {"block_n", block_n}, {"block_k", block_k},
             {"stages", stages}, {"group_m", group_m}, {"vec", vec}};
    if (kernel == kGemmSm90) {
        c["consumers"] = consumers;
        c["pingpong"] = pingpong;
        c["cluster"] = cluster;
        c["split_k"] = split_k;
    } else if (gemm_reads_in_place(kernel)) {
        c["warps"] = warps;
        if (kernel == kGemmGemv) c["cluster"] = cluster;
    } else {
        c["warps_m"] = warps_m;
        c["warps_n"] = warps_n;
    }
    return c;
}

unsigned GemmConfig::shared_bytes(const GemmShape& s) const {
    // Saturated, not wrapped: a hostile config's ring must not pass the shared-memory check.
    const auto bytes = [](size_t n) { return static_cast<unsigned>(std::min<size_t>(n, UINT_MAX)); };
    if (kernel == kGemmGemv) {
        // Must match gemm_gemv.cuh: NT stages A's rows in 8 classes of k mod 8, NN a tile of up to
        // kGemvNnTileRows positions of k as floats.
        const auto rows = static_cast<size_t>(std::max(block_m, 0));
        const auto a_columns = static_cast<size_t>((s.k + 23) / 8);  // gemm_gemv_a_columns
        const size_t a_bytes = s.b_nt ? rows * 8 * a_columns * s.in_bytes
                                      : rows * static_cast<size_t>(std::min(s.k, kGemmGemvNnTileRows)) * sizeof(float);
        return bytes(a_bytes + rows * std::max(block_n, 0) * sizeof(float));
    }
    if (kernel == kGemmSkinny) {  // must match gemm_skinny.cuh: rows read in place, 8 elements of slack each
        // A stage: A's block_m rows of block_k + 8, then B's block_n such rows (NT) or its block_k
        // rows of block_n + 8 (NN).
        const size_t b_elems = s.b_nt ? static_cast<size_t>(block_n) * (block_k + 8) : static_cast<size_t>(block_k) * (block_n + 8);
        const size_t stage_elems = static_cast<size_t>(block_m) * (block_k + 8) + b_elems;
        return bytes(static_cast<size_t>(warps) * stages * stage_elems * s.in_bytes +
                     static_cast<size_t>(block_m) * block_n * sizeof(float));
    }
    const size_t ring = ring_bytes(*this, s);
    if (kernel != kGemmSm90) return bytes(ring);
    const size_t out_boxes = gemm_sm90_stores_with_tma(s, *this) ? tma_out_box_bytes(*this, s) : 0;
    return bytes(ring + out_boxes + kSm90SharedExtra);
}

bool gemm_sm90_stores_with_tma(const GemmShape& s, const GemmConfig& c) {
    if (c.kernel != kGemmSm90 || s.out_bytes != 2 || c.block_n < 64) return false;
    if (c.block_n % 64 == 0) return true;
    // 96, 160 or 224 columns: their whole boxes go through TMA where the boxes fit beside the ring
    // in sm_90's 227 KB; a ring too deep for them keeps every store in registers.
    return ring_bytes(c, s) + tma_out_box_bytes(c, s) + kSm90SharedExtra <= kSm90MaxSharedBytes;
}

GemmSplitWorkspace GemmSplitWorkspace::of(const GemmConfig& c, const GemmShape& s) {
    GemmSplitWorkspace w;
    if (c.kernel != kGemmSm90 || c.split_k == 1) return w;
    const auto tiles = static_cast<size_t>(gemm_tiles(c, s));
    w.counters_bytes = (tiles * sizeof(int) + 255) / 256 * 256;
    w.partials_bytes = tiles * c.split_k * c.block_m * c.block_n * sizeof(float);
    return w;
}

std::string gemm_kernel_name(const GemmConfig& c, const std::string& types, const std::string& epilogue, bool tma_store,
                             int groups) {
    const std::string schedule = groups == 0 ? "" : fmt::format(", {}", groups);
    if (c.kernel == kGemmSm90)
        return fmt::format("tileops::gemm_sm90_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>", types, c.block_m,
                           c.block_n, c.block_k, c.stages, c.consumers, c.pingpong ? "true" : "false", c.cluster,
                           c.group_m, epilogue, tma_store ? "true" : "false", c.split_k > 1 ? "true" : "false", schedule);
    return fmt::format("tileops::gemm_sm80_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>", types, c.block_m, c.block_n,
                       c.block_k, c.warps_m, c.warps_n, c.stages, c.group_m, c.vec, epilogue, schedule);
}

int64_t gemm_tiles(const GemmConfig& c, const GemmShape& s) {
    return ceil_div(s.m, c.block_m) * ceil_div(s.n, c.block_n) * s.batch;
}

double gemm_slot_fill(const GemmConfig& c, const GemmShape& s, const DeviceInfo& device) {
    // Ping-pong's two tiles a block share the SM's tensor cores: a block holding two takes about
    // twice as long as one holding one, so a slot is an SM either way.
    const int64_t slots = std::max(device.sm_count, 1);
    const int64_t units = gemm_tiles(c, s) * std::max(c.split_k, 1);
    const double waves = static_cast<double>(ceil_div(units, slots));
    const double area = static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.batch) /
                        (static_cast<double>(gemm_tiles(c, s)) * c.block_m * c.block_n);
    return static_cast<double>(units) / (waves * static_cast<double>(slots)) * area;
}

std::optional<std::string> gemm_invalid_reason(const GemmConfig& c, const GemmShape& s, const DeviceInfo& device) {
    if (c.kernel != kGemmSm80 && c.kernel != kGemmSm90 && c.kernel != kGemmSkinny && c.kernel != kGemmGemv)
        return fmt::format("kernel = {} is not 0 (sm_80), 1 (sm_90), 2 (skinny) or 3 (gemv)", c.kernel);
    // Checked before the shared memory it sizes.
    if (c.kernel == kGemmGemv && c.block_m != 1 && c.block_m != 2 && c.block_m != 4)
        return fmt::format("block_m = {} is not 1, 2 or 4", c.block_m);
    if (c.vec != 1 && c.vec != 2 && c.vec != 4 && c.vec != 8) return fmt::format("vec = {} is not 1, 2, 4 or 8", c.vec);
    if (c.group_m < 1 || c.group_m > 64) return fmt::format("group_m = {} is not in [1, 64]", c.group_m);
    // The TMA kernel's small tiles take deep rings (their stages are small; a ring of 12 KB
    // stages is what keeps an SM's share of B streaming), the other kernels at most 8 stages.
    const int max_stages = c.kernel == kGemmSm90 ? kGemmSm90MaxStages : 8;
    if (c.stages < 2 || c.stages > max_stages)
        return fmt::format("stages = {} is not in [2, {}]", c.stages, max_stages);
    if (c.threads() > device.max_threads_per_block)
        return fmt::format("{} threads exceed the device's {}", c.threads(), device.max_threads_per_block);
    const unsigned shared = c.shared_bytes(s);
    if (shared > static_cast<unsigned>(device.max_shared_memory_per_block_optin))
        return fmt::format("needs {} bytes of shared memory, the device allows {}", shared,
                           device.max_shared_memory_per_block_optin);
    if (c.kernel == kGemmGemv) {
        if (device.sm() < 80) return fmt::format("kernel 3 (gemv) is built for sm_80 or newer, the device is {}", device.arch());
        if (c.vec != 8) return "kernel 3 (gemv) needs vec = 8 (it loads 16-byte chunks of rows at any alignment)";
        if (c.block_k != 8) return fmt::format("block_k = {} is not 8 (one 16-byte chunk a load)", c.block_k);
        if (c.warps != 8 && c.warps != 16) return fmt::format("warps = {} is not 8 or 16 (a warp's rows share a shift)", c.warps);
        if (s.b_nt && (c.block_n < c.warps || c.block_n > 64 || c.block_n % c.warps != 0))
            return fmt::format("block_n = {} is not a multiple of warps = {} up to 64 (rows of B a block)", c.block_n, c.warps);
        if (!s.b_nt && c.block_n != 56 && c.block_n != 120 && c.block_n != 248)
            return fmt::format("block_n = {} is not 56, 120 or 248 (a row's 8, 16 or 32 chunks a warp takes)", c.block_n);
        if (c.cluster != 1 && c.cluster != 2 && c.cluster != 4 && c.cluster != 8)
            return fmt::format("cluster = {} is not 1, 2, 4 or 8 (blocks splitting K)", c.cluster);
        if (c.cluster > 1 && (s.b_nt || device.sm() != 90))
            return fmt::format("cluster = {} splits K in layout NN on sm_90 only (the problem is {} on {})", c.cluster,
                               s.b_nt ? "NT" : "NN", device.arch());
        if (ceil_div(s.m, c.block_m) > 65535) return fmt::format("M = {} needs more than 65535 blocks of {} rows", s.m, c.block_m);
        if (s.batch > 65535) return fmt::format("batch = {} is more than 65535 (the grid's z)", s.batch);
    } else if (c.kernel == kGemmSkinny) {
        if (device.sm() < 80) return fmt::format("kernel 2 (mma.sync) needs sm_80 or newer, the device is {}", device.arch());
        if (c.vec != 8) return "kernel 2 (skinny) needs vec = 8 (it copies 16-byte chunks of rows at any alignment)";
        if (c.block_m != 16 && c.block_m != 32 && c.block_m != 64)
            return fmt::format("block_m = {} is not 16, 32 or 64", c.block_m);
        if (c.block_n != 16 && c.block_n != 32 && c.block_n != 64)
            return fmt::format("block_n = {} is not 16, 32 or 64", c.block_n);
        if (c.block_k != 64) return fmt::format("block_k = {} is not 64 (one 128-byte swizzled row)", c.block_k);
        if (!is_pow2(c.warps) || c.warps > 16) return fmt::format("warps = {} is not a power of two <= 16", c.warps);
        if (ceil_div(s.m, c.block_m) > 65535) return fmt::format("M = {} needs more than 65535 blocks of {} rows", s.m, c.block_m);
        if (s.batch > 65535) return fmt::format("batch = {} is more than 65535 (the grid's z)", s.batch);
    } else if (c.kernel == kGemmSm80) {
        if (device.sm() < 80) return fmt::format("kernel 0 (mma.sync, cp.async) needs sm_80 or newer, the device is {}", device.arch());
        if (!is_pow2(c.block_m) || c.block_m < 16 || c.block_m > 256)
            return fmt::format("block_m = {} is not a power of two in [16, 256]", c.block_m);
        if (!is_pow2(c.block_n) || c.block_n < 32 || c.block_n > 256)
            return fmt::format("block_n = {} is not a power of two in [32, 256]", c.block_n);
        if (c.block_k != 32 && c.block_k != 64) return fmt::format("block_k = {} is not 32 or 64", c.block_k);
        if (c.warps_m < 1 || c.warps_n < 1 || c.warps_m * c.warps_n > 16)
            return fmt::format("warps_m x warps_n = {} x {} is not 1..16 warps", c.warps_m, c.warps_n);
        if (c.block_m % (16 * c.warps_m) != 0 || c.block_n % (16 * c.warps_n) != 0)
            return fmt::format("a warp's tile ({} / {}) x ({} / {}) is not a multiple of 16 x 16", c.block_m,
                               c.warps_m, c.block_n, c.warps_n);
        // fp32 accumulators per thread; past 128 the kernel spills.
        if ((c.block_m / c.warps_m) * (c.block_n / c.warps_n) / 32 > 128)
            return fmt::format("a warp's tile {} x {} needs more than 128 accumulators a thread",
                               c.block_m / c.warps_m, c.block_n / c.warps_n);
    } else {
        if (device.sm() != 90) return fmt::format("kernel 1 (wgmma, TMA) needs sm_90, the device is {}", device.arch());
        if (c.vec != 8) return "kernel 1 (TMA) needs vec = 8 (16-byte aligned rows)";
        if (c.consumers != 1 && c.consumers != 2) return fmt::format("consumers = {} is not 1 or 2", c.consumers);
        if (c.pingpong != 0 && c.pingpong != 1) return fmt::format("pingpong = {} is not 0 or 1", c.pingpong);
        if (c.pingpong && c.consumers != 2) return fmt::format("pingpong = 1 needs consumers = 2, got {}", c.consumers);
        if (c.pingpong && c.split_k != 1) return fmt::format("pingpong = 1 needs split_k = 1, got {}", c.split_k);
        // Each consumer warpgroup multiplies this many rows: its share of a tile, or whole tiles in turn.
        const int rows = c.pingpong ? c.block_m : c.block_m / c.consumers;
        if (c.block_m % c.consumers != 0 || (rows != 64 && rows != 128))
            return c.pingpong ? fmt::format("block_m = {} with pingpong is not 64 or 128", c.block_m)
                              : fmt::format("block_m / consumers = {} / {} is not 64 or 128", c.block_m, c.consumers);
        if (c.block_n != 32 && c.block_n != 64 && (c.block_n < 96 || c.block_n > 256 || c.block_n % 32 != 0))
            return fmt::format("block_n = {} is not 32, 64, 96, 128, 160, 192, 224 or 256 (the wgmma widths instantiated)",
                               c.block_n);
        if (c.cluster != 1 && c.cluster != 2) return fmt::format("cluster = {} is not 1 or 2", c.cluster);
        if (c.cluster == 2 && !s.b_nt && c.block_n % 128 != 0)
            return fmt::format("cluster = 2 with layout nn needs block_n a multiple of 128, got {}", c.block_n);
        if (!s.b_nt && c.block_n % 64 != 0)
            return fmt::format("block_n = {} with layout nn: B is loaded in boxes of 64 columns", c.block_n);
        if (c.block_k != 64) return fmt::format("block_k = {} is not 64 (one 128-byte swizzled row)", c.block_k);
        if (rows * c.block_n / 128 > 128)
            return fmt::format("a consumer's tile {} x {} needs more than 128 accumulators a thread", rows, c.block_n);
        if (c.split_k < 1 || c.split_k > kGemmMaxSplitK) return fmt::format("split_k = {} is not in [1, {}]", c.split_k, kGemmMaxSplitK);
        if (c.split_k > 1 && c.cluster != 1) return fmt::format("split_k = {} needs cluster = 1", c.split_k);
        if (c.split_k > ceil_div(s.k, c.block_k))
            return fmt::format("split_k = {} is more than the {} K steps of {}", c.split_k, ceil_div(s.k, c.block_k), c.block_k);
    }
    if (gemm_tiles(c, s) / s.batch > 0x7fffffffLL) return "too many tiles for one launch";
    return std::nullopt;
}

GemmConfig gemm_sm80_heuristic(const GemmShape& s, const DeviceInfo& device) {
    struct Candidate {
        int bm, bn, bk, wm, wn, stages;
    };
    // Largest tiles first (least traffic per MMA); the first that still gives most SMs a block wins.
    const Candidate candidates[] = {{128, 256, 32, 2, 4, 3}, {128, 128, 32, 2, 2, 4}, {64, 128, 32, 2, 2, 4},
                                    {64, 64, 64, 2, 2, 4},   {32, 64, 64, 2, 2, 4},   {16, 64, 64, 1, 4, 4},
                                    {16, 32, 64, 1, 2, 4}};
    const int max_m = useful_block_m(s.m);
    GemmConfig best;
    bool found = false;
    for (const Candidate& cand : candidates) {
        if (cand.bm > max_m) continue;
        GemmConfig c;
        c.kernel = kGemmSm80;
        c.block_m = cand.bm, c.block_n = cand.bn, c.block_k = cand.bk;
        c.warps_m = cand.wm, c.warps_n = cand.wn, c.stages = cand.stages;
        if (!shorten_ring_to_fit(c, s, device)) continue;
        best = c;
        found = true;
        if (gemm_tiles(c, s) * 5 >= int64_t{device.sm_count} * 4) break;
    }
    if (!found) best = GemmConfig{kGemmSm80, 64, 64, 32, 2, 2, 2, 2, 8, 8};
    return best;
}

// The skinny kernel's base config in the search space: the fewest rows of A that cover M (16 at least), 16 columns of D
// per block (the most blocks), 8 warps, 2 stages. Layout NN takes 32 columns and 4 warps: a block reads 2 * block_n
// bytes of each row of B a K step, and at 16 columns those 32 bytes, at any offset, span three 16-byte chunks
// (H200, 1 x 50257 x 768: 102.3 us against 74.9, where the TMA kernel with B copied takes 79.7; 16 x 50257 x 768:
// 103.3 against 82.3 and 83.7).
GemmConfig gemm_skinny_heuristic(const GemmShape& s) {
    GemmConfig c;
    c.kernel = kGemmSkinny;
    c.block_m = useful_block_m(s.m), c.block_n = s.b_nt ? 16 : 32, c.block_k = 64, c.group_m = 1;
    c.warps = s.b_nt ? 8 : 4, c.stages = 2, c.vec = 8;
    return c;
}

std::optional<GemmConfig> gemm_gemv_heuristic(const GemmShape& s, const DeviceInfo& device) {
    if (s.m > kGemmGemvMaxM || device.sm() < 80) return std::nullopt;
    GemmConfig c;
    c.kernel = kGemmGemv;
    c.block_m = s.m == 1 ? 1 : s.m == 2 ? 2 : 4, c.block_k = 8, c.group_m = 1, c.vec = 8, c.warps = 8;
    // H100, against cuBLAS in the same run (us): NT 16 rows of B a block, 4 chunks in flight a lane
    // (1 x 4096 x 4095 21.7 / 22.6, 1 x 14336 x 4095 53.0 / 53.0; 8 in flight 22.8 and 58.1); NN
    // 248 columns, 8 in flight (1 x 50257 x 768 38.4 / 37.7, 2 x 151655 x 896 138.0 / 109.9).
    c.block_n = s.b_nt ? 16 : 248, c.stages = s.b_nt ? 4 : 8;
    // Where N leaves SMs without a block, NN spreads a block's rows over 16 warps. Where it leaves
    // most of them idle, sm_90 splits K over up to 8 blocks of a cluster (8 warps each), and older
    // GPUs take 16 warps; then both narrow the blocks (248 -> 120 -> 56 columns) if SMs are still
    // idle. NT takes 8 rows of B a block. H100, us (cuBLAS): 1 x 4096 x 14335 (17 blocks of 248)
    // split over 8 blocks of 8 warps 57.8, of 16 warps 75.8; 120 columns over 4 blocks 81.4; 56
    // columns unsplit, 16 warps 90.1 (64.5). 3 x 4096 x 14335: 83.8, 112.6, 56 unsplit 123.6
    // (101.3). 1 x 32001 x 4096 (130 blocks): unsplit, 16 warps 96.7; split in 2, 8 warps 95.1,
    // 16 warps 105.0 (151.9).
    const auto blocks = [&] { return gemm_tiles(c, s) * c.cluster; };
    if (!s.b_nt && blocks() < device.sm_count) {
        if (blocks() * 2 >= device.sm_count || device.sm() != 90) c.warps = 16;
        if (blocks() * 2 < device.sm_count) {
            if (device.sm() == 90)
                while (c.cluster < 8 && blocks() < device.sm_count) c.cluster *= 2;
            while (c.block_n > 56 && blocks() < device.sm_count) c.block_n = (c.block_n + 8) / 2 - 8;
        }
    }
    // NT at 3-4 rows of A: a block stages 4 x K elements of A, a quarter of what 16 rows of B
    // bring it, so 32 rows a block, where that still gives every SM two blocks. H100, aligned rows
    // forced onto this kernel (us, 16 rows / 32): 3 x 28672 x 4096 145.8 / 123.9, 3 x 16384 x 4096
    // 88.1 / 75.7, 3 x 51865 x 1280 111.7 / 98.4, 3 x 12288 x 4096 67.9 / 60.2; below two blocks
    // an SM 32 rows lose (3 x 4544 x 4544 44.6 / 51.6, 3 x 5120 x 2048 21.7 / 25.2).
    if (s.b_nt && c.block_m == 4) {
        c.block_n = 32;
        if (blocks() < 2 * int64_t{device.sm_count}) c.block_n = 16;
    }
    if (s.b_nt && blocks() < device.sm_count) c.block_n = 8;
    if (gemm_invalid_reason(c, s, device)) return std::nullopt;
    return c;
}

GemmConfig gemm_heuristic(const GemmShape& s, const DeviceInfo& device) {
    // Few rows of A against rows off 16 bytes (an odd K, a padded leading dimension): the other
    // kernels copy A and B into aligned rows first, three times the bytes of a product bound by
    // reading B; the gemv kernel (M <= 4) and the skinny kernel read them in place.
    if (!s.rows_aligned && s.m <= kGemmSkinnyInPlaceMaxM && device.sm() >= 80) {
        if (auto gemv = gemm_gemv_heuristic(s, device)) return *gemv;
        return gemm_skinny_heuristic(s);
    }
    if (device.sm() != 90) return gemm_sm80_heuristic(s, device);
    // Small M takes TMA tiles too, not the skinny kernel: since A's box holds only M's rows (TMA
    // zero-filled the rest slowly), 64 x 32 tiles run 16 x 4096 x 4096 in 17.0 us against the
    // skinny kernel's 20.0, and 64 x 64 ones 1 x 6144 x 4096 in 23.4 against 25.1 (H100, tuner).
    // The TMA kernel's tiles, with a rough relative efficiency per output element (bigger tiles
    // reuse each loaded byte more; measured on H100 at 4096^3: 128 x 256 ~ 690 TFLOP/s). The
    // widths between 128 and 256 fill the last wave (M = 512, N = 10240: 128 x 160 tiles are 256
    // blocks, two full waves of 132 SMs; 128 x 256 ones 160). Tuned on H100 at M = 512,
    // N = 28672: 128 x 224 179 us (its epilogue stores from registers), 128 x 128 169, and 163
    // with ping-pong, which needs two tiles a block (not in one wave).
    struct Tile {
        int bm, consumers, bn, pingpong;
        double efficiency;
    };
    std::vector<Tile> tiles = {{128, 2, 256, 0, 1.0}, {128, 2, 224, 0, 0.85}, {128, 2, 192, 0, 0.96},
                               {128, 2, 160, 0, 0.92}, {128, 2, 128, 0, 0.9},  {128, 2, 128, 1, 0.94},
                               {64, 1, 256, 0, 0.85},  {64, 1, 192, 0, 0.8},   {64, 1, 128, 0, 0.75},
                               {64, 1, 96, 0, 0.65},   {64, 1, 64, 0, 0.55},   {64, 1, 32, 0, 0.2}};
    const int max_m = std::max(64, useful_block_m(s.m));
    const int64_t sm_count = device.sm_count, k_steps = ceil_div(s.k, 64);
    // When the widest tiles leave SMs idle the problem is bound by how many SMs stream operands
    // and by each block's latency, not by MMA efficiency: the most blocks that still fit in one
    // wave win, tile size aside (H100, tuned: 1024^3 64 x 128, 128 blocks; M = 128, N = 10240:
    // 64 x 192, 108 blocks; M = 64, N = 4096: 64 x 32, 128 blocks). Splitting K (64-row tiles
    // only: splitting taller ones was slower) adds blocks at the cost of the partial sums, a
    // fixed time: about 30% of a wave where each split keeps 32 K steps, less the more it keeps
    // (255 x 2048 x 16384: 64 x 128 tiles split in two, 128 steps each, 32.4 us; 64 x 64 unsplit,
    // as many blocks, 46.2). A split needs 12 K steps. Each block streams its K steps of A's rows
    // and B's; past 8192 such rows a block, the bytes one SM streams count too. Tiles 32 wide
    // cost 30-40% of a wave, the more the longer K: their 4 KB stages keep too few bytes in
    // flight (H200, 16 x 4096 x 16384: 64 x 32 45.0 us, 64 x 64 split in two 39.1; at K = 4096
    // the two tie). Fitted to the one-wave problems of 131 tunes on an H200 (91 sweep shapes, 40
    // held out; heuristic over tuned, each tile at its best timed ring: geomean 1.020 -> 1.012,
    // within 10% 124 -> 129, worst 1.40 -> 1.24; docs/perf/gemm.md).
    // Otherwise the modelled time is waves x tile area / efficiency; the smallest wins.
    GemmConfig widest;
    widest.block_m = 128, widest.block_n = 256;
    const bool one_wave = gemm_tiles(widest, s) <= sm_count;
    // One wave of a problem with many FLOPs a byte (past the ~250 where an H100's or H200's
    // tensor cores and HBM balance) takes as long as one block's tile: the smallest MMA work a
    // block wins, and a consumer warpgroup alone on an SM does about 0.8 of what two do
    // (H200: 2048 x 896 x 4864, 64 x 256 tiles with one consumer, 128 blocks, 50.1 us; 128 x 128
    // with two, 112 blocks, 29.2. 512 x 1600 x 6400: 128 x 64 with two consumers, 100 blocks,
    // 22.7 us; 64 x 128 with one, 104 blocks, 24.8; 128 x 128 with two, 52 blocks, 35.1.
    // 512 x 3072 x 3072: 64 x 192 with one, 128 blocks, 18.5 us; 128 x 128 with two, 96, 21.0).
    // 128 x 64 tiles compete only there: their efficiency over several waves is not measured.
    const double flops = 2.0 * static_cast<double>(s.m) * s.n * s.k * s.batch;
    const double bytes = (static_cast<double>(s.m) * s.k + static_cast<double>(s.n) * s.k) * s.in_bytes * s.batch +
                         static_cast<double>(s.m) * s.n * s.out_bytes * s.batch;
    const bool tensor_bound = flops >= 256.0 * bytes;
    if (one_wave && tensor_bound) tiles.push_back({128, 2, 64, 0, /*efficiency: unused in one wave*/ 0.0});
    GemmConfig best;
    double best_score = 0;
    for (const auto& t : tiles) {
        if (t.bm > max_m || (t.pingpong && one_wave)) continue;
        GemmConfig c;
        c.kernel = kGemmSm90;
        c.block_m = t.bm, c.consumers = t.consumers, c.block_n = t.bn, c.block_k = 64, c.group_m = 8;
        c.pingpong = t.pingpong;
        // As many stages as fit: loads in flight are what feeds small-M problems (H100, M = 64,
        // N = K = 4096, 64 x 32 tiles: cuBLAS runs the same tiles with 16 stages).
        c.stages = kGemmSm90MaxStages;
        if (!shorten_ring_to_fit(c, s, device)) continue;
        // Tiles of 96-224 columns give stages up for the output boxes: from registers, their stores
        // were what held short-K problems back (H200, 4097 x 1152 x 896, 128 x 160 tiles: 25.7 us
        // against cuBLAS's 17.7).
        while (s.out_bytes == 2 && c.block_n > 64 && c.block_n % 64 != 0 && !gemm_sm90_stores_with_tma(s, c) &&
               c.stages > 2)
            --c.stages;
        const int64_t tile_count = gemm_tiles(c, s);
        for (int split : {1, 2, 3, 4, 6, 8}) {
            if (split > 1 && (t.bm > 64 || t.pingpong || k_steps < 8 * split)) break;
            const int64_t units = tile_count * split;
            double score;  // higher is better
            if (one_wave) {
                if (units > sm_count) break;
                // Ties: the tile that loads fewer bytes per MMA, the first listed.
                if (tensor_bound) {
                    score = -static_cast<double>(t.bm) * t.bn / (t.consumers == 2 ? 1.0 : 0.8) / split *
                            (split > 1 ? 1.3 : 1.0);
                } else {
                    if (split > 1 && k_steps < 12 * split) continue;
                    const double unit_steps = static_cast<double>(k_steps) / split;
                    const double split_cost = split > 1 ? (0.3 + 0.02 * split) * std::min(1.0, 32.0 / unit_steps) : 0.0;
                    const double rows_streamed = unit_steps * (gemm_a_box_rows(s.m, t.bm) + t.bn);
                    score = static_cast<double>(units) / sm_count - split_cost -
                            0.2 * std::max(0.0, rows_streamed / 8192 - 1.0) -
                            (t.bn == 32 ? 0.3 + 0.1 * static_cast<double>(k_steps) / 256 : 0.0);
                }
            } else {
                if (split > 1 && 2 * tile_count > sm_count) break;
                const double waves = static_cast<double>(ceil_div(units, sm_count)) / split;
                score = -waves * t.bm * t.bn / t.efficiency * (1.0 + 0.1 * (split - 1));
            }
            if (best.kernel != kGemmSm90 || score > best_score) best = c, best.split_k = split, best_score = score;
        }
    }
    return best.kernel == kGemmSm90 ? best : gemm_sm80_heuristic(s, device);
}

std::vector<GemmConfig> gemm_search_space(const GemmShape& s, const DeviceInfo& device) {
    std::vector<GemmConfig> space;
    auto add = [&](const GemmConfig& c) {
        if (gemm_invalid_reason(c, s, device)) return;
        for (const GemmConfig& other : space)
            if (other.to_config() == c.to_config()) return;
        space.push_back(c);
    };
    const int max_m = useful_block_m(s.m);
    // A curated list rather than a full product: each sm_80 kernel takes 1-3 s to compile, and
    // most combinations are dominated (warp tiles under 32 x 32 waste ldmatrix bandwidth, wide K
    // steps only pay for small tiles). Tiles with block_m above what M needs are skipped.
    const struct {
        int bm, bn, bk, wm, wn, stages;
    } sm80[] = {{128, 256, 32, 2, 4, 3}, {128, 256, 32, 2, 4, 4}, {256, 128, 32, 4, 2, 3}, {256, 128, 32, 4, 2, 4},
                {128, 128, 32, 2, 2, 3}, {128, 128, 32, 2, 2, 4}, {128, 128, 32, 2, 2, 5}, {128, 128, 64, 2, 2, 3},
                {128, 128, 32, 2, 4, 4}, {128, 64, 32, 2, 2, 4},  {64, 128, 32, 2, 2, 4},  {64, 128, 64, 2, 2, 3},
                {64, 256, 32, 1, 4, 4},  {64, 64, 64, 2, 2, 4},   {64, 64, 32, 2, 2, 5},   {32, 128, 64, 1, 4, 4},
                {32, 64, 64, 2, 2, 4},   {16, 64, 64, 1, 4, 4},   {16, 128, 64, 1, 4, 4},  {16, 256, 64, 1, 4, 3}};
    for (const auto& t : sm80) {
        if (t.bm > max_m) continue;
        GemmConfig c;
        c.kernel = kGemmSm80;
        c.block_m = t.bm, c.block_n = t.bn, c.block_k = t.bk, c.warps_m = t.wm, c.warps_n = t.wn, c.stages = t.stages;
        add(c);
    }
    // The skinny kernel (M <= 64), around its default. Shallow rings win on the
    // H100 (more blocks per SM: 1 x 4096 x 4096 took 19.2 us with 2 stages, 20.7 with 3; 64- and
    // 128-wide K steps alike, 128 never faster). Layout NN stops at 32 columns: 64 lost to 32 at
    // 1 and 16 x 50257 x 768 (H200, 82.6 against 74.9 us, 85.5 against 82.3), and their fragments'
    // 2-byte loads leave ptxas at the edge of spilling (4 bytes at 16 x 64, 4 warps, in some builds).
    if (s.m <= kGemmSkinnyMaxM && device.sm() >= 80)
        for (int bn : {16, 32, 64})
            for (int warps : {4, 8})
                for (int stages : {2, 3, 4}) {
                    if (!s.b_nt && bn == 64) continue;
                    GemmConfig c = gemm_skinny_heuristic(s);
                    c.block_n = bn, c.warps = warps, c.stages = stages;
                    add(c);
                }
    // The gemv kernel (M <= 4): 8 to 64 rows of B a block (NT) or 56 to 248 columns (NN), 8 or 16
    // warps, 2 to 8 chunks in flight a lane (NN 4 to 8: at 4 rows of A, ptxas fits NN's 2-chunk
    // kernels in 64 registers and spills).
    if (auto base = gemm_gemv_heuristic(s, device)) {
        const std::vector<int> widths = s.b_nt ? std::vector<int>{8, 16, 32, 64} : std::vector<int>{56, 120, 248};
        const std::vector<int> rings = s.b_nt ? std::vector<int>{2, 4, 8} : std::vector<int>{4, 6, 8};
        // NN on sm_90 splits K over 2, 4 or 8 blocks of a cluster where that makes at most two
        // blocks an SM, 8 chunks in flight (fewer were never ahead in NN: 4 x 50257 x 768, 8
        // 51.2 us, 4 54.5; H100).
        const int max_cluster = !s.b_nt && device.sm() == 90 ? 8 : 1;
        for (int bn : widths)
            for (int cluster = 1; cluster <= max_cluster; cluster *= 2) {
                GemmConfig c = *base;
                c.block_n = bn, c.cluster = cluster;
                if (cluster > 1 && gemm_tiles(c, s) * cluster > 2 * int64_t{device.sm_count}) break;
                for (int warps : {8, 16})
                    for (int stages : rings) {
                        if (cluster > 1 && stages != 8) continue;
                        c.warps = warps, c.stages = stages;
                        add(c);
                    }
            }
    }
    if (device.sm() == 90) {
        // TMA kernel: block_m, consumers, block_n, stages, pingpong (a stage of 128 x 256 is 48 KB;
        // with pingpong each consumer multiplies whole block_m x block_n tiles, in turn).
        const struct {
            int bm, consumers, bn, stages, pingpong;
        } sm90[] = {{128, 2, 256, 3, 0}, {128, 2, 256, 4, 0}, {128, 2, 224, 4, 0}, {128, 2, 192, 4, 0},
                    {128, 2, 160, 5, 0}, {128, 2, 128, 4, 0}, {128, 2, 128, 6, 0}, {256, 2, 128, 3, 0},
                    {256, 2, 128, 4, 0}, {128, 1, 128, 5, 0}, {128, 2, 128, 5, 1}, {128, 2, 128, 6, 1},
                    {64, 2, 256, 4, 1},  {64, 2, 192, 5, 1},  {64, 1, 256, 4, 0},  {64, 1, 192, 5, 0},
                    {64, 1, 128, 6, 0},  {64, 1, 128, 8, 0},  {64, 1, 96, 8, 0},   {64, 1, 96, 10, 0},
                    {64, 1, 64, 8, 0},   {64, 1, 64, 12, 0},  {64, 1, 32, 8, 0},   {64, 1, 32, 16, 0},
                    // cuBLAS's 1024^3 tile (ncu: nvjet_sm90_tst_128x64_64x8_1x2): 128 x 64, two
                    // consumers of 64 x 64 each; 1024^3 10.0 us against 10.6 for 64 x 128 (H100).
                    {128, 2, 64, 6, 0},  {128, 2, 64, 8, 0}};

        for (const auto& t : sm90) {
            if (t.bm > std::max(64, max_m)) continue;
            GemmConfig c;
            c.kernel = kGemmSm90;
            c.block_m = t.bm, c.consumers = t.consumers, c.block_n = t.bn, c.block_k = 64, c.stages = t.stages;
            c.pingpong = t.pingpong;
            add(c);
            // Split K where the tiles leave SMs idle.
            if (!c.pingpong && gemm_tiles(c, s) < device.sm_count)
                for (int split : {2, 4, 8}) {
                    c.split_k = split;
                    add(c);
                }
            c.split_k = 1;
            // Block pairs sharing B tiles: for tall tiles, and for short ones where there are few
            // (each SM streams its operands from L2 then, and the pair halves B's share).
            if (s.m >= 2 * t.bm && (t.bm >= 128 || gemm_tiles(c, s) <= 2 * device.sm_count)) {
                c.cluster = 2;
                add(c);
            }
        }
    }
    return space;
}

}  // namespace tileops::detail
