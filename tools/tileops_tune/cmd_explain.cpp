// tileops-tune explain: which config a problem would get on an arch, and why (the runtime's own
// lookup: memory, user databases, shipped databases (this GPU's fleet, then other fleets'),
// nearest tuned shape, heuristic).
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ops/registry.hpp"
#include "tileops/error.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/problems.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "tuning/op_config.hpp"

namespace tileops::cli {
namespace {

std::string bytes_text(size_t bytes) {
    return bytes < 1'000'000 ? fmt::format("{} bytes", bytes) : fmt::format("{:.1f} MB", bytes * 1e-6);
}

// "; a workspace of 33.8 MB", or where misaligned operands need more (a GEMM's aligned copies of
// their rows) "; no workspace, 67.1 MB with operands off 16 bytes"; nothing where none ever is.
std::string workspace_text(size_t aligned, size_t most) {
    if (most == 0) return "";
    const std::string first = aligned == 0 ? "; no workspace" : "; a workspace of " + bytes_text(aligned);
    return aligned == most ? first : fmt::format("{}, {} with operands off 16 bytes", first, bytes_text(most));
}

}  // namespace

int cmd_explain(int argc, char** argv) {
    return run_command(
        "explain", "Which config a problem would get on an arch, and why.", argc, argv,
        [](cxxopts::Options& options) {
            add_problem_options(options);
            options.add_options()("arch", "arch to explain for (default: this GPU's)", cxxopts::value<std::string>())(
                "gpu", "GPU model whose fleet's shipped database comes first, as the driver names it, e.g. "
                       "\"NVIDIA H200\" (default: this GPU's without --arch)",
                cxxopts::value<std::string>())(
                "db", "user tuning database(s) searched first", cxxopts::value<std::vector<std::string>>());
        },
        [](const cxxopts::ParseResult& args) {
            std::vector<detail::ProblemSpec> problems = problems_from(args);
            if (problems.empty()) throw InvalidArgument("give a problem with --op/--shape or --workload");
            const std::string arch = target_arch(args);
            const DeviceInfo device = DeviceInfo::for_arch(arch);
            std::vector<std::string> dbs;
            if (args.count("db")) dbs = args["db"].as<std::vector<std::string>>();
            for (const std::string& path : dbs) require_input_file(path);
            const std::string gpu = target_gpu(args);
            tuning::ConfigResolver resolver = make_resolver(arch, dbs, gpu);
            nlohmann::json out = nlohmann::json::array();
            for (const auto& spec : problems) {
                auto op = detail::make_op(spec);
                tuning::ConfigChoice choice = tuning::choose_config(resolver, op->model(), device);
                // The hash an entry with this config must carry to apply: that of the kernel
                // template the config selects (entries tuned on an edited kernel are stale).
                std::string hash = "none: the config cannot run here";
                // The device memory the op allocates at its first run (split partial results,
                // counters, aligned copies of rows): with aligned operands (the widest launch
                // width), and at most (a narrower width, for operands off 16 bytes).
                size_t workspace = 0, workspace_max = 0;
                if (!op->model().invalid_reason(choice.config, device)) {
                    hash = tuning::kernel_template_hash(op->model(), choice.config, device);
                    const std::vector<int> widths = op->model().vector_widths(choice.config);
                    for (int width : widths)
                        workspace_max = std::max(workspace_max, op->model().workspace_bytes(choice.config, width));
                    if (!widths.empty()) workspace = op->model().workspace_bytes(choice.config, widths.front());
                }
                out.push_back({{"problem", describe(spec)},
                               {"arch", arch},
                               {"gpu", gpu},
                               {"template_hash", hash},
                               {"config", config_json(choice.config)},
                               {"source", tuning::to_string(choice.source)},
                               {"origin", choice.origin},
                               {"distance", choice.distance},
                               {"explanation", choice.explanation},
                               {"workspace_bytes", workspace},
                               {"workspace_bytes_max", workspace_max}});
                if (!args.count("json"))
                    fmt::print("{} on {}{}: {{{}}} from {}{}: {} (template hash {}{})\n", describe(spec), arch,
                               gpu.empty() ? "" : " (" + gpu + ")",
                               config_text(choice.config), tuning::to_string(choice.source),
                               choice.origin.empty() ? "" : " " + choice.origin, choice.explanation, hash.substr(0, 12),
                               workspace_text(workspace, workspace_max));
            }
            for (const std::string& stale : resolver.stale_entries())
                if (!args.count("json")) fmt::print(stderr, "ignored: {}\n", stale);
            if (args.count("json")) fmt::print("{}\n", out.dump(2));
            return 0;
        });
}

}  // namespace tileops::cli
