#include "tuning/op_config.hpp"

#include <fmt/format.h>

#include "codegen/template_registry.hpp"
#include "ops/op_factory.hpp"
#include "util/sha256.hpp"

namespace tileops::tuning {

TuningKey tuning_key_for(const detail::OpModel& model, const DeviceInfo& device) {
    return model.tuning_key(device.arch(), current_template_hash(model));
}

std::string current_template_hash(const detail::OpModel& model) {
    const codegen::TemplateRegistry& registry = codegen::TemplateRegistry::instance();
    const std::vector<std::string> files = model.template_files();
    if (files.size() == 1) return registry.template_hash(files.front());
    util::Sha256 hash;
    for (const std::string& file : files) hash.field(registry.template_hash(file));
    return hash.hex_digest();
}

std::optional<std::string> stale_entry_reason(const TuningEntry& entry) {
    try {
        auto op = detail::make_op({entry.key.op, entry.key.shape, entry.key.dtype, entry.key.flags});
        if (entry.key.template_hash != current_template_hash(op->model())) return std::string(kStaleTemplateReason);
        return std::nullopt;
    } catch (const std::exception& error) {
        return fmt::format("not a problem of this library: {}", error.what());
    }
}

Config heuristic_that_fits(const detail::OpModel& model, const DeviceInfo& device) {
    Config heuristic = model.heuristic(device);
    if (!model.invalid_reason(heuristic, device)) return heuristic;
    for (const Config& config : model.search_space(device))
        if (!model.invalid_reason(config, device)) return config;
    return heuristic;  // nothing fits: resolving it says why
}

ConfigChoice choose_config(ConfigResolver& resolver, const detail::OpModel& model, const DeviceInfo& device) {
    return resolver.choose(
        tuning_key_for(model, device), [&] { return heuristic_that_fits(model, device); },
        [&](const TuningEntry& entry) { return model.invalid_reason(entry.config, device); });
}

std::string config_text(const Config& config) {
    std::string text;
    for (const auto& [name, value] : config) text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
    return text;
}

}  // namespace tileops::tuning
