#include "ops/decode_attention/decode_attention_config.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/kv_chunks.hpp"
#include "core/op_model.hpp"
#include "tileops/decode_attention.hpp"
#include "tileops/tensor.hpp"

namespace tileops::detail {
namespace {

long long next_power_of_two(long long n) {
    long long p = 1;
    while (p < n) p <<= 1;
    return p;
}

bool is_power_of_two_up_to(long long value, long long limit) {
    return value >= 1 && value <= limit && (value & (value - 1)) == 0;
}

// Must match decode_attention_mma.cuh (DecodeTileRows): elements from one row of the tensor-core
// kernel's shared tiles to the next, the head dim padded by a 16-byte chunk unless its chunks are
// a power of two from 4 to 32 (swizzled instead).
long long mma_row_stride(long long head_dim) {
    const long long chunks = head_dim / 8;
    return chunks >= 4 && is_power_of_two_up_to(chunks, 32) ? head_dim : head_dim + 8;
}

// Must match decode_attention.cuh (DecodeLanes): the width of the CUDA-core kernel's query tile,
// the head dim rounded up to a power-of-two number of 16-byte slices of the cache.
long long cuda_core_query_width(const DecodeShape& s) {
    const long long vec = 16 / (s.fp8_cache ? 1 : s.element_bytes);
    return next_power_of_two(s.head_dim / vec) * vec;
}

// What a kernel may declare statically (beyond it, shared memory must be dynamic).
constexpr size_t kMaxStaticSharedBytes = 48 * 1024;

// A split shorter than this spends more on its merge than it saves.
constexpr long long kMinTokensPerSplit = 128;
constexpr long long kMaxSplits = 256;

// The CUDA-core kernel's most rows a CTA: 8, or 4 over an fp8 cache, whose keys widened for 8 rows
// spill 380-2600 bytes (ptxas, sm_80 and sm_90a, head dim 128, every unroll).
long long max_cuda_core_rows(const DecodeShape& s) { return s.fp8_cache ? 4 : 8; }

// The CUDA-core kernel's rows per CTA: the KV head's rows, rounded up to a power of two, at most
// the above.
long long cuda_core_rows(const DecodeShape& s) {
    return std::min(max_cuda_core_rows(s), next_power_of_two(s.rows_per_kv_head()));
}

long long max_useful_splits(const DecodeShape& s) {
    return std::clamp((s.max_kv_len + kMinTokensPerSplit - 1) / kMinTokensPerSplit, 1LL, kMaxSplits);
}

}  // namespace

DecodeShape decode_shape(const DecodeAttentionProblem& p) {
    return {p.batch, p.num_heads, p.num_kv_heads, p.head_dim, p.q_len, p.max_kv_len, p.page_size,
            static_cast<int>(dtype_size(p.dtype)), p.kv_dtype == DType::fp8_e4m3};
}

DecodeLaunch decode_launch(const DecodeShape& shape, const Config& config) {
    const std::string op = "decode_attention";
    DecodeLaunch l{};
    l.kernel = static_cast<int>(config_value(config, "kernel", op));
    l.warps = static_cast<int>(config_value(config, "warps", op));
    l.stages = static_cast<int>(config_value(config, "stages", op));
    l.splits = static_cast<int>(config_value(config, "splits", op));
    l.balanced = decode_balanced(shape);
    l.split_ctas = l.balanced ? l.splits + 1LL : l.splits;
    size_t ring = 0;
    if (l.kernel == kDecodeTensorCores) {
        const auto row_warps = config.find("row_warps");
        l.row_warps = row_warps != config.end() && row_warps->second != 0;
        l.rows = l.row_warps ? kDecodeMmaRows * l.warps : kDecodeMmaRows;
        l.tile = static_cast<int>(config_value(config, "tile", op));
        // Must match decode_attention_mma.cuh: per ring and stage, a tile of keys and one of
        // values, and a word of valid pages (a ring per warp, or one for the CTA with row_warps);
        // an fp8 cache's tiles are dense codes, and each warp has a tile of keys and one of values
        // widened to 16 bits. The query tile, of the CTA's rows, is static.
        const long long row_stride = mma_row_stride(shape.head_dim);
        const long long tile_bytes = l.tile * row_stride * shape.element_bytes;
        const size_t rings = l.row_warps ? 1 : static_cast<size_t>(l.warps);
        ring = shape.fp8_cache ? rings * l.stages * (2 * l.tile * shape.head_dim + 4) + l.warps * 2 * tile_bytes
                               : rings * l.stages * (2 * tile_bytes + 4);
        l.static_shared_bytes = static_cast<size_t>(l.rows) * row_stride * shape.element_bytes;
    } else {
        l.rows = static_cast<int>(config_value(config, "rows", op));
        l.unroll = static_cast<int>(config_value(config, "unroll", op));
        // Must match decode_attention.cuh: 16 bytes per lane, key and value, per unroll step and
        // stage, plus a byte of flags per lane and stage; the query tile (fp32) is static.
        ring = static_cast<size_t>(l.warps) * l.stages * 32 * (l.unroll * 2 * 16 + 1);
        l.static_shared_bytes = static_cast<size_t>(l.rows) * cuda_core_query_width(shape) * sizeof(float);
    }
    l.static_shared_bytes += kKvChunkSharedBytes;  // finding a CTA's chunk of a balanced batch
    l.row_blocks = l.rows > 0 ? (shape.rows_per_kv_head() + l.rows - 1) / l.rows : 0;
    // The ring is reused for the partial results: one a warp, or one for the CTA with row_warps.
    const size_t parts = l.row_warps ? 1 : static_cast<size_t>(l.warps);
    const size_t partial = parts * l.rows * (shape.head_dim + 2) * sizeof(float);
    l.dynamic_shared_bytes = std::max(ring, partial);
    return l;
}

namespace {

// Splits for a grid of `ctas` CTAs (batch x kv heads x row blocks): the most that keep the whole
// grid in one wave of one CTA per SM, i.e. every sequence's KV spread over the SMs once. The tuned
// H100 problems agree: batch 1 x 8 KV heads took 16 splits at 1k-64k tokens (29, two CTAs per SM,
// was 20% slower at 4k: twice the partial results to merge), 1 x 32 MHA heads 4, batch 8 x 8 1-2.
long long heuristic_splits(const DecodeShape& s, long long ctas, const DeviceInfo& device) {
    return std::clamp<long long>(std::max(device.sm_count, 1) / std::max(ctas, 1LL), 1, max_useful_splits(s));
}

// The tensor-core kernel copies rows whose 16-byte chunks are neither a power of two nor a multiple
// of 8 (decode_attention_mma.cuh: 80, 96, 112, 160, ...; fp8 codes: 96, 160, 192, ...) chunk by
// chunk, each copy's row and column computed: past head dim 128 that and 32-key tiles overflow the
// registers (ptxas, sm_90a: 8-96 bytes of spills over a contiguous 16-bit cache, 68-312 paged;
// 120-128 at 192 over fp8).
bool tile_spills(const DecodeShape& s, long long tile) {
    const long long chunks = s.head_dim / (s.fp8_cache ? 16 : 8), line_chunks = chunks & -chunks;
    return tile == 32 && s.head_dim > 128 && line_chunks != chunks && line_chunks < 8;
}

// Why the tensor-core kernel cannot stream an fp8 cache in tiles of `tile` keys (nullopt: it can).
// Must match decode_attention_mma.cuh: a tile's 16-byte chunks of codes are a whole number of
// copies of the warp, and a copy of whole rows stays in one tile.
std::optional<std::string> fp8_tile_refusal(const DecodeShape& s, long long tile) {
    if (!s.fp8_cache) return std::nullopt;
    if (s.head_dim < 32) return fmt::format("kernel 1 over an fp8 cache needs head dim 32 or more, not {}", s.head_dim);
    if (tile * s.head_dim / 16 % 32 != 0)
        return fmt::format("kernel 1 over an fp8 cache: {} keys of head dim {} are not whole 16-byte copies of a warp "
                           "(tile = 32 is)",
                           tile, s.head_dim);
    return std::nullopt;
}

// Why the tensor-core kernel cannot split the rows over `warps` warps with tiles of `tile` keys
// (nullopt: it can). Must match decode_attention_mma.cuh: the warps share a tile's 16-byte copies
// evenly.
std::optional<std::string> row_warps_refusal(const DecodeShape& s, long long tile, long long warps) {
    const long long copies = tile * s.head_dim / (s.fp8_cache ? 16 : 8) / 32;  // a warp's copies of a tile
    if (warps < 2) return fmt::format("row_warps needs 2 warps or more, not {}", warps);
    if (copies % warps != 0)
        return fmt::format("row_warps: the {} copies of a warp per tile ({} keys, head dim {}) do not split over {} warps",
                           copies, tile, s.head_dim, warps);
    return std::nullopt;
}

}  // namespace

Config decode_heuristic(const DecodeShape& s, const DeviceInfo& device) {
    // The tensor-core kernel for several rows per KV head (GQA, speculative tokens), and for one
    // row (MHA) once batch x kv heads fills the GPU without splits (H100, tuned: 8 x 32 x 4k MHA
    // 177 us against 205 on CUDA cores; 1 x 32 x 16k kept the CUDA cores, 100 us).
    //
    // Over an fp8 cache the tensor cores widen every tile first, and win only where the CUDA-core
    // kernel would re-read the keys for several row blocks (more than 8 rows a KV head), or where
    // GQA batches fill the GPU without splits (H200, tuned: 32 x 32/8 x 4k 122 us and 64 x 32/8 x 8k
    // 456 us on tensor cores; 1 x 32/8 x 64k 69 us and 8 x 32/8 x 16k 133 us on CUDA cores, against
    // 100 and 186 on tensor cores; MHA at batch 16-64 3-8% faster on CUDA cores). Past head dim 128
    // the tensor-core kernel runs two warps and the GQA rule does not hold (H200, held-out tune,
    // 128 x 16/8 x 2k, head dim 256, pages of 64: 337 us on CUDA cores, 620 on tensor cores).
    const bool fills = s.batch * s.num_kv_heads >= device.sm_count;
    const bool mma = s.fp8_cache ? s.rows_per_kv_head() > 8 || (s.rows_per_kv_head() >= 2 && fills && s.head_dim <= 128)
                                 : s.rows_per_kv_head() >= 2 || fills;
    // Tiles of 16 keys, or of 32 where an fp8 cache's 16 keys are not whole copies (head dims 80, 112).
    const long long tile = fp8_tile_refusal(s, 16) ? 32 : 16;
    if (mma && device.sm() >= 80 && !fp8_tile_refusal(s, tile) && !tile_spills(s, tile)) {
        // A ring of about 96 KB or less: three stages of 16 keys for four warps up to head dim 128,
        // for two warps above. Over an fp8 cache four warps take two stages (72 KB a CTA at head
        // dim 128), so three CTAs share an SM (the kernel's launch bounds; H200, 256 x 32/8 x 4k:
        // 734 us against 866-874 with three stages or two CTAs an SM; paged batches within 2%).
        // One row per KV head in a balanced batch (MHA decode): every CTA streams one chunk for one
        // useful MMA row, and chunks are short where the batch is (a long sequence among short
        // turns: about 130 keys a CTA). Two warps on a two-stage ring halve what a CTA spends
        // before its first key (H200, tuned, 256 x 32/32 x 1k fp16: 223 us against 436 with four
        // warps and three stages on one long sequence among turns, 969 against 1011 on uniform
        // lengths).
        const bool one_row_chunks = !s.fp8_cache && decode_balanced(s) && s.rows_per_kv_head() == 1 && s.head_dim <= 128;
        const long long warps = s.head_dim <= 128 && !one_row_chunks ? 4 : 2;
        const long long stages = (s.fp8_cache && warps == 4 && tile == 16) || one_row_chunks ? 2 : 3;
        // (row_warps stays the tuner's: on an H100 it lost on most batches with more than 16 rows
        // a KV head; docs/perf/decode_attention.md.)
        const Config config{{"kernel", kDecodeTensorCores}, {"warps", warps}, {"tile", tile}, {"stages", stages}, {"splits", 1}};
        const DecodeLaunch l = decode_launch(s, config);
        Config with_splits = config;
        with_splits["splits"] = heuristic_splits(s, s.batch * s.num_kv_heads * l.row_blocks, device);
        return with_splits;
    }
    const long long rows = cuda_core_rows(s);
    // Loads run (stages - 1) x unroll steps ahead; many rows need registers for the scores. Two
    // stages of 8 warps beat deeper rings of fewer warps on the H100 (more CTAs fit per SM).
    const long long unroll = rows <= 2 ? 4 : 2;
    const long long ctas = s.batch * s.num_kv_heads * ((s.rows_per_kv_head() + rows - 1) / rows);
    return {{"kernel", kDecodeCudaCores}, {"rows", rows}, {"warps", 8}, {"unroll", unroll}, {"stages", 2},
            {"splits", heuristic_splits(s, ctas, device)}};
}

std::vector<Config> decode_search_space(const DecodeShape& s, const DeviceInfo& device) {
    std::vector<long long> split_options;
    for (long long splits = 1; splits <= max_useful_splits(s); splits *= 2) split_options.push_back(splits);
    const Config heuristic = decode_heuristic(s, device);
    if (std::find(split_options.begin(), split_options.end(), heuristic.at("splits")) == split_options.end())
        split_options.push_back(heuristic.at("splits"));

    std::vector<Config> configs;
    const long long rows0 = cuda_core_rows(s);
    std::vector<long long> row_options{rows0};
    if (rows0 > 1) row_options.push_back(rows0 / 2);
    for (long long rows : row_options)
        for (long long warps : {4, 8})
            for (long long unroll : {1, 2, 4})
                for (long long stages : {2, 4})
                    for (long long splits : split_options)
                        configs.push_back({{"kernel", kDecodeCudaCores}, {"rows", rows}, {"warps", warps}, {"unroll", unroll},
                                           {"stages", stages}, {"splits", splits}});
    // The tensor-core kernel pads a KV head's rows to 16; the MMAs per key are the same for one
    // row as for sixteen, so it is tried for MHA too.
    // Where a KV head has more than 16 rows, also with the warps splitting the rows: as many as
    // the rows fill at least in part.
    const bool split_rows = s.rows_per_kv_head() > kDecodeMmaRows;
    if (device.sm() >= 80)
        for (long long warps : {2, 4, 8})
            for (long long tile : {16, 32})
                for (long long stages : {2, 3, 4})
                    for (long long splits : split_options) {
                        if (tile_spills(s, tile) || fp8_tile_refusal(s, tile)) continue;
                        configs.push_back({{"kernel", kDecodeTensorCores}, {"warps", warps}, {"tile", tile},
                                           {"stages", stages}, {"splits", splits}});
                        if (split_rows && kDecodeMmaRows * (warps / 2) < s.rows_per_kv_head() &&
                            !row_warps_refusal(s, tile, warps))
                            configs.push_back({{"kernel", kDecodeTensorCores}, {"warps", warps}, {"tile", tile},
                                               {"stages", stages}, {"splits", splits}, {"row_warps", 1}});
                    }
    return configs;
}

std::optional<std::string> decode_invalid_reason(const DecodeShape& s, const Config& config, const DeviceInfo& device) {
    if (config.find("kernel") == config.end()) return "config has no 'kernel'";
    const long long kernel = config.at("kernel");
    if (kernel != kDecodeCudaCores && kernel != kDecodeTensorCores)
        return fmt::format("kernel = {} is not 0 (CUDA cores) or 1 (tensor cores)", kernel);
    const std::vector<const char*> keys = kernel == kDecodeTensorCores
                                              ? std::vector<const char*>{"warps", "tile", "stages", "splits"}
                                              : std::vector<const char*>{"rows", "warps", "unroll", "stages", "splits"};
    for (const char* key : keys)
        if (config.find(key) == config.end()) return fmt::format("config has no '{}'", key);
    const DecodeLaunch l = decode_launch(s, config);
    if (!is_power_of_two_up_to(l.warps, 16)) return fmt::format("warps = {} is not a power of two <= 16", l.warps);
    if (l.stages < 2 || l.stages > 8) return fmt::format("stages = {} is not in [2, 8]", l.stages);
    if (kernel == kDecodeTensorCores) {
        if (device.sm() < 80) return fmt::format("kernel 1 (mma.sync) needs sm_80 or newer, the device is {}", device.arch());
        if (l.tile != 16 && l.tile != 32) return fmt::format("tile = {} is not 16 or 32", l.tile);
        if (auto refusal = fp8_tile_refusal(s, l.tile)) return refusal;
        if (tile_spills(s, l.tile)) return fmt::format("kernel 1: tiles of 32 keys spill registers at head dim {}", s.head_dim);
        if (l.warps > 8) return fmt::format("kernel 1: warps = {} is more than 8 (registers)", l.warps);
        if (config.count("row_warps")) {
            const long long row_warps = config.at("row_warps");
            if (row_warps != 0 && row_warps != 1) return fmt::format("row_warps = {} is not 0 or 1", row_warps);
            if (row_warps == 1)
                if (auto refusal = row_warps_refusal(s, l.tile, l.warps)) return refusal;
        }
        // The query tile is static shared memory, of which a kernel may declare 48 KB.
        if (l.static_shared_bytes > kMaxStaticSharedBytes)
            return fmt::format("kernel 1: the query tile of {} rows needs {} bytes of static shared memory, more than {}",
                               l.rows, l.static_shared_bytes, kMaxStaticSharedBytes);
    } else {
        if (config.count("row_warps")) return "row_warps is a tunable of kernel 1 (tensor cores) only";
        if (device.sm() < 80) return fmt::format("kernel 0 (cp.async) needs sm_80 or newer, the device is {}", device.arch());
        if (!is_power_of_two_up_to(l.rows, 8)) return fmt::format("rows = {} is not 1, 2, 4 or 8", l.rows);
        if (l.rows > max_cuda_core_rows(s))
            return fmt::format("kernel 0: rows = {} over an fp8 cache spill registers (at most {})", l.rows, max_cuda_core_rows(s));
        if (!is_power_of_two_up_to(l.unroll, 8)) return fmt::format("unroll = {} is not 1, 2, 4 or 8", l.unroll);
        if (l.rows * l.unroll > 32) return fmt::format("rows x unroll = {} scores per lane would spill", l.rows * l.unroll);
    }
    if (l.splits < 1 || l.splits > 1024) return fmt::format("splits = {} is not in [1, 1024]", l.splits);
    if (s.num_kv_heads * l.row_blocks > 65535) return "kv heads x row blocks exceeds the grid's y limit (65535)";
    const size_t shared = l.dynamic_shared_bytes + l.static_shared_bytes;
    if (device.max_shared_memory_per_block_optin > 0 && shared > static_cast<size_t>(device.max_shared_memory_per_block_optin))
        return fmt::format("needs {} bytes of shared memory, the device allows {}", shared,
                           device.max_shared_memory_per_block_optin);
    return std::nullopt;
}

size_t decode_workspace_bytes(const DecodeShape& s, const DecodeLaunch& l) {
    if (l.split_ctas <= 1) return 0;
    const size_t slots = static_cast<size_t>(s.batch * s.num_kv_heads * l.row_blocks);
    const size_t partial_rows = slots * static_cast<size_t>(l.split_ctas) * l.rows;
    return (partial_rows * (s.head_dim + 1) + slots) * sizeof(float);
}

}  // namespace tileops::detail
