// The config an op gets on a device: its tuning key (with the template's current content hash)
// looked up through a ConfigResolver, and the op's own checks as the validator. Shared by the
// runtime and tileops-tune, so both choose the same way.
#pragma once

#include <optional>
#include <string>

#include "ops/op_model.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::tuning {

// The op's tuning key on `device`'s arch, with the current template hash.
TuningKey tuning_key_for(const detail::OpModel& model, const DeviceInfo& device);

// The content hash of the op's kernel template as this library embeds it.
std::string current_template_hash(const detail::OpModel& model);

// Why this library would never use `entry` on any device (tuned with another version of its op's
// kernel template, or for a problem it does not know), or nullopt when it would.
std::optional<std::string> stale_entry_reason(const TuningEntry& entry);

// The op's heuristic config, or, where `device` cannot run it (less shared memory than the
// heuristic assumed, as on sm_86 / sm_89 against sm_80), the first config of its search space
// that it can. The heuristic itself when none fits, so that resolving it says why.
Config heuristic_that_fits(const detail::OpModel& model, const DeviceInfo& device);

// A tuned entry (exact or nearest shape) when one is usable, else heuristic_that_fits().
ConfigChoice choose_config(ConfigResolver& resolver, const detail::OpModel& model, const DeviceInfo& device);

// "name=value name=value ...", in the config's (alphabetical) order: for logs and tables.
std::string config_text(const Config& config);

}  // namespace tileops::tuning
