// What the runtime, the autotuner and tileops-tune need to know about an op's problem: its tuning
// key, heuristic config, search space, config checks and, for a config, which kernel to launch how.
// Each op family implements one OpModel in its own file (rmsnorm.cpp, softmax.cpp, ...).
#pragma once

#include <cuda.h>

#include <any>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/tensor.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::detail {

struct ResolvedLaunch;

// A kernel a launch runs beside its main one (LaunchPlan::before, after).
struct SideKernel {
    std::string name_expression;  // empty: none
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    explicit operator bool() const noexcept { return !name_expression.empty(); }
};

// A kernel instantiation and its launch geometry for one problem.
struct LaunchPlan {
    std::string template_file;    // under kernel_templates/, e.g. "rows/rmsnorm.cuh"
    std::string name_expression;  // e.g. "tileops::rmsnorm_kernel<float, float, 256, 1, 4, 4, 1, false>"
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned cluster = 1;          // CTAs per cluster along x (sm_90+)
    unsigned shared_bytes = 0;     // dynamic shared memory
    // The kernel walks its work in steps of gridDim.x (a persistent grid sized to the device):
    // the runtime shrinks grid[0] to the blocks (clusters) that can be resident at once, because
    // a block that waits for another to leave would run its share of the work after everyone else.
    bool persistent = false;
    // What the op's launch needs beside the function and geometry, as a type of its family (the
    // GEMM's GemmLaunch: its TMA boxes and workspace layout); empty when nothing.
    std::any details;
    // Kernels of the same template file launched on the same stream with the same arguments and
    // no dynamic shared memory: `before` right before this one (e.g. copying a misaligned operand
    // into the workspace), `after` right after it (e.g. the merge of split partial results, spread
    // over many blocks). An empty name: none.
    SideKernel before, after;
    // Every kernel this plan launches, in launch order.
    std::vector<std::string> name_expressions() const {
        std::vector<std::string> names;
        if (before) names.push_back(before.name_expression);
        names.push_back(name_expression);
        if (after) names.push_back(after.name_expression);
        return names;
    }
};

// How tools fill an input operand: random values in [-2, 2] (never all zeros), or, for int32
// index operands, every element `fill_value`, a scrambled index in [0, fill_value) (e.g. a page
// table), element i = i * fill_value (e.g. offsets of sequences of equal length), or the offsets
// of parts as even as integers allow that add up to `fill_value` (element i of n is
// i * fill_value / (n - 1), rounded down: a mixture-of-experts layer's group offsets, uneven
// where the tuner is asked for a spread); a batch's
// sequence lengths, at most `fill_value`: every one at it unless the tuner is asked for another
// spread (autotune/length_spread.hpp); for float parameters, every element `real_value` (e.g. a
// temperature).
enum class OperandFill { random, constant, scrambled_index, multiples, even_offsets, constant_real, sequence_lengths };

// One operand of run(), in order: inputs first, then outputs.
struct OperandSpec {
    std::string name;
    DType dtype;
    long long rows;    // 0 for a vector of `cols` elements
    long long cols;
    long long stride;  // elements between rows
    bool output;
    OperandFill fill = OperandFill::random;
    long long fill_value = 0;
    double real_value = 0;  // with OperandFill::constant_real
    // Rows the op reads when it reads only some (a table it gathers rows from), or writes when
    // it writes only some (a cache it appends to); -1: every row.
    long long rows_read = -1;
    // An output written only where the op's indices say (a KV cache): the rest keeps what was
    // there, so tools fill it with zeros, not with poison that would read as unwritten.
    bool partial = false;
    // A cache of keys the op reads only as far as the sequence lengths reach: its bytes moved
    // scale with the share of the cache the lengths hold.
    bool read_by_lengths = false;
    // Bytes the op must move for this operand (read once or written once), every sequence full.
    double bytes() const {
        const long long moved_rows = rows == 0 ? 1 : rows_read >= 0 ? rows_read : rows;
        return static_cast<double>(moved_rows * cols) * dtype_size(dtype);
    }
};

class OpModel {
public:
    virtual ~OpModel() = default;

    virtual std::string op_name() const = 0;        // "rmsnorm"
    virtual std::vector<long long> shape() const = 0;
    virtual std::string dtype_key() const = 0;      // "bf16" or "bf16->fp32"
    virtual std::string flags() const = 0;          // layout/options that change the kernel, "" if none

    // A config good enough for a problem that was never tuned.
    virtual Config heuristic(const DeviceInfo& device) const = 0;
    // Every config worth timing on `device` (already pruned by invalid_reason).
    virtual std::vector<Config> search_space(const DeviceInfo& device) const = 0;
    // Why `config` cannot run this problem on `device`, or nullopt when it can.
    virtual std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const = 0;
    // Why `config`, tuned for `tuned_shape` (a near shape of this op), should not serve this
    // problem although it can run it, or nullopt when it may (the lookup of the nearest tuned
    // shape then takes the next nearest, else the heuristic).
    virtual std::optional<std::string> neighbour_misfit(const std::vector<long long>& /*tuned_shape*/,
                                                        const Config& /*config*/, const DeviceInfo& /*device*/) const {
        return std::nullopt;
    }
    // Launch widths run() may launch with for `config` (so `warm` can compile all of them): the
    // widest vector for aligned pointers, and narrower ones or a ragged kernel (ragged_width) for
    // misaligned pointers and odd shapes.
    virtual std::vector<int> vector_widths(const Config& config) const = 0;
    virtual LaunchPlan plan(const Config& config, int vec, const DeviceInfo& device) const = 0;
    // The operands of run() in order, for tools that allocate them (autotuner, benchmarks).
    virtual std::vector<OperandSpec> operands() const = 0;
    // Checks run()'s operands (counts, null and misaligned pointers, views, overlaps: throws
    // InvalidArgument naming the argument) and returns the widest vector width their shape and
    // alignment allow.
    virtual int vector_width(Inputs inputs, Outputs outputs) const = 0;
    // Launches a resolved kernel of this problem on operands that passed vector_width(): packs
    // the kernel's parameters and calls detail::launch.
    virtual void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const = 0;

