// The config an op gets on a device: its tuning key (with the template's current content hash)
// looked up through a ConfigResolver, and the op's own checks as the validator. Shared by the
// runtime and tileops-tune, so both choose the same way.
#pragma once

#include "ops/op_model.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::tuning {

// The op's tuning key on `device`'s arch, with the current template hash.
TuningKey tuning_key_for(const detail::OpModel& model, const DeviceInfo& device);

ConfigChoice choose_config(ConfigResolver& resolver, const detail::OpModel& model, const DeviceInfo& device);

// "name=value name=value ...", in the config's (alphabetical) order: for logs and tables.
std::string config_text(const Config& config);

}  // namespace tileops::tuning
