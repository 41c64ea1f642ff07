#include "ops/rows/row_config.hpp"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "tileops/error.hpp"

namespace tileops::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int next_pow2(int64_t n) {
    int p = 1;
    while (p < n && p < (1 << 30)) p <<= 1;
    return p;
}

bool is_pow2(long long n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

RowConfig RowConfig::from(const Config& config, const std::string& op) {
    RowConfig row;
    row.threads_per_row = static_cast<int>(config_value(config, "threads_per_row", op));
    row.rows_per_block = static_cast<int>(config_value(config, "rows_per_block", op));
    row.vec = static_cast<int>(config_value(config, "vec", op));
    row.items = static_cast<int>(config_value(config, "items", op));
    row.cluster = static_cast<int>(config_value(config, "cluster", op));
    if (auto it = config.find("prefetch"); it != config.end()) row.prefetch = static_cast<int>(it->second);
    if (config.count("slots")) row.slots = static_cast<int>(config_value(config, "slots", op));
    if (config.count("split")) row.split = static_cast<int>(config_value(config, "split", op));
    return row;
}

Config RowConfig::to_config() const {
    Config config{{"threads_per_row", threads_per_row}, {"rows_per_block", rows_per_block}, {"vec", vec},
                  {"items", items}, {"cluster", cluster}, {"prefetch", prefetch}};
    if (slots > 0) config["slots"] = slots;  // absent in the register kernels' configs
    if (split > 0) config["split"] = split;
    return config;
}

namespace {

// Vectors a thread may hold at `vec` elements of `element_bytes` in a block of `block_threads`.
int max_items(int vec, size_t element_bytes, int block_threads) {
    return held_bytes_limit(block_threads) / static_cast<int>(vec * element_bytes);
}

// Shared memory of the two prefetch stages of a block at vector width `vec`.
int64_t prefetch_bytes(const RowConfig& c, int vec, RowInputs inputs) {
    return 2 * int64_t{inputs.count} * c.items * c.threads_per_row * c.rows_per_block * vec *
           static_cast<int64_t>(inputs.element_bytes);
}

// Shared memory of the resident slots of a CTA at vector width `vec` (they hold the input type).
int64_t resident_slot_bytes(const RowConfig& c, int vec, RowInputs inputs) {
    return int64_t{c.slots} * c.threads_per_row * vec * static_cast<int64_t>(inputs.element_bytes);
}

// Static shared memory a resident kernel may use beside its slots (the RowReducer's).
constexpr int64_t kResidentStaticShared = 1024;
// Longest unrolled loop over a thread's vectors (registers and slots) in a resident kernel.
constexpr int kMaxResidentVectors = 32;

std::optional<std::string> resident_invalid_reason(const RowConfig& c, int64_t cols, RowInputs inputs,
                                                   const DeviceInfo& device) {
    if (inputs.count != 1) return "the resident kernels read one input row (no residual add)";
    if (c.rows_per_block != 1 || c.prefetch != 0) return "slots need rows_per_block = 1 and prefetch = 0";
    if (device.sm() < 80) return "slots need cp.async (sm_80 or newer)";
    if (c.vec * inputs.element_bytes < 4) return "slots need vectors of at least 4 bytes (cp.async)";
    const int64_t held = int64_t{c.items} * c.vec * static_cast<int64_t>(inputs.element_bytes);
    if (c.items < 0 || held > resident_held_bytes_limit(c.threads_per_row))
        return fmt::format("items x vec = {} x {} holds more than {} bytes per thread at {} threads next to slots "
                           "(it would spill)",
                           c.items, c.vec, resident_held_bytes_limit(c.threads_per_row), c.threads_per_row);
    if (c.items + c.slots > kMaxResidentVectors)
        return fmt::format("items + slots = {} exceeds {} vectors per thread", c.items + c.slots, kMaxResidentVectors);
    if (const int64_t bytes = resident_slot_bytes(c, c.vec, inputs);
        bytes + kResidentStaticShared > device.max_shared_memory_per_block_optin)
        return fmt::format("slots need {} bytes of shared memory, more than the {} a block may have", bytes,
                           device.max_shared_memory_per_block_optin - kResidentStaticShared);
    if (const int64_t held_cols = int64_t{c.cluster} * c.threads_per_row * c.vec * (c.items + c.slots); held_cols < cols)
        return fmt::format("holds {} elements per row, fewer than cols = {}", held_cols, cols);
    return std::nullopt;
}

// Rows of one input from `min_row_bytes` (past 128 KB; from 96 KB for ops that reread their rows,
// RowOpModel::heuristic) to 512 KB: the resident kernel, 1024-thread
// CTAs holding 32 bytes a thread in registers and the rest of their chunk in shared memory, in the
// smallest cluster whose CTAs' chunks fit. Measured on H100 (docs/perf/rows.md): 256 KB
// fp32 rows 188-209 us against 210-221 for the cluster heuristic (one CTA a row), 512 KB bf16 rows
// 98.8-113.5 us against 105.9-116.8 (two CTAs a row). Shorter rows keep the register kernels
// (level with them at 128 KB); longer ones need clusters of four or more, which do not reach every
// SM, and the register kernels' prefetch does about as well there untuned. (Tuned, 1 MB fp32 rows
// of softmax run 5% faster on clusters of 16 CTAs of 512 threads, two an SM, and layernorm's 24%
// slower; the database carries the difference.)
constexpr int64_t kResidentRowBytes = 128 * 1024 + 1;  // past 128 KB
constexpr int64_t kRereadResidentRowBytes = 96 * 1024;  // softmax: from 96 KB
std::optional<RowConfig> resident_heuristic(int64_t cols, size_t element_bytes, RowInputs inputs,
                                            const DeviceInfo& device, int64_t min_row_bytes) {
    const int64_t row_bytes = cols * static_cast<int64_t>(inputs.element_bytes);
    if (inputs.count != 1 || row_bytes < min_row_bytes || row_bytes > 512 * 1024) return std::nullopt;
    RowConfig c;
    c.threads_per_row = 1024;
    c.rows_per_block = 1;
    c.vec = static_cast<int>(16 / element_bytes);
    c.items = resident_held_bytes_limit(c.threads_per_row) / static_cast<int>(c.vec * inputs.element_bytes);
    c.prefetch = 0;
    for (c.cluster = 1; c.cluster <= 2; c.cluster *= 2) {
        const int64_t vectors = ceil_div(cols, int64_t{c.cluster} * c.threads_per_row * c.vec);
        if (vectors <= c.items) continue;
        c.slots = static_cast<int>(vectors - c.items);
        if (!row_invalid_reason(c, cols, element_bytes, inputs, device)) return c;
    }
    return std::nullopt;
}

}  // namespace

RowConfig row_heuristic(int64_t cols, size_t element_bytes, RowInputs inputs, const DeviceInfo& device) {
    RowConfig config;
    config.vec = static_cast<int>(16 / element_bytes);
    // About four 16-byte vectors in flight per thread: enough loads to cover memory latency.
    const int target_items = 4;
    config.threads_per_row = std::clamp(next_pow2(ceil_div(cols, int64_t{config.vec} * target_items)), 1, 1024);
    // Small rows: several rows per block so blocks still have 256 threads.
    config.rows_per_block = std::max(1, 256 / config.threads_per_row);
    config.items = static_cast<int>(ceil_div(cols, int64_t{config.threads_per_row} * config.vec));
    if (auto resident = resident_heuristic(cols, element_bytes, inputs, device, kResidentRowBytes)) return *resident;
    if (config.items > max_items(config.vec, element_bytes, config.threads_per_row * config.rows_per_block)) {
        // Longer than a block holds: split the row over a cluster of CTAs (sm_90), 64 bytes a
        // thread, persistent with the next two rows' copies in flight (prefetch). Measured on
        // H100 (docs/perf/rows.md): 1024-thread CTAs within 5% of the tuned best on rows
        // of 65536 and 262144 elements, where the best config without prefetch is 10-45% slower;
        // smaller CTAs when two inputs' stages would not fit in shared memory; longer rows stream.
        config.rows_per_block = 1;
        config.items = 0;  // streaming, unless a cluster fits below
        const struct {
            int threads, held, max_cluster, prefetch;
        } choices[] = {{1024, 64, 16, 1}, {512, 64, 16, 1}, {256, 64, 16, 1}, {256, 64, 16, 0}, {512, 128, 16, 0}};
        for (const auto& choice : choices) {
            const int per_thread = choice.held / static_cast<int>(config.vec * element_bytes);
            const int64_t ctas = ceil_div(cols, int64_t{choice.threads} * config.vec * per_thread);
            if (device.sm() < 90 || ctas > choice.max_cluster) continue;
            RowConfig c = config;
            c.threads_per_row = choice.threads;
            c.cluster = next_pow2(ctas);
            c.items = static_cast<int>(ceil_div(cols, int64_t{c.cluster} * choice.threads * config.vec));
            c.prefetch = choice.prefetch;
            if (row_invalid_reason(c, cols, element_bytes, inputs, device)) continue;
            config = c;
            break;
        }
        if (config.items == 0) config.threads_per_row = 1024;
    }
    return config;
}

// Split rows: when the rows are too few to give every SM a CTA even in clusters (rows x the
// heuristic's CTAs a row under half the SMs) and a row is long enough (128 KB or more) for a
// second launch and a second read from L2 to pay (16 rows of 128256 bf16, 250 KB each, took 26 us
// on 16 CTAs where torch.compile took 18). As many CTAs a row as give two waves (a power
// of two), each with at least a vector a thread: CTAs of 256 threads, or of 1024 where 256 would
// stream more than 8 vectors a thread (1 x 10M fp32 ran at 38% of copy on 256 CTAs of 256).
std::optional<RowConfig> split_heuristic(int64_t rows, int64_t cols, size_t element_bytes, const DeviceInfo& device) {
    const RowConfig base = row_heuristic(cols, element_bytes, RowInputs{element_bytes, 1}, device);
    const int64_t ctas_a_row = std::max(1, base.cluster);
    if (cols * static_cast<int64_t>(element_bytes) < 128 * 1024 || rows * ctas_a_row * 2 >= device.sm_count)
        return std::nullopt;
    const int64_t wanted = next_pow2(ceil_div(2 * int64_t{device.sm_count}, rows));
    RowConfig c{256, 1, static_cast<int>(16 / element_bytes), 0, 1, 0};
    for (int threads : {256, 1024}) {
        c.threads_per_row = threads;
        int64_t fits = 1;
        while (fits * 2 <= std::min<int64_t>(threads, cols / (int64_t{threads} * c.vec))) fits *= 2;
        c.split = static_cast<int>(std::min(wanted, fits));
        if (cols <= int64_t{c.split} * threads * c.vec * 8) break;
    }
    if (c.split < 2) return std::nullopt;
    return c;
}

// Fewer rows than SMs (one CTA or cluster a row, in one wave), or more rows whose one-vector-a-
// thread CTAs still fit one wave: the time is one row's latency, so each row is spread as wide as
// it goes. Rows of up to 2048 vectors: one CTA with a vector or two a
// thread; longer ones, where there are at most two CTAs an SM: clusters of 16 CTAs of 256 threads
// holding up to four vectors a thread in registers. Held-out tunes on an H200 (2026-12-04): the
// other heuristics' several vectors a thread (rmsnorm 3 x 4096 bf16 5.8 us, 17 x 4096 5.9,
// layernorm 1 x 4096 6.4) against 4.5-4.7 tuned with one; softmax 1 x 50432 fp32 and 5 x 50432 bf16
// 9.9-10.1 us against 5.8-5.9 tuned on clusters of 16 x 256 threads.
std::optional<RowConfig> few_rows_heuristic(int64_t rows, int64_t cols, size_t element_bytes, RowInputs inputs,
                                            const DeviceInfo& device) {
    RowConfig c;
    c.vec = static_cast<int>(16 / element_bytes);
    c.rows_per_block = 1, c.prefetch = 0, c.cluster = 1;
    const int64_t vectors = ceil_div(cols, int64_t{c.vec});
    if (vectors < 64) return std::nullopt;  // rows under 1 KB: several a block (RowOpModel::heuristic)
    if (vectors <= 2048) {
        c.threads_per_row = std::min(next_pow2(vectors), 1024);
        c.items = static_cast<int>(ceil_div(vectors, int64_t{c.threads_per_row}));
        // More rows than SMs still run in one wave while the CTAs fit at half an SM's threads
        // (one vector a thread needs few registers): one row's latency is still the time.
        // (Fewer rows than SMs always do: a CTA has at most 1024 threads.)
        const bool one_wave = rows * c.threads_per_row <= int64_t{device.sm_count} * 1024;
        if (one_wave && !row_invalid_reason(c, cols, element_bytes, inputs, device)) return c;
    }
    if (rows > device.sm_count) return std::nullopt;
    constexpr int kCluster = 16, kThreads = 256, kMaxHeld = 4;
    if (device.sm() < 90 || rows * kCluster > 2 * int64_t{device.sm_count}) return std::nullopt;
    c.threads_per_row = kThreads, c.cluster = kCluster;
    c.items = static_cast<int>(ceil_div(vectors, int64_t{kCluster} * kThreads));
    if (c.items > kMaxHeld || row_invalid_reason(c, cols, element_bytes, inputs, device)) return std::nullopt;
    return c;
}

// Rows that leave SMs idle at one CTA or two a row, and too many for few_rows_heuristic's
// clusters of 16 to run in one wave: clusters of eight 256-thread CTAs, the row in their shared
// memory. Held-out A/B, main's config against this one in one run (H100 and H200, 2026-12-06;
// docs/perf/rows.md has the tables): 19 of 24 problems 1.03-1.43x faster (softmax 24 x 50304
// fp32 14.5 -> 10.2 us, log_softmax 100 x 51200 bf16 17.3 -> 13.4). The bounds come from the five
// that lost (0.88-0.95x): 120-131 rows, where one 1024-thread CTA a row nearly fills the SMs;
// 1 MB rows, whose 32 slots a thread leave one CTA an SM; and 100 x 256000 bf16, whose resident
// CTAs came in pairs, 1.5 an SM. Clusters of 16 ran level with eight up to 64 rows and 5-10%
// slower at 100.
constexpr int kClusteredResidentMaxSlots = 24;  // 96 KB a CTA: two CTAs an SM
std::optional<RowConfig> clustered_resident_heuristic(int64_t rows, int64_t cols, size_t element_bytes,
                                                      RowInputs inputs, const DeviceInfo& device) {
    constexpr int kCluster = 8, kThreads = 256;
    const int64_t row_bytes = cols * static_cast<int64_t>(inputs.element_bytes);
    const int64_t sms = device.sm_count;
    // From a CTA for every SM up to 7/8 of the SMs in rows.
    if (device.sm() < 90 || rows * kCluster < sms || 8 * rows > 7 * sms) return std::nullopt;
    if (row_bytes < kRereadResidentRowBytes) return std::nullopt;
    // The wide resident CTAs stay where they give 1.5 an SM or more.
    if (const auto wide = resident_heuristic(cols, element_bytes, inputs, device, kRereadResidentRowBytes);
        wide && 2 * rows * wide->cluster >= 3 * sms)
        return std::nullopt;
    RowConfig c{kThreads, 1, static_cast<int>(16 / element_bytes), 0, kCluster, 0};
    c.slots = static_cast<int>(ceil_div(cols, int64_t{kCluster} * kThreads * c.vec));
    if (c.slots > kClusteredResidentMaxSlots || row_invalid_reason(c, cols, element_bytes, inputs, device))
        return std::nullopt;
    return c;
}

namespace {

// Ops that reread their rows (softmax's apply after its max and sum) hold rows from 96 KB on chip:
// one wide resident CTA (or a pair) a row once the rows fill the SMs (H100 A/B 2026-12-06, us,
// register kernels' prefetch against it: softmax 256 x 51200 bf16 29.3 -> 22.3, 256 x 32064 fp32
// 25.9 -> 22.6, 160 x 65024 bf16 25.3 -> 22.7, 384 x 32000 fp32 34.4 -> 32.1); clusters of eight
// small CTAs a row for fewer rows (clustered_resident_heuristic).
std::optional<RowConfig> reread_row_heuristic(int64_t rows, int64_t cols, size_t element_bytes, RowInputs inputs,
                                              const DeviceInfo& device) {
    if (rows >= device.sm_count) return resident_heuristic(cols, element_bytes, inputs, device, kRereadResidentRowBytes);
    return clustered_resident_heuristic(rows, cols, element_bytes, inputs, device);
}

}  // namespace

std::vector<RowConfig> split_search_space(int64_t rows, int64_t cols, size_t element_bytes, const DeviceInfo& device) {
    std::vector<RowConfig> space;
    if (!split_heuristic(rows, cols, element_bytes, device)) return space;
    const int vec = static_cast<int>(16 / element_bytes);
    for (int threads : {256, 512, 1024})
        for (int split = 8; split <= threads; split *= 2) {
            if (cols < int64_t{split} * threads * vec || rows * split > 16 * int64_t{device.sm_count}) continue;
            RowConfig c{threads, 1, vec, 0, 1, 0};
            c.split = split;
            space.push_back(c);
        }
    return space;
}

std::optional<std::string> row_invalid_reason(const RowConfig& c, int64_t cols, size_t element_bytes,
                                              RowInputs inputs, const DeviceInfo& device) {
    if (!is_pow2(c.threads_per_row) || c.threads_per_row > 1024)
        return fmt::format("threads_per_row = {} is not a power of two in [1, 1024]", c.threads_per_row);
    if (c.rows_per_block < 1 || int64_t{c.threads_per_row} * c.rows_per_block > device.max_threads_per_block)
        return fmt::format("threads_per_row x rows_per_block = {} x {} exceeds {} threads", c.threads_per_row,
                           c.rows_per_block, device.max_threads_per_block);
    // Must match rows/row_layout.cuh: rows of fewer than 32 threads share warps, whose shuffles
    // take every lane.
    if (c.threads_per_row < 32 && (c.threads_per_row * c.rows_per_block) % 32 != 0)
        return fmt::format("threads_per_row x rows_per_block = {} x {} does not fill whole warps", c.threads_per_row,
                           c.rows_per_block);
    if (!is_pow2(c.vec) || c.vec * element_bytes > 16)
        return fmt::format("vec = {} is not a power of two of at most 16 bytes", c.vec);
    if (c.cluster < 1 || c.cluster > kMaxCluster || !is_pow2(c.cluster))
        return fmt::format("cluster = {} is not a power of two up to {}", c.cluster, kMaxCluster);
    if (c.cluster > 1 && device.sm() < 90) return fmt::format("cluster = {} needs sm_90 or newer", c.cluster);
    if (c.slots < 0) return fmt::format("slots = {} is negative", c.slots);
    if (c.split != 0) {
        if (c.split < 2 || !is_pow2(c.split) || c.split > c.threads_per_row)
            return fmt::format("split = {} is not a power of two in [2, threads_per_row = {}]", c.split,
                               c.threads_per_row);
        if (c.threads_per_row < 32 || c.rows_per_block != 1 || c.items != 0 || c.cluster != 1 || c.slots != 0 ||
            c.prefetch != 0)
            return "a split row streams, one row a CTA of at least 32 threads: rows_per_block = 1, items = 0, "
                   "cluster = 1, slots = 0, prefetch = 0";
        return std::nullopt;
    }
    if (c.slots > 0) return resident_invalid_reason(c, cols, inputs, device);
    if (c.items < 0 || c.items > max_items(c.vec, element_bytes, c.threads_per_row * c.rows_per_block))
        return fmt::format("items x vec = {} x {} holds more than {} bytes per thread at {} threads (it would spill)",
                           c.items, c.vec, held_bytes_limit(c.threads_per_row * c.rows_per_block),
                           c.threads_per_row * c.rows_per_block);
    if (c.cluster > 1 && (c.rows_per_block != 1 || c.items == 0))
        return "a cluster needs rows_per_block = 1 and items > 0";
    if (c.items > 0 && int64_t{c.cluster} * c.threads_per_row * c.vec * c.items < cols)
        return fmt::format("holds {} elements per row, fewer than cols = {}",
                           int64_t{c.cluster} * c.threads_per_row * c.vec * c.items, cols);
    if (c.prefetch != 0 && c.prefetch != 1) return fmt::format("prefetch = {} is not 0 or 1", c.prefetch);
    if (c.prefetch == 1) {
        if (c.items == 0) return "prefetch needs register mode (items > 0)";
        if (device.sm() < 80) return "prefetch needs cp.async (sm_80 or newer)";
        if (c.vec * inputs.element_bytes < 4) return "prefetch needs vectors of at least 4 bytes (cp.async)";
        if (const int64_t bytes = prefetch_bytes(c, c.vec, inputs); bytes > device.max_shared_memory_per_block_optin)
            return fmt::format("prefetch needs {} bytes of shared memory, more than the {} a block may have", bytes,
                               device.max_shared_memory_per_block_optin);
    }
    return std::nullopt;
}

std::vector<Config> row_search_space(int64_t rows, int64_t cols, size_t element_bytes, RowInputs inputs,
                                     const DeviceInfo& device) {
    std::vector<Config> space;
    std::set<Config> seen;
    const int max_vec = static_cast<int>(16 / element_bytes);
    for (int vec = max_vec; vec >= std::max(1, max_vec / 2); vec /= 2) {
        for (int tpr = 1; tpr <= 1024; tpr *= 2) {
            for (int cluster = 1; cluster <= kMaxCluster; cluster *= 2) {
                if (cluster > 1 && device.sm() < 90) continue;
                const int64_t needed = ceil_div(cols, int64_t{cluster} * tpr * vec);
                if (needed > max_items(vec, element_bytes, tpr)) continue;
                if (cluster > 1 && needed < 2) continue;  // a cluster only pays for long rows
                for (int rpb : {1, 2, 4, 8, 16, 32}) {
                    if (tpr * rpb > 1024 || tpr * rpb < 32) continue;
                    if (cluster > 1 && rpb != 1) continue;
                    if (rpb > 1 && rpb > rows) continue;
                    for (int prefetch : {0, 1}) {
                        RowConfig c{tpr, rpb, vec, static_cast<int>(needed), cluster, prefetch};
                        if (row_invalid_reason(c, cols, element_bytes, inputs, device)) continue;
                        if (seen.insert(c.to_config()).second) space.push_back(c.to_config());
                    }
                }
            }
        }
    }
    // Resident configs for long rows: CTAs of 256-1024 threads, 0 or the most register bytes
    // they may hold, the rest of their chunk in shared memory. Clusters of up to four hold the
    // largest chunks (one CTA an SM); clusters of 8-16 hold chunks small enough for two CTAs an
    // SM (of 512 threads or fewer), so that one streams while the other waits for its row's
    // reduction.
    if (has_resident_configs(cols, inputs)) {
        const int vec = max_vec;
        for (int threads : {256, 512, 1024}) {
            for (int cluster = 1; cluster <= kMaxCluster; cluster *= 2) {
                const int64_t vectors = ceil_div(cols, int64_t{cluster} * threads * vec);
                // Chunks of a few vectors: a large cluster costs more than it holds.
                if (cluster > 4 && vectors < 4) continue;
                const int register_items = resident_held_bytes_limit(threads) / static_cast<int>(vec * inputs.element_bytes);
                for (int items : {0, register_items}) {
                    if (vectors <= items) continue;
                    RowConfig c{threads, 1, vec, items, cluster, 0};
                    c.slots = static_cast<int>(vectors - items);
                    if (row_invalid_reason(c, cols, element_bytes, inputs, device)) continue;
                    if (seen.insert(c.to_config()).second) space.push_back(c.to_config());
                }
            }
        }
    }
    // Streaming configs, for rows too long for registers and as a fallback.
    for (int tpr : {256, 512, 1024}) {
        RowConfig c{tpr, 1, max_vec, 0, 1, 0};
        if (!row_invalid_reason(c, cols, element_bytes, inputs, device) && seen.insert(c.to_config()).second)
            space.push_back(c.to_config());
    }
    return space;
}

// Blocks walk the rows past the grid in steps of it (kernel_templates/rows/row_layout.cuh), so a
// row count past what a grid holds caps the grid instead of wrapping it to 32 bits. 2^30 is a
// multiple of every cluster size.
constexpr int64_t kMaxRowGrid = int64_t{1} << 30;

unsigned row_grid(int64_t groups, int64_t blocks_per_group) {
    return static_cast<unsigned>(std::min(groups, kMaxRowGrid / blocks_per_group) * blocks_per_group);
}

RowLaunch row_launch(const RowConfig& c, int width, int64_t rows, int64_t cols, RowInputs inputs) {
    const int vec = width_vector(width);
    RowLaunch launch{c.threads_per_row, c.rows_per_block, vec, c.items, c.cluster, c.prefetch == 1, 0, 0, 0};
    launch.ragged = is_ragged_width(width) && vec > 1;
    if (c.split > 0) {
        launch.split = c.split;
        launch.grid = static_cast<unsigned>(rows * c.split);  // split_heuristic keeps it small
        launch.block = static_cast<unsigned>(c.threads_per_row);
        return launch;
    }
    if (c.slots > 0) {
        // A narrower vector (misaligned pointers) keeps the bytes held: more items and slots, as
        // long as cp.async can copy them and the loops stay short; otherwise stream.
        const int widen = c.vec / vec;
        if (vec * inputs.element_bytes >= 4 && (c.items + c.slots) * widen <= kMaxResidentVectors) {
            launch.items = c.items * widen;
            launch.slots = c.slots * widen;
            launch.grid = row_grid(rows, c.cluster);
            launch.block = static_cast<unsigned>(c.threads_per_row);
            RowConfig held = c;
            held.slots = launch.slots;
            launch.shared_bytes = static_cast<unsigned>(resident_slot_bytes(held, vec, inputs));
            return launch;
        }
        launch.items = 0;
        launch.cluster = 1;
        launch.prefetch = false;
        launch.grid = row_grid(rows, 1);
        launch.block = static_cast<unsigned>(c.threads_per_row);
        return launch;
    }
    if (c.items > 0) {
        launch.items = static_cast<int>(ceil_div(cols, int64_t{c.cluster} * c.threads_per_row * vec));
        // A narrower vector needs more items for the same bytes held; past 32 items the unrolled
        // loop gets long: stream instead.
        if (launch.items * vec > c.items * c.vec || launch.items > 32) {
            // A narrower vector than the config's would need too many registers: stream instead.
            launch.items = 0;
            launch.cluster = 1;
        }
    }
    // cp.async copies 4 bytes at least: narrower vectors (misaligned pointers) load directly.
    if (launch.items == 0 || vec * inputs.element_bytes < 4) launch.prefetch = false;
    if (launch.cluster > 1) {
        launch.rows_per_block = 1;
        launch.grid = row_grid(rows, launch.cluster);
    } else {
        launch.grid = row_grid(ceil_div(rows, launch.rows_per_block), 1);
    }
    launch.block = static_cast<unsigned>(launch.threads_per_row * launch.rows_per_block);
    if (launch.prefetch) {
        RowConfig held = c;
        held.items = launch.items;
        launch.shared_bytes = static_cast<unsigned>(prefetch_bytes(held, vec, inputs));
    }
    return launch;
}



}  // namespace tileops::detail

