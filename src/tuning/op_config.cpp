#include "tuning/op_config.hpp"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/template_registry.hpp"
#include "ops/registry.hpp"

namespace tileops::tuning {

TuningKey tuning_key_for(const detail::OpModel& model, const DeviceInfo& device) {
    return model.tuning_key(device.arch(), "");
}

std::string kernel_template_hash(const detail::OpModel& model, const Config& config, const DeviceInfo& device) {
    const std::vector<int> widths = model.vector_widths(config);
    const int vec = widths.empty() ? 1 : widths.front();
    return jit::TemplateRegistry::instance().template_hash(model.plan(config, vec, device).template_file);
}

TuningKey tuned_key_for(const detail::OpModel& model, const Config& config, const DeviceInfo& device) {
    return model.tuning_key(device.arch(), kernel_template_hash(model, config, device));
}

std::optional<std::string> unknown_tunable_reason(const detail::OpModel& model, const Config& config,
                                                  const DeviceInfo& device) {
    std::set<std::string> known;
    for (const auto& [name, value] : model.heuristic(device)) known.insert(name);
    for (const Config& candidate : model.search_space(device))
        for (const auto& [name, value] : candidate) known.insert(name);
    for (const auto& [name, value] : config)
        if (!known.count(name))
            return fmt::format("unknown tunable '{}' (this op's: {})", name, fmt::join(known, ", "));
    return std::nullopt;
}

std::optional<std::string> stale_entry_reason(const TuningEntry& entry) {
    try {
        auto op = detail::make_op({entry.key.op, entry.key.shape, entry.key.dtype, entry.key.flags});
        const DeviceInfo device = DeviceInfo::for_arch(entry.key.arch);
        // A hash of no kernel this library has: tuned on another version, whatever its config.
        const jit::TemplateRegistry& registry = jit::TemplateRegistry::instance();
        bool known_kernel = false;
        for (const jit::TemplateFile& file : registry.files())
            known_kernel = known_kernel || registry.template_hash(file.path) == entry.key.template_hash;
        if (!known_kernel) return std::string(kStaleTemplateReason);
        if (auto why = op->model().invalid_reason(entry.config, device)) return fmt::format("invalid config: {}", *why);
        if (auto why = unknown_tunable_reason(op->model(), entry.config, device))
            return fmt::format("invalid config: {}", *why);
        if (entry.key.template_hash != kernel_template_hash(op->model(), entry.config, device))
            return std::string(kStaleTemplateReason);
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
        [&](const TuningEntry& entry) -> std::optional<std::string> {
            if (auto why = model.invalid_reason(entry.config, device)) return why;
            if (entry.key.shape != model.shape()) return model.neighbour_misfit(entry.key.shape, entry.config, device);
            return unknown_tunable_reason(model, entry.config, device);  // tuned for this very shape
        },
        [&](const Config& config) { return kernel_template_hash(model, config, device); });
}

std::string config_text(const Config& config) {
    std::string text;
    for (const auto& [name, value] : config) text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
    return text;
}

}  // namespace tileops::tuning
