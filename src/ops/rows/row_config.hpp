// The config space shared by the row-wise ops (RMSNorm, LayerNorm, Softmax): a row is reduced by
// a group of threads (a sub-warp, a warp, a block, or a cluster of blocks on sm_90) that holds it
// in registers between reading and writing, so the row is read from memory once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op_model.hpp"
#include "tileops/device_info.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::detail {

struct RowConfig {
    int threads_per_row = 256;  // power of two, 1..1024
    int rows_per_block = 1;     // threads_per_row * rows_per_block <= 1024
    int vec = 8;                // vector width (elements); odd shapes run the ragged kernels at it
    int items = 4;              // vectors each thread holds; 0: streaming (re-reads the row, any length)
    int cluster = 1;            // CTAs per row (sm_90+, rows_per_block == 1, up to kMaxCluster)
    // 1: a persistent grid whose blocks copy their next two row groups into shared memory
    // (cp.async, sm_80+) while they work on the current one; register mode only. Optional in a
    // config (default 0).
    int prefetch = 0;
    // Vectors each thread holds in shared memory besides its `items` in registers: the long-row
    // kernels (*_resident.cuh), persistent, whose CTAs hold up to ~256 KB of a row so that clusters
    // of two reach rows of 512 KB. 0: the register kernels. Optional in a config (default 0).
    int slots = 0;
    // CTAs each row is split over anywhere in the grid (softmax of few long rows: two kernels,
    // rows/softmax_split.cuh and the norms'; a power of two up to threads_per_row); 0: not split. A split config
    // streams (items 0) one row a CTA. Optional in a config (default 0).
    int split = 0;

    static RowConfig from(const Config& config, const std::string& op);
    Config to_config() const;
};

// The geometry of a launch for a concrete vector width: the config's capacity is kept by growing
// `items` when `vec` is narrower; rows too long for registers fall back to streaming.
struct RowLaunch {
    int threads_per_row, rows_per_block, vec, items, cluster;
    bool prefetch;
    unsigned grid, block;
    unsigned shared_bytes;  // the prefetch stages, or the resident slots
    int slots = 0;          // > 0: the resident kernel
    int split = 0;          // > 0: the split kernels (their grid covers rows x split CTAs)
    bool ragged = false;    // the ragged kernel: rows of any length and alignment (common/row_frame.cuh)
};

// The input rows a row op reads (x, and the residual for RMSNorm with the residual add): what
// its prefetch stages hold, in the inputs' storage type.
struct RowInputs {
    size_t element_bytes;
    int count = 1;
};

// Bytes of its row a thread may hold in registers (in the storage type) without spilling: the
// register file allows 64 registers a thread at 1024 threads, 128 at 512 or fewer.
inline constexpr int held_bytes_limit(int block_threads) { return block_threads > 512 ? 64 : 128; }
// The same for the resident kernels, which keep more values live (ptxas spills softmax at 64
// bytes and 1024 threads, and at 128 bytes and 512).
inline constexpr int resident_held_bytes_limit(int block_threads) { return block_threads > 512 ? 32 : 64; }
// Whether a problem's search space has resident configs (and so its tuning entries depend on those
// templates): one input row of more than 64 KB, beyond what one 1024-thread CTA holds in registers.
inline bool has_resident_configs(int64_t cols, RowInputs inputs) {
    return inputs.count == 1 && cols * static_cast<int64_t>(inputs.element_bytes) > 64 * 1024;
}
// Largest cluster a row may be split over (16 needs the non-portable cluster size opt-in, sm_90).
inline constexpr int kMaxCluster = 16;

RowConfig row_heuristic(int64_t cols, size_t element_bytes, RowInputs inputs, const DeviceInfo& device);
// For ops with split kernels: the split config for `rows` rows too few and too long for the
// others to fill the GPU, or nullopt.
std::optional<RowConfig> split_heuristic(int64_t rows, int64_t cols, size_t element_bytes, const DeviceInfo& device);
// Rows fewer than the SMs (or more whose one-vector-a-thread CTAs still fit one wave), each at
// least 1 KB and short enough to be held in registers: a CTA (or, for fewer rows than SMs, a
// cluster of 16) a row, spread as wide as it goes. nullopt: the other heuristics decide.
std::optional<RowConfig> few_rows_heuristic(int64_t rows, int64_t cols, size_t element_bytes, RowInputs inputs,
                                            const DeviceInfo& device);
