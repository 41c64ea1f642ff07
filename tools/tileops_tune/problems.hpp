// The problems a tileops-tune command works on: from --op/--shape/--dtype/--flags, or from a
// workload file (JSON: {"problems": [{"op": ..., "shape": [rows, cols], "dtype": ..., "flags": ...}]}).
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "ops/registry.hpp"

namespace tileops::cli {

// Adds --op, --shape, --dtype, --flags and --workload to a command's options.
void add_problem_options(cxxopts::Options& options);

// The problems named by the parsed options; throws InvalidArgument (or FileError for a workload
// file) naming what is wrong. Empty when none were given.
std::vector<detail::ProblemSpec> problems_from(const cxxopts::ParseResult& args);

std::vector<detail::ProblemSpec> load_workload(const std::string& path);

std::string describe(const detail::ProblemSpec& spec);

}  // namespace tileops::cli