    // Device scratch memory a launch with `config` at launch width `width` needs (e.g. split-KV
    // partial results). The runtime allocates it, zeroed, when it first resolves that launch; the
    // kernel must leave it as it needs to find it next time (counters back at zero).
    virtual size_t workspace_bytes(const Config& /*config*/, int /*width*/) const { return 0; }

    // A valid config whose kernels compile much faster than `config`'s, for background compiling
    // to run while `config`'s kernels compile when no other config of the op is at hand (its
    // compile then is the only wait of a new shape's first run); nullopt where `config`'s
    // kernels compile about as fast as any.
    virtual std::optional<Config> quick_config(const Config& /*config*/, const DeviceInfo& /*device*/) const {
        return std::nullopt;
    }

    // Why no kernel of the op runs on `device` at all (an instruction set it lacks), or nullopt.
    // The runtime throws Unsupported with it before choosing a config.
    virtual std::optional<std::string> unsupported_reason(const DeviceInfo& /*device*/) const { return std::nullopt; }

    // "rmsnorm 8192x4096 bf16 [residual]".
    std::string describe() const;
    TuningKey tuning_key(const std::string& arch, const std::string& template_hash) const;

protected:
    // The candidates invalid_reason() accepts on `device` (for search_space()).
    std::vector<Config> valid_configs(const std::vector<Config>& candidates, const DeviceInfo& device) const;
};

// The C++ type name of a dtype inside templates: "float", "__half", "__nv_bfloat16".
const char* device_type_name(DType dtype) noexcept;

// The largest value of any tunable (the largest real one is 1024 threads).
inline constexpr long long kMaxConfigValue = 1 << 20;

// Why `threads` cannot be a block on `device` (not a multiple of 32 in [32, its maximum]), or
// nullopt.
std::optional<std::string> block_threads_reason(long long threads, const DeviceInfo& device);
// A launch width (OpModel::vector_widths, vector_width, plan) is a vector width in elements, or
// the ragged kernels of an op at vector width vec, which take rows of any length and alignment at
// full width (the row ops: kernel_templates/common/row_frame.cuh), written as -vec.
constexpr int ragged_width(int vec) noexcept { return -vec; }
constexpr bool is_ragged_width(int width) noexcept { return width < 0; }
constexpr int width_vector(int width) noexcept { return width < 0 ? -width : width; }

// Where an operand's rows start relative to vectors: its pointer and row stride, in elements of
// element_bytes.
struct RowOperand {
    const void* data;
    int64_t stride;
    size_t element_bytes;
};

// Whether every operand's rows start as far past a vector of `vec` elements as the first's do,
// row for row: what a ragged kernel needs of the operands it reads and writes by whole vectors
// (common/row_frame.cuh).
bool rows_share_frame(int vec, std::initializer_list<RowOperand> rows);

// Whether row strides agree modulo a vector of `vec` elements: rows that start equally far past a
// vector then do so row after row (the shape's half of rows_share_frame).
bool strides_share_frame(int vec, std::initializer_list<int64_t> strides);

// The launch width of run() for an op with ragged kernels (OpModel::vector_width): `aligned`, the
// widest vector the shape and every pointer allow, when no config is wider (16 bytes of the
// widest element, element_bytes); else the ragged kernels at that width, where the row operands
// share a frame; else one element an access.
int ragged_launch_width(int aligned, size_t element_bytes, std::initializer_list<RowOperand> rows);

// The launch widths such an op may take with a config of vector width `vec` (so that `warm`
// compiles each): `vec` where the shape allows it (shape_vec), the ragged kernels where the row
// strides share a frame, and one element an access for operands that do not.
std::vector<int> ragged_launch_widths(int vec, int shape_vec, bool strides_share_frame);

// Why `vec` cannot be a vector width of at most `max_vec` elements (a power of two), or nullopt.
std::optional<std::string> vector_width_reason(long long vec, long long max_vec);

// Reads a named tunable; throws InvalidArgument naming the op and the key when it is missing or
// outside [0, kMaxConfigValue].
long long config_value(const Config& config, const char* name, const std::string& op);

// Reads each named tunable into its variable through config_value; for invalid_reason: the
// reason when one is missing or out of range, nullopt when all were read.
std::optional<std::string> read_tunables(const Config& config, const std::string& op,
                                         std::initializer_list<std::pair<const char*, long long*>> tunables);

// The vector widths a launch may fall back to: widest, widest / 2, ..., 1.
std::vector<int> halving_widths(int widest);

}  // namespace tileops::detail
