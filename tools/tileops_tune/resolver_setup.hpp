// How tileops-tune finds the arch it works for and the config a problem gets, the same way the
// runtime does (memory, user databases, shipped database, nearest tuned shape, heuristic).
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "ops/op_model.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::cli {

// --arch, else the arch of GPU 0; throws InvalidArgument when neither is available.
std::string target_arch(const cxxopts::ParseResult& args);

// A resolver for `arch` that searches `user_dbs` (then TILEOPS_TUNING_DB and the shipped ones).
tuning::ConfigResolver make_resolver(const std::string& arch, const std::vector<std::string>& user_dbs);

// The config the runtime would choose for `model` on `device`.
tuning::ConfigChoice choose_config(tuning::ConfigResolver& resolver, const detail::OpModel& model,
                                   const DeviceInfo& device);

}  // namespace tileops::cli
