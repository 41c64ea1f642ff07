#include "tileops_tune/resolver_setup.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cuda/device.hpp"
#include "jit/bundle.hpp"
#include "jit/compiler.hpp"
#include "ops/registry.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"

namespace tileops::cli {

std::string target_arch(const cxxopts::ParseResult& args) {
    if (!args.count("arch")) {
        if (cuda::device_count() > 0) return cuda::query_device(0).arch();
        throw InvalidArgument("no GPU found: give --arch (e.g. --arch sm_90a)");
    }
    const std::string arch = args["arch"].as<std::string>();
    // Kernels, cache entries and tuning keys carry the arch the runtime names a GPU by: anything
    // else would be compiled or tuned for nothing.
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    if (device.sm() < 80)
        throw InvalidArgument(fmt::format("--arch {}: the kernels need sm_80 or newer", arch));
    if (device.arch() != arch)
        throw InvalidArgument(fmt::format("--arch {}: a GPU of compute capability {}.{} runs {} kernels; use --arch {}",
                                          arch, device.cc_major, device.cc_minor, device.arch(), device.arch()));
    check_arch_option("--arch", arch);
    return arch;
}

void check_arch_option(const std::string& option, const std::string& arch) {
    try {
        jit::check_arch_supported(arch);
    } catch (const Unsupported& e) {
        std::string why = e.what();
        if (why.rfind("tileops: ", 0) == 0) why.erase(0, 9);
        throw InvalidArgument(fmt::format("{} {}: {}", option, arch, why));
    }
}

std::string target_gpu(const cxxopts::ParseResult& args) {
    if (args.count("gpu")) return args["gpu"].as<std::string>();
    if (!args.count("arch") && cuda::device_count() > 0) return cuda::query_device(0).name;
    return "";
}

tuning::ConfigResolver make_resolver(const std::string& arch, const std::vector<std::string>& user_dbs,
                                     const std::string& gpu_name) {
    tuning::ResolverOptions options;
    options.arch = arch;
    options.gpu_name = gpu_name;
    options.nvrtc_version = jit::nvrtc_version();
    options.user_dbs = user_dbs;
    // A process serving TILEOPS_BUNDLE searches its databases after the user's (the runtime's
    // order), so what explain says is what that process runs.
    if (const std::optional<std::string> path = util::env("TILEOPS_BUNDLE"))
        for (auto& [name, text] : jit::Bundle(*path).databases())
            options.bundled_dbs.emplace_back(fmt::format("{}:{}", *path, name), std::move(text));
    return tuning::ConfigResolver(options);
}

void add_filter_options(cxxopts::Options& options) {
    options.add_options("filter")("filter-op", "only entries of this op", cxxopts::value<std::string>())(
        "filter-arch", "only entries of this arch", cxxopts::value<std::string>())(
        "filter-dtype", "only entries of this dtype", cxxopts::value<std::string>())(
        "filter-shape", "only entries of this shape, e.g. 8192x4096", cxxopts::value<std::string>())(
        "filter-flags", "only entries with exactly these flags (comma-separated; \"\" for none)",
        cxxopts::value<std::string>());
}

void check_filters(const cxxopts::ParseResult& args) {
    if (!args.count("filter-op")) return;
    const std::string op = args["filter-op"].as<std::string>();
    const auto& known = detail::known_ops();
    if (std::find(known.begin(), known.end(), op) == known.end())
        throw InvalidArgument(fmt::format("--filter-op {}: no such op (ops: {})", op, fmt::join(known, ", ")));
}

bool matches_filters(const TuningEntry& entry, const cxxopts::ParseResult& args) {
    if (args.count("filter-op") && entry.key.op != args["filter-op"].as<std::string>()) return false;
    if (args.count("filter-arch") && entry.key.arch != args["filter-arch"].as<std::string>()) return false;
    if (args.count("filter-dtype") && entry.key.dtype != args["filter-dtype"].as<std::string>()) return false;
    if (args.count("filter-shape") && fmt::format("{}", fmt::join(entry.key.shape, "x")) != args["filter-shape"].as<std::string>())
        return false;
    if (args.count("filter-flags") && entry.key.flags != args["filter-flags"].as<std::string>()) return false;
    return true;
}

void require_input_file(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw InvalidArgument(fmt::format("{}: no such file", path));
}

std::string input_file(const cxxopts::ParseResult& args, const std::string& option, const char* what) {
    if (!args.count(option)) throw InvalidArgument(fmt::format("give {}", what));
    const std::string path = args[option].as<std::string>();
    require_input_file(path);
    return path;
}

nlohmann::json config_json(const Config& config) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [name, value] : config) object[name] = value;
    return object;
}

nlohmann::json entry_json(const TuningEntry& e) {
    // The database's own serialization, so the CLI never drifts from the file format.
    TuningDb one;
    one.upsert(e);
    return nlohmann::json::parse(one.to_json())["entries"][0];
}

}  // namespace tileops::cli
