#include "tuning/op_config.hpp"

#include <fmt/format.h>

#include "codegen/template_registry.hpp"

namespace tileops::tuning {

TuningKey tuning_key_for(const detail::OpModel& model, const DeviceInfo& device) {
    return model.tuning_key(device.arch(), codegen::TemplateRegistry::instance().template_hash(model.template_file()));
}

ConfigChoice choose_config(ConfigResolver& resolver, const detail::OpModel& model, const DeviceInfo& device) {
    return resolver.choose(
        tuning_key_for(model, device), [&] { return model.heuristic(device); },
        [&](const TuningEntry& entry) { return model.invalid_reason(entry.config, device); });
}

std::string config_text(const Config& config) {
    std::string text;
    for (const auto& [name, value] : config) text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
    return text;
}

}  // namespace tileops::tuning
