// The config an op gets on a device: its tuning key (with the template's current content hash)
// looked up through a ConfigResolver, and the op's own checks as the validator. Shared by the
// runtime and tileops-tune, so both choose the same way.
#pragma once

#include <optional>
#include <string>

#include "core/op_model.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::tuning {

// The op's tuning key on `device`'s arch, to look a config up with (no template hash: that
// depends on the config).
TuningKey tuning_key_for(const detail::OpModel& model, const DeviceInfo& device);

// The key of an entry that records `config` for the op on `device`: with the content hash of the
// kernel template the config selects (as this library embeds it).
TuningKey tuned_key_for(const detail::OpModel& model, const Config& config, const DeviceInfo& device);

// The content hash of the kernel template `config` selects for the op on `device` (the template
// of its widest vector width: the kernel the autotuner times). Throws what plan() throws for a
// config the op cannot run.
std::string kernel_template_hash(const detail::OpModel& model, const Config& config, const DeviceInfo& device);

// Why this library would never use `entry` (tuned with another version of the kernel template
// its config selects, or for a problem or arch it does not know), or nullopt when it would.
std::optional<std::string> stale_entry_reason(const TuningEntry& entry);

// A tunable of `config` that none of `model`'s configs on `device` has (its heuristic's, its search
// space's): a misspelled name in a hand-written database ("prefech"), which the op would otherwise
// ignore and run with its default. nullopt when every name is known.
std::optional<std::string> unknown_tunable_reason(const detail::OpModel& model, const Config& config,
                                                  const DeviceInfo& device);

// The op's heuristic config, or, where `device` cannot run it (less shared memory than the
// heuristic assumed, as on sm_86 / sm_89 against sm_80), the first config of its search space
// that it can. The heuristic itself when none fits, so that resolving it says why.
Config heuristic_that_fits(const detail::OpModel& model, const DeviceInfo& device);

// A tuned entry (exact or nearest shape) when one is usable, else heuristic_that_fits().
ConfigChoice choose_config(ConfigResolver& resolver, const detail::OpModel& model, const DeviceInfo& device);

// "name=value name=value ...", in the config's (alphabetical) order: for logs and tables.
std::string config_text(const Config& config);

}  // namespace tileops::tuning
