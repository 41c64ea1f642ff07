#include "tuning/op_config.hpp"

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

}  // namespace tileops::tuning