// For ops that reread their rows (softmax): fewer rows than SMs (up to 7/8 of them), yet enough
// to give every SM a CTA of a cluster of eight (17-115 rows on an H100), of 96 KB to 768 KB
// each: the row held in the shared memory of a cluster of small CTAs. nullopt: the other
// heuristics decide (also where the wide resident CTAs already give 1.5 an SM).
std::optional<RowConfig> clustered_resident_heuristic(int64_t rows, int64_t cols, size_t element_bytes,
                                                      RowInputs inputs, const DeviceInfo& device);
// Split configs worth timing for such a problem (none for others).
std::vector<RowConfig> split_search_space(int64_t rows, int64_t cols, size_t element_bytes, const DeviceInfo& device);
// Workspace of a split launch: one (max, sum) pair a CTA.
inline size_t split_workspace_bytes(int64_t rows, int split) { return static_cast<size_t>(rows) * split * 8; }
std::vector<Config> row_search_space(int64_t rows, int64_t cols, size_t element_bytes, RowInputs inputs,
                                     const DeviceInfo& device);
std::optional<std::string> row_invalid_reason(const RowConfig& config, int64_t cols, size_t element_bytes,
                                              RowInputs inputs, const DeviceInfo& device);
// The launch at launch width `width` (core/op_model.hpp: a vector width, or the ragged kernels).
RowLaunch row_launch(const RowConfig& config, int width, int64_t rows, int64_t cols, RowInputs inputs);

}  // namespace tileops::detail

namespace tileops::detail {

// OpModel for a row-wise op: everything but the kernel's name expression is shared.
class RowOpModel : public OpModel {
public:
    // row_strides: every row operand's stride, x's first.
    RowOpModel(int64_t rows, int64_t cols, DType dtype, DType out_dtype, std::initializer_list<int64_t> row_strides);

    std::vector<long long> shape() const override { return {rows_, cols_}; }
    std::string dtype_key() const override;
    Config heuristic(const DeviceInfo& device) const override;
    std::vector<Config> search_space(const DeviceInfo& device) const override;
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override;
    std::vector<int> vector_widths(const Config& config) const override;
    LaunchPlan plan(const Config& config, int vec, const DeviceInfo& device) const override;
    size_t workspace_bytes(const Config& config, int width) const override;  // the split kernels' partials

    // The widest vector width the shape and strides allow (pointers may narrow it further).
    int shape_vec() const noexcept { return shape_vec_; }

protected:
    // e.g. "tileops::rmsnorm_kernel<__nv_bfloat16, __nv_bfloat16, 256, 1, 8, 4, 1, false>"
    // (launch.slots > 0: the resident kernel of resident_template_file()).
    virtual std::string name_expression(const RowLaunch& launch) const = 0;
    // The templates of the op's register and resident kernels, e.g. "rows/rmsnorm.cuh" and
    // "rows/rmsnorm_resident.cuh".
    virtual std::string template_file() const = 0;
    virtual std::string resident_template_file() const = 0;
    // "T, TOut" as template arguments.
    std::string type_arguments() const;
    // The input rows the kernel reads (what its prefetch stages hold).
    virtual RowInputs inputs() const { return {dtype_size(dtype_), 1}; }
    // Ops with split kernels (e.g. rows/softmax_split.cuh): their template, and the stats and the
    // apply kernels' names. No template: no split kernels.
    virtual std::string split_template_file() const { return ""; }
    bool has_split_kernels() const { return !split_template_file().empty(); }
    // Ops whose second pass over a row rereads it unless it is held on chip (softmax's apply after
    // its max and sum): rows from 96 KB want the resident kernels (RowOpModel::heuristic).
    virtual bool rereads_row() const { return false; }
    virtual std::pair<std::string, std::string> split_name_expressions(const RowLaunch&) const { return {}; }
    // The widest of the input and output elements (the configs' vector widths are sized by it).
    size_t element_bytes() const;

    // The launch width for operands that passed the op's checks (`aligned`: the widest vector
    // their shape and pointers allow): see ragged_launch_width.
    int launch_width(int aligned, std::initializer_list<RowOperand> rows) const {
        return ragged_launch_width(aligned, element_bytes(), rows);
    }

    int64_t rows_, cols_;
    DType dtype_, out_dtype_;
    int shape_vec_;
    bool strides_share_frame_;
};

}  // namespace tileops::detail
