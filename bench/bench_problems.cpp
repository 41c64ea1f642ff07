// Times any problem the registry knows, named as tileops-tune names it, against the device's copy
// bandwidth: the bench for a new op before it has a peer of its own.
//
//   bench_problems --problem "embedding 8192x128256x4096 bf16" [--problem "OP SHAPE DTYPE [FLAGS]"]...
//                  [--json out.json] [--repeats N]
//
// --config '{"kernel": 1, "warps": 4, ...}' runs the problems after it with that config instead of
// the one the runtime picks (an A/B of two configs without a database); --config '{}' goes back
// to the runtime's choice. --lengths one_long|long_tail|ragged|uniform likewise draws the problems
// after it with that spread of sequence lengths (decode) or rows a group (grouped GEMM), as
// `tileops-tune tune --lengths` does.
//
// Timing as the tuner times (CUDA events, L2 flushed before each run, median of the repeats);
// bytes are the fewest the op must move (each operand read or written once).
#include <cstdio>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/operand_buffers.hpp"
#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "tuning/op_config.hpp"
#include "bench_common.hpp"
#include "ops/registry.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;

namespace {

// "embedding 8192x128256x4096 bf16 positions1024" -> the problem.
detail::ProblemSpec parse_problem(const std::string& text) {
    std::istringstream words(text);
    detail::ProblemSpec spec;
    std::string shape;
    if (!(words >> spec.op >> shape >> spec.dtype))
        throw InvalidArgument(fmt::format("--problem '{}' is not 'OP SHAPE DTYPE [FLAGS]'", text));
    spec.shape = detail::parse_shape(shape);
    words >> spec.flags;
    return spec;
}

// '{"kernel": 1, "warps": 4}' -> the config ({} for none: the runtime's choice).
Config parse_config(const std::string& text) {
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    if (!value.is_object()) throw InvalidArgument(fmt::format("--config '{}' is not a JSON object", text));
    Config config;
    for (const auto& [key, item] : value.items()) {
        if (!item.is_number_integer()) throw InvalidArgument(fmt::format("--config: '{}' is not an integer", key));
        config[key] = item.get<long long>();
    }
    return config;
}

}  // namespace

int main(int argc, char** argv) {
    struct Problem {
        std::string text;
        Config forced;  // {}: the runtime's choice
        tuning::LengthSpread lengths;
    };
    std::vector<Problem> problems;
    std::string json_path;
    Config forced;
    tuning::LengthSpread lengths = tuning::LengthSpread::uniform;
    int repeats = 50;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--problem" && i + 1 < argc) {
            problems.push_back({argv[++i], forced, lengths});
        } else if ((arg == "--config" || arg == "--lengths") && i + 1 < argc) {
            try {
                if (arg == "--config") forced = parse_config(argv[++i]);
                else lengths = tuning::parse_length_spread(argv[++i]);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "bench_problems: %s\n", e.what());
                return 2;
            }
        } else if (arg == "--json" && i + 1 < argc) {
            json_path = argv[++i];
        } else if (arg == "--repeats" && i + 1 < argc) {
            repeats = std::max(1, std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: bench_problems [--config JSON] [--lengths SPREAD] --problem \"OP SHAPE DTYPE "
                                 "[FLAGS]\"... [--json out.json] [--repeats N]\n");
            return 2;
        }
    }
    try {
        Runtime rt;
        tuning::KernelTimer timer(rt.device());
        const double copy_gbps = bench::measure_copy_bandwidth(timer, repeats);
        bench::print_device(rt.device(), copy_gbps);
        nlohmann::json out = {{"device", rt.device().name}, {"copy_gbps", copy_gbps}, {"results", nlohmann::json::array()}};
        fmt::print("{:<48} {:>10} {:>10} {:>9}  {}\n", "problem", "us", "GB/s", "of copy", "config");
        for (const auto& [text, config_forced, spread] : problems) {
            const auto op = detail::make_op(parse_problem(text));
            tuning::OperandBuffers buffers(op->model(), 1, spread);
            std::function<void()> run = [&] { op->run(rt, buffers.inputs(), buffers.outputs()); };
            std::string config;
            if (config_forced.empty()) {
                rt.prepare(*op);
                config = rt.explain(*op);
            } else {
                // The checks a database entry's config passes at run time.
                config = tuning::config_text(config_forced);
                auto reason = op->model().invalid_reason(config_forced, rt.device());
                if (!reason) reason = tuning::unknown_tunable_reason(op->model(), config_forced, rt.device());
                if (reason) throw InvalidArgument(fmt::format("{}: --config {}: {}", text, config, *reason));
                const int vec = op->vector_width(buffers.inputs(), buffers.outputs());
                const detail::ResolvedLaunch launch = rt.impl().resolve_config(op->model(), config_forced, vec);
                run = [&, launch] { op->launch_with(launch, buffers.inputs(), buffers.outputs(), nullptr); };
            }
            const double ms = bench::time_ms(run, timer, repeats);
            const double gbps = buffers.bytes_moved() / (ms * 1e-3) / 1e9;
            std::string problem = op->describe();
            if (spread != tuning::LengthSpread::uniform) problem += " " + tuning::length_spread_name(spread);
            fmt::print("{:<48} {:>10.2f} {:>10.0f} {:>8.1f}%  {}\n", problem, ms * 1e3, gbps, 100 * gbps / copy_gbps, config);
            out["results"].push_back({{"problem", problem}, {"median_us", ms * 1e3}, {"gbps", gbps},
                                      {"fraction_of_copy", gbps / copy_gbps}, {"config", config}});
        }
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_problems: %s\n", e.what());
        return 1;
    }
    return 0;
}
