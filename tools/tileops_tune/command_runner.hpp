// Shared plumbing of the subcommands: option parsing with --help and --json, and turning
// exceptions into messages and exit codes (2 for bad usage, 1 for failed work).
#pragma once

#include <functional>
#include <string>

#include <cxxopts.hpp>

namespace tileops::cli {

// Builds the command's options (add_options), parses argv, prints --help, then runs `body`.
int run_command(const std::string& name, const std::string& description, int argc, char** argv,
                const std::function<void(cxxopts::Options&)>& add_options,
                const std::function<int(const cxxopts::ParseResult&)>& body);

}  // namespace tileops::cli
