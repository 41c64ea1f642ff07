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

std::vector<int> halving_widths(int widest) {
    std::vector<int> widths;
    for (int vec = widest; vec >= 1; vec /= 2) widths.push_back(vec);
    return widths;
}

}  // namespace tileops::detail
