// tileops-tune warm: compiles every kernel a tuning database or a workload needs into the kernel
// cache, for an arch, with no GPU: a fleet image can ship with a full cache.
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/op_model.hpp"
#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "jit/kernel_builder.hpp"
#include "jit/missed_kernels.hpp"
#include "ops/registry.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/kernel_set.hpp"
#include "tileops_tune/problems.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "tuning/op_config.hpp"

namespace tileops::cli {

int cmd_warm(int argc, char** argv) {
    return run_command(
        "warm", "Compile the kernels of a database's entries and/or a workload's problems into the kernel cache.", argc,
        argv,
        [](cxxopts::Options& options) {
            add_problem_options(options);
            options.add_options()("arch", "target arch, e.g. sm_90a, sm_80 (default: this GPU's)",
                                  cxxopts::value<std::string>())(
                "db", "tuning database(s) whose entries for the arch to compile", cxxopts::value<std::vector<std::string>>())(
                "manifest", "a manifest of kernels a process compiled on the request path (TILEOPS_JIT=warn): "
                "compile exactly those of the arch", cxxopts::value<std::vector<std::string>>())(
                "cache-dir", "kernel cache directory (default: TILEOPS_CACHE_DIR or the user cache)",
                cxxopts::value<std::string>())("j,jobs", "parallel compilations (default: all cores)",
                                               cxxopts::value<unsigned>())(
                "search-space",
                "compile every config of each workload problem's search space (what `tune` times), so that a "
                "tuning run spends its budget timing, not compiling");
        },
        [](const cxxopts::ParseResult& args) {
            const std::string arch = target_arch(args);
            jit::check_arch_supported(arch);
            const DeviceInfo device = DeviceInfo::for_arch(arch);
            std::vector<std::string> dbs;
            if (args.count("db")) dbs = args["db"].as<std::vector<std::string>>();
            for (const std::string& path : dbs) require_input_file(path);
            std::vector<std::string> manifests;
            if (args.count("manifest")) manifests = args["manifest"].as<std::vector<std::string>>();
            for (const std::string& path : manifests) require_input_file(path);
            std::vector<detail::ProblemSpec> problems = problems_from(args);
            if (dbs.empty() && problems.empty() && manifests.empty())
                throw InvalidArgument("give --db, --manifest and/or --workload / --op to say what to compile");

            // Kernels of every database entry for this arch, with the entry's own config.
            DatabaseKernels from_dbs = database_kernels(dbs, device);
            std::set<KernelName>& kernels = from_dbs.kernels;
            const size_t entries = from_dbs.entries, other_arch = from_dbs.other_arch;
            const std::set<std::string>& other_archs = from_dbs.other_archs;
            std::vector<std::string>& bad_entries = from_dbs.bad_entries;
            // Kernels a serving process compiled on the request path, as its manifest names them.
            std::map<std::string, size_t> manifest_other_archs;
            size_t manifest_kernels = 0;
            for (const std::string& path : manifests) {
                std::vector<std::string> rejected;
                for (jit::MissedKernel& k : jit::read_manifest(path, rejected)) {
                    if (k.arch != arch) {
                        ++manifest_other_archs[k.arch];
                        continue;
                    }
                    kernels.insert({std::move(k.template_file), std::move(k.name_expression)});
                    ++manifest_kernels;
                }
                for (const std::string& why : rejected) bad_entries.push_back(fmt::format("{}: {}", path, why));
            }
            // Kernels of every workload problem, with the config the runtime would choose (and,
            // with --search-space, every config `tune` would time).
            add_problem_kernels(problems, dbs, device, args.count("search-space") > 0, kernels);

            // Entries of other archs are not this warm's: said, so that a wrong --arch is not a silent no-op.
            if (other_arch > 0 && !args.count("json"))
                fmt::print(stderr, "skipped {} database entries tuned for {} (this warm is for {})\n", other_arch,
                           fmt::join(other_archs, ", "), arch);
            if (!args.count("json"))
                for (const auto& [other, count] : manifest_other_archs)
                    fmt::print(stderr, "skipped {} manifest kernels for {} (this warm is for {})\n", count, other, arch);
            std::filesystem::path cache_dir =
                args.count("cache-dir") ? std::filesystem::path(args["cache-dir"].as<std::string>())
                                        : jit::DiskCache::default_directory();
            // An empty manifest is a serving process that missed no kernel: nothing to do, done.
            const bool only_empty_manifests = kernels.empty() && bad_entries.empty() && !manifests.empty() &&
                                              manifest_kernels == 0 && manifest_other_archs.empty() &&
                                              other_arch == 0 && problems.empty();
            if (only_empty_manifests) {
                const std::string note = fmt::format("nothing to compile for {}: the manifest{} list{} no kernels",
                                                     arch, manifests.size() == 1 ? "" : "s",
                                                     manifests.size() == 1 ? "s" : "");
                if (args.count("json"))
                    fmt::print("{}\n", nlohmann::json({{"arch", arch},
                                                       {"cache_dir", cache_dir.string()},
                                                       {"kernels", 0},
                                                       {"compiled", 0},
                                                       {"already_cached", 0},
                                                       {"db_entries", entries},
                                                       {"manifest_kernels", 0},
                                                       {"problems", 0},
                                                       {"evicted", 0},
                                                       {"skipped_other_arch", 0},
                                                       {"failed", nlohmann::json::array()},
                                                       {"note", note}})
                                           .dump(2));
                else
                    fmt::print("{}\n", note);
                return 0;
            }
            if (kernels.empty() && bad_entries.empty())
                throw InvalidArgument(fmt::format("nothing to compile for {}: {}", arch,
                                                  other_arch > 0 ? "every database entry is of another arch"
                                                  : !manifest_other_archs.empty()
                                                      ? "every manifest kernel is of another arch"
                                                      : "the databases and manifests hold nothing"));

            jit::KernelBuilder builder(cache_dir, jit::DiskCache::default_max_bytes(), true);
            std::vector<KernelName> list(kernels.begin(), kernels.end());
            const unsigned jobs = args.count("jobs") ? args["jobs"].as<unsigned>() : 0;  // 0: every core
            const CompileOutcome outcome = build_kernels(builder, list, arch, jobs, args.count("json") > 0);
            const std::vector<std::string>& failures = outcome.failures;
            const size_t compiled = outcome.compiled;
            // The maintenance a store triggers, also when everything was cached: temporary files of
            // killed builds and orphan lock files go, the size bound holds.
            builder.cache().evict();

            // Failures: the unusable database entries, then the kernels that did not compile.
            nlohmann::json failed_json = nlohmann::json::array();
            for (const std::string& bad : bad_entries) failed_json.push_back({{"entry", bad}, {"error", bad}});
            size_t failed_kernels = 0;
            for (size_t i = 0; i < list.size(); ++i)
                if (!failures[i].empty()) {
                    ++failed_kernels;
                    failed_json.push_back({{"kernel", list[i].name_expression}, {"error", failures[i]}});
                }
            const size_t failed = failed_json.size(), cached = list.size() - compiled - failed_kernels;
            // A cache bound smaller than the workload evicts what the warm just stored: a warm that
            // leaves kernels out has not done its job, and says so.
            size_t evicted = 0;
            for (size_t i = 0; i < list.size(); ++i) {
                if (!failures[i].empty()) continue;
                const std::string key = builder.cache_key(list[i].template_file, list[i].name_expression, arch);
                std::error_code ec;
                if (!std::filesystem::is_regular_file(builder.cache().entry_path(key), ec)) ++evicted;
            }
            const std::string bound_note =
                evicted == 0 ? "" : missing_kernels_note(builder.cache(), evicted, list.size(), "after the warm");
            if (args.count("json")) {
                nlohmann::json out = {{"arch", arch},           {"cache_dir", cache_dir.string()},
                                      {"kernels", list.size()}, {"compiled", compiled},
                                      {"already_cached", cached},
                                      {"db_entries", entries},  {"manifest_kernels", manifest_kernels},
                                      {"problems", problems.size()},
                                      {"evicted", evicted},     {"skipped_other_arch", other_arch},
                                      {"failed", failed_json}};
                fmt::print("{}\n", out.dump(2));
            } else {
                const std::string from_manifests =
                    manifests.empty() ? "" : fmt::format(", {} manifest kernels", manifest_kernels);
                fmt::print("{} kernels for {} ({} database entries{}, {} workload problems): {} compiled, {} already "
                           "cached, {} failed; cache {}\n",
                           list.size(), arch, entries, from_manifests, problems.size(), compiled, cached, failed,
                           cache_dir.string());
                for (const auto& f : failed_json) fmt::print(stderr, "failed: {}\n", f["error"].get<std::string>());
            }
            if (evicted > 0) fmt::print(stderr, "error: {}\n", bound_note);
            return failed == 0 && evicted == 0 ? 0 : 1;
        });
}

}  // namespace tileops::cli
