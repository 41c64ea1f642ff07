// tileops-tune pack / unpack: a fleet bundle (jit/bundle.hpp), one file holding the databases and
// every kernel their entries need for a set of archs. pack compiles what the kernel cache lacks
// (no GPU needed) and writes the bundle; a process serves it with TILEOPS_BUNDLE, read-only, or
// unpack copies it into a kernel cache and a directory of databases.
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "jit/bundle.hpp"
#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "jit/kernel_builder.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/kernel_set.hpp"
#include "tileops_tune/problems.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "util/file_util.hpp"

namespace tileops::cli {
namespace fs = std::filesystem;

namespace {

fs::path cache_dir_of(const cxxopts::ParseResult& args) {
    return args.count("cache-dir") ? fs::path(args["cache-dir"].as<std::string>()) : jit::DiskCache::default_directory();
}

// The archs to pack: --arch, else every arch the databases are for.
std::vector<std::string> pack_archs(const cxxopts::ParseResult& args, const std::vector<std::string>& dbs) {
    std::set<std::string> archs;
    if (args.count("arch")) {
        // Given on the command line: one NVRTC cannot compile for is bad usage, as in warm and explain.
        for (const std::string& arch : args["arch"].as<std::vector<std::string>>()) {
            check_arch_option("--arch", arch);
            archs.insert(arch);
        }
    } else {
        for (const std::string& path : dbs) {
            const TuningDb db = TuningDb::load(path);
            if (!db.meta().arch.empty()) archs.insert(db.meta().arch);
            for (const TuningEntry& entry : db.entries()) archs.insert(entry.key.arch);
        }
    }
    if (archs.empty()) throw InvalidArgument("the databases name no arch and none was given: pass --arch");
    for (const std::string& arch : archs) jit::check_arch_supported(arch);
    return {archs.begin(), archs.end()};
}

}  // namespace

int cmd_pack(int argc, char** argv) {
    return run_command(
        "pack",
        "Write a fleet bundle: the databases and every kernel their entries (and a workload's problems) need, for "
        "each arch (compiling what the kernel cache lacks; no GPU needed).",
        argc, argv,
        [](cxxopts::Options& options) {
            add_problem_options(options);
            options.add_options()("db", "a tuning database to ship (repeatable)", cxxopts::value<std::vector<std::string>>())(
                "arch", "an arch to compile for (repeatable; default: the databases' archs)",
                cxxopts::value<std::vector<std::string>>())("o,output", "the bundle to write", cxxopts::value<std::string>())(
                "cache-dir", "kernel cache to take kernels from and compile into (default: TILEOPS_CACHE_DIR or the "
                "user cache)", cxxopts::value<std::string>())("j,jobs", "parallel compilations (default: all cores)",
                                                              cxxopts::value<unsigned>());
        },
        [](const cxxopts::ParseResult& args) {
            if (!args.count("db")) throw InvalidArgument("give --db: the databases to ship");
            if (!args.count("output")) throw InvalidArgument("give -o: the bundle to write");
            const std::vector<std::string> dbs = args["db"].as<std::vector<std::string>>();
            for (const std::string& path : dbs) require_input_file(path);
            // A workload's problems too, with the configs the fleet will choose from these
            // databases (a tuned entry, a near one or the heuristic): then nothing compiles there.
            const std::vector<detail::ProblemSpec> workload = problems_from(args);
            jit::BundleContents contents;
            contents.nvrtc_version = jit::nvrtc_version();
            contents.archs = pack_archs(args, dbs);
            std::set<std::string> names;
            for (const std::string& path : dbs) {
                const std::string name = fs::path(path).filename().string();
                if (!names.insert(name).second)
                    throw InvalidArgument(fmt::format("two databases are named {}: a bundle holds them by file name", name));
                std::string why;
                std::optional<std::string> text = util::read_file(path, util::kMaxReadBytes, &why);
                if (!text) throw FileError(fmt::format("cannot read {}: {}", path, why));
                contents.databases.emplace_back(name, std::move(*text));
            }

            jit::KernelBuilder builder(cache_dir_of(args), jit::DiskCache::default_max_bytes(), true);
            const unsigned jobs = args.count("jobs") ? args["jobs"].as<unsigned>() : 0;
            std::vector<std::string> failed;
            for (const std::string& arch : contents.archs) {
                const DeviceInfo device = DeviceInfo::for_arch(arch);
                DatabaseKernels wanted = database_kernels(dbs, device);
                add_problem_kernels(workload, dbs, device, false, wanted.kernels);
                for (const std::string& bad : wanted.bad_entries) failed.push_back(bad);
                const std::vector<KernelName> list(wanted.kernels.begin(), wanted.kernels.end());
                const CompileOutcome outcome = build_kernels(builder, list, arch, jobs, args.count("json") > 0);
                for (size_t i = 0; i < list.size(); ++i) {
                    if (!outcome.failures[i].empty()) {
                        failed.push_back(fmt::format("{} for {}: {}", list[i].name_expression, arch, outcome.failures[i]));
                        continue;
                    }
                    const std::string key = builder.cache_key(list[i].template_file, list[i].name_expression, arch);
                    std::optional<std::string> payload = builder.cache().load(key);
                    if (!payload) {
                        failed.push_back(fmt::format("{} for {}: {}", list[i].name_expression, arch,
                                                     missing_kernels_note(builder.cache(), 1, 1, "after building it")));
                        continue;
                    }
                    contents.kernels.push_back({key, arch, std::move(*payload)});
                }
            }
            // A bundle with holes would compile (or fail, under TILEOPS_JIT=off) on the fleet: none is written.
            if (!failed.empty()) {
                for (const std::string& what : failed) fmt::print(stderr, "failed: {}\n", what);
                fmt::print(stderr, "error: {} kernels or entries failed; no bundle written\n", failed.size());
                return 1;
            }
            const fs::path output = args["output"].as<std::string>();
            jit::write_bundle(output, contents);
            const auto bytes = fs::file_size(output);
            if (args.count("json")) {
                fmt::print("{}\n", nlohmann::json{{"bundle", output.string()},
                                                  {"archs", contents.archs},
                                                  {"databases", contents.databases.size()},
                                                  {"kernels", contents.kernels.size()},
                                                  {"bytes", bytes}}
                                       .dump(2));
            } else {
                fmt::print("{} kernels for {} and {} databases in {} ({:.1f} MB)\n", contents.kernels.size(),
                           fmt::join(contents.archs, ", "), contents.databases.size(), output.string(), bytes / 1e6);
            }
            return 0;
        });
}

int cmd_unpack(int argc, char** argv) {
    return run_command(
        "unpack",
        "Check a fleet bundle and copy its kernels into a kernel cache (and its databases into a directory); "
        "--list only lists and checks it.",
        argc, argv,
        [](cxxopts::Options& options) {
            options.add_options()("bundle", "the bundle to read", cxxopts::value<std::string>())(
                "cache-dir", "kernel cache to fill (default: TILEOPS_CACHE_DIR or the user cache)",
                cxxopts::value<std::string>())("db-dir", "directory to write the bundle's databases into",
                                               cxxopts::value<std::string>())(
                "list", "list the bundle's contents, checking every checksum; write nothing");
            options.parse_positional({"bundle"});
            options.positional_help("BUNDLE");
        },
        [](const cxxopts::ParseResult& args) {
            if (!args.count("bundle")) throw InvalidArgument("give the bundle to read");
            const std::string path = args["bundle"].as<std::string>();
            require_input_file(path);
            const jit::Bundle bundle(path);
            const bool list_only = args.count("list") > 0;
            std::optional<jit::DiskCache> cache;
            if (!list_only) cache.emplace(cache_dir_of(args));
            size_t kernels = 0, databases = 0;
            nlohmann::json listed = nlohmann::json::array();
            for (const jit::BundleBlob& blob : bundle.blobs()) {
                const std::string bytes = bundle.read(blob);  // FileError on a checksum mismatch
                listed.push_back({{"kind", blob.kind}, {"name", blob.name}, {"arch", blob.arch}, {"bytes", blob.size}});
                if (blob.kind == "kernel") {
                    ++kernels;
                    if (cache) cache->store(blob.name, bytes);
                } else {
                    ++databases;
                    if (!list_only && args.count("db-dir"))
                        util::write_file_atomic(fs::path(args["db-dir"].as<std::string>()) / blob.name, bytes);
                }
            }
            // A cache bound smaller than the bundle evicts what was just copied: said, as warm does.
            size_t evicted = 0;
            if (cache)
                for (const jit::BundleBlob& blob : bundle.blobs()) {
                    std::error_code ec;
                    evicted += blob.kind == "kernel" && !fs::is_regular_file(cache->entry_path(blob.name), ec);
                }
            if (evicted > 0)
                fmt::print(stderr, "error: {}\n", missing_kernels_note(*cache, evicted, kernels, "after unpacking"));
            if (args.count("json")) {
                nlohmann::json out = {{"bundle", path},        {"nvrtc_version", bundle.nvrtc_version()},
                                      {"archs", bundle.archs()}, {"kernels", kernels},
                                      {"databases", databases}};
                if (list_only) out["blobs"] = listed;
                if (cache) out["cache_dir"] = cache->directory().string(), out["evicted"] = evicted;
                fmt::print("{}\n", out.dump(2));
            } else {
                if (list_only)
                    for (const auto& blob : listed)
                        fmt::print("{:<9} {:<8} {:>10}  {}\n", blob["kind"].get<std::string>(), blob["arch"].get<std::string>(),
                                   blob["bytes"].get<uint64_t>(), blob["name"].get<std::string>());
                fmt::print("{} kernels for {} and {} databases, every checksum sound (NVRTC {}){}\n", kernels,
                           fmt::join(bundle.archs(), ", "), databases, bundle.nvrtc_version(),
                           cache ? fmt::format("; kernels copied into {}", cache->directory().string()) : "");
            }
            return evicted == 0 ? 0 : 1;
        });
}

}  // namespace tileops::cli