namespace tileops::detail {

RowOpModel::RowOpModel(int64_t rows, int64_t cols, DType dtype, DType out_dtype, std::initializer_list<int64_t> row_strides)
    : rows_(rows), cols_(cols), dtype_(dtype), out_dtype_(out_dtype), shape_vec_(1), strides_share_frame_(true) {
    shape_vec_ = widest_dividing_vector(8, {cols});
    for (int64_t stride : row_strides) shape_vec_ = widest_dividing_vector(shape_vec_, {stride});
    strides_share_frame_ = strides_share_frame(static_cast<int>(16 / element_bytes()), row_strides);
}

std::string RowOpModel::dtype_key() const {
    if (dtype_ == out_dtype_) return dtype_name(dtype_);
    return fmt::format("{}->{}", dtype_name(dtype_), dtype_name(out_dtype_));
}

size_t RowOpModel::element_bytes() const { return std::max(dtype_size(dtype_), dtype_size(out_dtype_)); }

Config RowOpModel::heuristic(const DeviceInfo& device) const {
    if (auto few = few_rows_heuristic(rows_, cols_, element_bytes(), inputs(), device)) return few->to_config();
    if (rereads_row())
        if (auto held = reread_row_heuristic(rows_, cols_, element_bytes(), inputs(), device)) return held->to_config();
    if (has_split_kernels())
        if (auto split = split_heuristic(rows_, cols_, element_bytes(), device)) return split->to_config();
    RowConfig c = row_heuristic(cols_, element_bytes(), inputs(), device);
    // Few short rows: a problem of a few KB is one memory round trip, and the SMs that take part
    // set its time, so fewer rows a block while that leaves SMs idle (64 x 896 bf16: 8 blocks of
    // 8 rows took 6.2 us where torch.compile's one row a block took 4.1).
    while (c.rows_per_block > 1 && ceil_div(rows_, int64_t{c.rows_per_block}) < device.sm_count) {
        RowConfig fewer = c;
        fewer.rows_per_block /= 2;
        if (row_invalid_reason(fewer, cols_, element_bytes(), inputs(), device)) break;
        c = fewer;
    }
    return c.to_config();
}

std::vector<Config> RowOpModel::search_space(const DeviceInfo& device) const {
    std::vector<Config> space = row_search_space(rows_, cols_, element_bytes(), inputs(), device);
    if (has_split_kernels())
        for (const RowConfig& c : split_search_space(rows_, cols_, element_bytes(), device))
            if (!row_invalid_reason(c, cols_, element_bytes(), inputs(), device)) space.push_back(c.to_config());
    return space;
}

size_t RowOpModel::workspace_bytes(const Config& config, int) const {
    const RowConfig c = RowConfig::from(config, op_name());
    return c.split > 0 ? split_workspace_bytes(rows_, c.split) : 0;
}

std::optional<std::string> RowOpModel::invalid_reason(const Config& config, const DeviceInfo& device) const {
    RowConfig row;
    try {
        row = RowConfig::from(config, op_name());
    } catch (const std::exception& e) {
        return std::string(e.what());
    }
    if (row.split > 0) {
        if (!has_split_kernels()) return fmt::format("split = {}: {} has no split kernels", row.split, op_name());
        if (rows_ > (int64_t{1} << 31) / row.split) return fmt::format("split = {}: rows x split exceeds a grid", row.split);
    }
    return row_invalid_reason(row, cols_, element_bytes(), inputs(), device);
}

std::vector<int> RowOpModel::vector_widths(const Config& config) const {
    return ragged_launch_widths(RowConfig::from(config, op_name()).vec, shape_vec_, strides_share_frame_);
}

LaunchPlan RowOpModel::plan(const Config& config, int vec, const DeviceInfo&) const {
    RowLaunch launch = row_launch(RowConfig::from(config, op_name()), vec, rows_, cols_, inputs());
    LaunchPlan plan;
    if (launch.split > 0) {
        if (!has_split_kernels()) throw InvalidArgument(fmt::format("tileops::{}: config has split, and {} has no split kernels", op_name(), op_name()));
        plan.template_file = split_template_file();
        std::tie(plan.name_expression, plan.after.name_expression) = split_name_expressions(launch);
        plan.grid[0] = plan.after.grid[0] = launch.grid;
        plan.block[0] = plan.after.block[0] = launch.block;
        return plan;
    }
    plan.template_file = launch.slots > 0 ? resident_template_file() : template_file();
    plan.name_expression = name_expression(launch);
    plan.grid[0] = launch.grid;
    plan.block[0] = launch.block;
    plan.cluster = static_cast<unsigned>(launch.cluster);
    plan.shared_bytes = launch.shared_bytes;
    // The blocks walk the rows in steps of the resident grid.
    plan.persistent = launch.prefetch || launch.slots > 0;
    return plan;
}

std::string RowOpModel::type_arguments() const {
    return fmt::format("{}, {}", device_type_name(dtype_), device_type_name(out_dtype_));
}

}  // namespace tileops::detail
