// What several tileops-tune commands share: the arch they work for, a config resolver set up like
// the runtime's, and database filters.
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "tileops/tuning_db.hpp"
#include "tuning/config_choice.hpp"
#include "tuning/op_config.hpp"

namespace tileops::cli {

// --arch, else the arch of GPU 0; throws InvalidArgument when neither is available, and for an
// --arch the runtime never names a GPU by (below sm_80, sm_90 for sm_90a, sm_100a for sm_100) or
// that this NVRTC cannot compile for (check_arch_option).
std::string target_arch(const cxxopts::ParseResult& args);
// An arch given on the command line (`option`, e.g. "--arch") that this NVRTC cannot compile for is
// bad usage: InvalidArgument naming the option.
void check_arch_option(const std::string& option, const std::string& arch);

// --gpu, else GPU 0's model name where no --arch is given and a GPU is present, else "" (no fleet).
std::string target_gpu(const cxxopts::ParseResult& args);

// A resolver for `arch` that searches `user_dbs` first, then the shipped databases (those of
// `gpu_name`'s fleet first; ResolverOptions::gpu_name).
tuning::ConfigResolver make_resolver(const std::string& arch, const std::vector<std::string>& user_dbs,
                                     const std::string& gpu_name = "");

// Adds --op, --arch and --dtype filters (for list, show, verify).
void add_filter_options(cxxopts::Options& options);
// Throws InvalidArgument for a --filter-op that names no op (a typo would list nothing).
void check_filters(const cxxopts::ParseResult& args);
bool matches_filters(const TuningEntry& entry, const cxxopts::ParseResult& args);

// A missing input file is bad usage (exit status 2), like a missing argument: InvalidArgument.
void require_input_file(const std::string& path);
// The path given for `option` (InvalidArgument "give <what>" when absent), which must exist.
std::string input_file(const cxxopts::ParseResult& args, const std::string& option, const char* what);

using tuning::config_text;
nlohmann::json config_json(const Config& config);
// The entry as JSON, as the database stores it.
nlohmann::json entry_json(const TuningEntry& entry);

}  // namespace tileops::cli
