#include "ops/flash_attention/flash_attention_config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/op_model.hpp"

namespace tileops::detail {
namespace {

// The sm_90 kernel: 64 query rows per consumer warpgroup, plus a producer warpgroup. One consumer
// (64 rows) runs two blocks an SM.
int sm90_warps(int block_m) { return block_m / 16 + 4; }

// Shared memory holds rows of a head dim in whole 128-byte lines (64 elements): the sm_90 kernel's
// TMA boxes, the sm_80 kernel's swizzled rows.
size_t padded(long long head_dim) { return static_cast<size_t>((head_dim + 63) / 64 * 64); }

// Elements of q_tiles Q tiles (whose rows also stage the output rows) and the K and V rings.
size_t tile_elements(const FlashShape& s, const FlashConfig& c, int q_tiles) {
    const size_t q_row = std::max(padded(s.head_dim), padded(s.head_dim_v));
    return q_tiles * c.block_m * q_row + c.stages * c.block_n * (padded(s.head_dim) + padded(s.head_dim_v));
}

// Both head dims up to 64: the sm_90 kernel may run three consumers (192-row tiles).
bool small_head(const FlashShape& s) { return s.head_dim <= 64 && s.head_dim_v <= 64; }

// Head dims past these hold too many accumulators (V) or too much shared memory (Q and K) for
// 128-key tiles.
bool wide_head(const FlashShape& s) { return s.head_dim_v > 128 || s.head_dim > 192; }

// The heuristic's config for the sm_80 kernel.
FlashConfig flash_sm80_heuristic(const FlashShape& s) {
    FlashConfig c;
    c.kernel = kFlashSm80;
    c.stages = 2;
    if (wide_head(s)) {
        c.block_m = 64, c.block_n = 64, c.warps = 4;
    } else {
        c.block_m = 128, c.block_n = 64, c.warps = 8;
    }
    return c;
}

}  // namespace

FlashConfig FlashConfig::from(const Config& config) {
    const std::string op = "FlashAttention";
    FlashConfig c;
    c.kernel = static_cast<int>(config_value(config, "kernel", op));
    c.block_m = static_cast<int>(config_value(config, "block_m", op));
    c.block_n = static_cast<int>(config_value(config, "block_n", op));
    c.warps = static_cast<int>(config_value(config, "warps", op));
    c.stages = static_cast<int>(config_value(config, "stages", op));
    if (c.kernel == kFlashSm90) c.pingpong = static_cast<int>(config_value(config, "pingpong", op));
    return c;
}

Config FlashConfig::to_config() const {
    Config c{{"kernel", kernel}, {"block_m", block_m}, {"block_n", block_n}, {"warps", warps}, {"stages", stages}};
    if (kernel == kFlashSm90) c["pingpong"] = pingpong;
    return c;
}

// The sm_80 kernel: one Q tile and the K and V rings.
size_t FlashConfig::shared_bytes(const FlashShape& s) const {
    if (kernel != kFlashSm90) return tile_elements(s, *this, 1) * s.element_bytes;
    return sm90_shared_bytes(s, q_buffers(s));
}

// sm_90: Q_BUFFERS Q tiles and the K and V rings, then barriers (full/empty per Q and per K and
// V buffer, full/empty for the work slot) and the slot, and 1024 bytes to align the tiles to the
// swizzle's period (FlashSm90Layout::kBytes).
size_t FlashConfig::sm90_shared_bytes(const FlashShape& s, int q_tiles) const {
    return tile_elements(s, *this, q_tiles) * s.element_bytes + (2 * q_tiles + 3 + 4 * stages) * 8 + 1024;
}

// Two Q buffers let the producer load the next work tile's queries while the consumers still
// work on this one; where they do not fit in shared memory (large head dims, deep rings), one.
int FlashConfig::q_buffers(const FlashShape& s) const {
    return sm90_shared_bytes(s, 2) <= kSm90SharedBytes ? 2 : 1;
}

int FlashConfig::blocks_per_sm(const FlashShape& s, const DeviceInfo& device) const {
    if (kernel != kFlashSm90 || block_m != 64) return 1;
    // An SM's shared memory is what one block may opt into plus the 1 KB the driver reserves per
    // block; each resident block takes its own share and that reserve.
    constexpr size_t kReservedPerBlock = 1024;
    const size_t per_sm = static_cast<size_t>(std::max(device.max_shared_memory_per_block_optin, 0)) + kReservedPerBlock;
    return 2 * (shared_bytes(s) + kReservedPerBlock) <= per_sm ? 2 : 1;
}

Config flash_heuristic(const FlashShape& s, const DeviceInfo& device) {
    if (device.sm() != 90) return flash_sm80_heuristic(s).to_config();
    FlashConfig c;
    c.kernel = kFlashSm90;
    // Head dim 64, not causal, up to 512 queries: two 64-row blocks an SM with one consumer each
    // beat one 128-row block with two, whose prologue and epilogue the few key tiles do not hide
    // (H100, us, 128-row / 64-row: 64 x 20 heads x 128 tokens 32.9 / 31.0, x 256 79.8 / 74.4;
    // 32 x 8 x 300 31.9 / 30.7; 16 x 12 x 512 44.9 / 41.2). Longer, causal or wider heads lose.
    if (small_head(s) && !s.causal && s.seqlen_q <= 512) {
        c.block_m = 64, c.warps = sm90_warps(64), c.block_n = 128, c.stages = 2, c.pingpong = 0;
        return c.to_config();
    }
    // Head dim 64: three consumers hide the softmax better, except on short causal sequences,
    // where 192-row tiles waste more on the diagonal and past the end (H100, 1k causal: 128 rows
    // and three stages took 127 us, 192 rows 136-147).
    const bool short_causal_d64 = small_head(s) && s.causal && s.seqlen_q <= 1024;
    c.block_m = small_head(s) && !short_causal_d64 ? 192 : 128;
    c.warps = sm90_warps(c.block_m);
    c.block_n = wide_head(s) ? 64 : 128;
    c.stages = short_causal_d64 ? 3 : 2;
    c.pingpong = 1;
    return c.to_config();
}

std::vector<Config> flash_search_space(const FlashShape& s, const DeviceInfo& device) {
    std::vector<Config> space;
    auto add = [&](const FlashConfig& c) {
        const Config config = c.to_config();
        if (!flash_invalid_reason(s, config, device)) space.push_back(config);
    };
    // On sm_90 the TMA kernel takes every problem and the sm_80 kernel is only slower: not searched.
    if (device.sm() == 90) {
        for (int block_m : {64, 128, 192})
            for (int block_n : {64, 128})
                for (int stages : {2, 3})
                    for (int pingpong : {0, 1})
                        add({kFlashSm90, block_m, block_n, sm90_warps(block_m), stages, pingpong});
        return space;
    }
    for (int block_m : {64, 128})
        for (int block_n : {32, 64, 128})
            for (int warps : {4, 8})
                for (int stages : {2, 3}) add({kFlashSm80, block_m, block_n, warps, stages});
    return space;
}

std::optional<std::string> flash_invalid_reason(const FlashShape& s, const Config& config, const DeviceInfo& device) {
    FlashConfig c;
    try {
        c = FlashConfig::from(config);
    } catch (const std::exception& e) {
        return std::string(e.what());
    }
    if (c.kernel == kFlashSm90) {
        if (device.sm() != 90) return fmt::format("kernel 1 (TMA, wgmma) needs sm_90, the device is {}", device.arch());
        if (c.block_m != 128 && !(c.block_m == 192 && small_head(s)) && c.block_m != 64)
            return fmt::format("kernel 1: block_m = {} is not 64, 128 (or 192 at head dims up to 64)", c.block_m);
        if (c.block_m == 64 && (c.pingpong != 0 || s.head_dim_v > 192))
            return fmt::format("kernel 1: block_m = 64 (one consumer) takes no ping-pong and value head dims up to 192, "
                               "not pingpong = {} at {}", c.pingpong, s.head_dim_v);
        if (c.warps != sm90_warps(c.block_m))
            return fmt::format("kernel 1 runs {} query rows with {} warps, not {}", c.block_m, sm90_warps(c.block_m), c.warps);
        if (c.block_n != 64 && c.block_n != 128) return fmt::format("kernel 1: block_n = {} is not 64 or 128", c.block_n);
        if (c.stages < 2 || c.stages > 4) return fmt::format("kernel 1: stages = {} is not in [2, 4]", c.stages);
        if (c.pingpong != 0 && c.pingpong != 1) return fmt::format("kernel 1: pingpong = {} is not 0 or 1", c.pingpong);
    } else if (c.kernel == kFlashSm80) {
        if (device.sm() < 80) return fmt::format("kernel 0 (mma.sync) needs sm_80 or newer, the device is {}", device.arch());
        if (c.block_m != 64 && c.block_m != 128) return fmt::format("kernel 0: block_m = {} is not 64 or 128", c.block_m);
        if (c.block_n != 32 && c.block_n != 64 && c.block_n != 128)
            return fmt::format("kernel 0: block_n = {} is not 32, 64 or 128", c.block_n);
        if (c.warps != 4 && c.warps != 8) return fmt::format("kernel 0: warps = {} is not 4 or 8", c.warps);
        if (c.block_m % (16 * c.warps) != 0)
            return fmt::format("kernel 0: block_m = {} is not a multiple of 16 rows per warp ({} warps)", c.block_m, c.warps);
        if (c.stages < 2 || c.stages > 3) return fmt::format("kernel 0: stages = {} is not 2 or 3", c.stages);
        // Warps of 32 rows hold twice the accumulators: with 128-key tiles or value head dims past
        // 128 they spill.
        if (c.block_m / c.warps == 32 && (c.block_n == 128 || s.head_dim_v > 128))
            return fmt::format("kernel 0: warps of 32 rows spill registers with block_n = {} at value head dim {}",
                               c.block_n, s.head_dim_v);
    } else {
        return fmt::format("kernel = {} is not 0 (sm_80) or 1 (sm_90)", c.kernel);
    }
    const size_t shared = c.shared_bytes(s);
    if (shared > static_cast<size_t>(device.max_shared_memory_per_block_optin))
        return fmt::format("needs {} bytes of shared memory, the device allows {}", shared,
                           device.max_shared_memory_per_block_optin);
    return std::nullopt;
}

}  // namespace tileops::detail
