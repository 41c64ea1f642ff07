#include "core/op_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/error.hpp"

namespace tileops::detail {

std::vector<Config> OpModel::valid_configs(const std::vector<Config>& candidates, const DeviceInfo& device) const {
    std::vector<Config> configs;
    for (const Config& config : candidates)
        if (!invalid_reason(config, device)) configs.push_back(config);
    return configs;
}

std::string OpModel::describe() const {
    std::string text = fmt::format("{} {} {}", op_name(), fmt::join(shape(), "x"), dtype_key());
    if (!flags().empty()) text += " [" + flags() + "]";
    return text;
}

TuningKey OpModel::tuning_key(const std::string& arch, const std::string& template_hash) const {
    TuningKey key;
    key.op = op_name();
    key.shape = shape();
    key.dtype = dtype_key();
    key.flags = flags();
    key.arch = arch;
    key.template_hash = template_hash;
    return key;
}

const char* device_type_name(DType dtype) noexcept {
    switch (dtype) {
        case DType::fp32: return "float";
        case DType::fp16: return "__half";
        case DType::bf16: return "__nv_bfloat16";
        case DType::int32: return "int";
        case DType::fp8_e4m3: return "__nv_fp8_e4m3";
    }
    return "float";
}

std::optional<std::string> block_threads_reason(long long threads, const DeviceInfo& device) {
    if (threads < 32 || threads > device.max_threads_per_block || threads % 32 != 0)
        return fmt::format("threads = {} is not a multiple of 32 in [32, {}]", threads, device.max_threads_per_block);
    return std::nullopt;
}

std::optional<std::string> vector_width_reason(long long vec, long long max_vec) {
    if (vec < 1 || (vec & (vec - 1)) != 0 || vec > max_vec)
        return fmt::format("vec = {} is not a power of two of at most 16 bytes", vec);
    return std::nullopt;
}

long long config_value(const Config& config, const char* name, const std::string& op) {
    auto it = config.find(name);
    if (it == config.end()) throw InvalidArgument(fmt::format("tileops::{}: config has no '{}'", op, name));
    // Every tunable is a small count or size. The bound keeps the validators' products and
    // divisions (warps_m * warps_n, block_m % (16 * warps_m), ...) far from int overflow for any
    // config, including one read from a hostile database.
    if (it->second < 0 || it->second > kMaxConfigValue)
        throw InvalidArgument(fmt::format("tileops::{}: config '{}' = {} is outside [0, {}]", op, name, it->second,
                                          kMaxConfigValue));
    return it->second;
}

std::optional<std::string> read_tunables(const Config& config, const std::string& op,
                                         std::initializer_list<std::pair<const char*, long long*>> tunables) {
    try {
        for (const auto& [name, value] : tunables) *value = config_value(config, name, op);
    } catch (const std::exception& e) {
        return std::string(e.what());
    }
    return std::nullopt;
}

namespace {

// Where a row operand's rows start past a vector of `vec` elements: (row 0's offset, the
// stride's), in elements.
std::pair<int64_t, int64_t> row_phase(const RowOperand& row, int vec) {
    const auto element = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row.data) / row.element_bytes);
    return {element & (vec - 1), row.stride & (vec - 1)};
}

}  // namespace

bool rows_share_frame(int vec, std::initializer_list<RowOperand> rows) {
    for (const RowOperand& row : rows)
        if (row_phase(row, vec) != row_phase(*rows.begin(), vec)) return false;
    return true;
}

bool strides_share_frame(int vec, std::initializer_list<int64_t> strides) {
    for (int64_t stride : strides)
        if ((stride & (vec - 1)) != (*strides.begin() & (vec - 1))) return false;
    return true;
}

int ragged_launch_width(int aligned, size_t element_bytes, std::initializer_list<RowOperand> rows) {
    const int widest = static_cast<int>(16 / element_bytes);
    if (aligned >= widest) return aligned;
    if (widest > 1 && rows_share_frame(widest, rows)) return ragged_width(widest);
    return 1;
}

std::vector<int> ragged_launch_widths(int vec, int shape_vec, bool strides_share_frame) {
    std::vector<int> widths;
    if (shape_vec >= vec) widths.push_back(vec);
    if (vec > 1) {
        if (strides_share_frame) widths.push_back(ragged_width(vec));
        widths.push_back(1);
    }
    return widths;
}

std::vector<int> halving_widths(int widest) {
    std::vector<int> widths;
    for (int vec = widest; vec >= 1; vec /= 2) widths.push_back(vec);
    return widths;
}

}  // namespace tileops::detail
