// The kernels a set of database entries needs on one arch, and their compilation on every core
// with progress: what `warm` and `pack` share.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "jit/kernel_builder.hpp"
#include "tileops/device_info.hpp"

namespace tileops::cli {

struct KernelName {
    std::string template_file, name_expression;
    bool operator<(const KernelName& o) const {
        return std::tie(template_file, name_expression) < std::tie(o.template_file, o.name_expression);
    }
};

// Every kernel `model` may launch with `config`: one per launch width run() may pick, with their
// side kernels.
void add_kernels(const detail::OpModel& model, const Config& config, const DeviceInfo& device, std::set<KernelName>& out);

struct DatabaseKernels {
    std::set<KernelName> kernels;
    size_t entries = 0;                    // entries of the arch whose kernels are in the set
    size_t other_arch = 0;                 // entries tuned for another arch (skipped)
    std::set<std::string> other_archs;
    std::vector<std::string> bad_entries;  // entries this library cannot build, and why
};

// The kernels of every entry of these databases for `device`'s arch, each with its own config.
DatabaseKernels database_kernels(const std::vector<std::string>& dbs, const DeviceInfo& device);

// Adds the kernels of each problem with the config a runtime would choose given these databases
// (and, with search_space, of every config `tune` would time).
void add_problem_kernels(const std::vector<detail::ProblemSpec>& problems, const std::vector<std::string>& dbs,
                         const DeviceInfo& device, bool search_space, std::set<KernelName>& out);

struct CompileOutcome {
    size_t compiled = 0;                // NVRTC ran (the rest were in the cache)
    std::vector<std::string> failures;  // per kernel, empty where it built
};

// Builds every kernel through `builder` (compiling misses) on `jobs` threads (0: every core),
// showing progress on stderr unless `quiet`.
CompileOutcome build_kernels(jit::KernelBuilder& builder, const std::vector<KernelName>& kernels, const std::string& arch,
                             unsigned jobs, bool quiet);

// Why `missing` of the `total` kernels a command just stored are not in `cache` ("after the warm"):
// the cache could not be written, or its size bound (TILEOPS_CACHE_MAX_MB) evicted them.
std::string missing_kernels_note(const jit::DiskCache& cache, size_t missing, size_t total, const char* after);

}  // namespace tileops::cli
