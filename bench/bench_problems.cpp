// Times any problem the registry knows, named as tileops-tune names it, against the device's copy
// bandwidth: the bench for a new op before it has a peer of its own.
//
//   bench_problems --problem "embedding 8192x128256x4096 bf16" [--problem "OP SHAPE DTYPE [FLAGS]"]...
//                  [--json out.json] [--repeats N]
//
// Timing as the tuner times (CUDA events, L2 flushed before each run, median of the repeats);
// bytes are the fewest the op must move (each operand read or written once).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/operand_buffers.hpp"
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

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> problems;
    std::string json_path;
    int repeats = 50;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--problem" && i + 1 < argc) problems.push_back(argv[++i]);
        else if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
        else {
            std::fprintf(stderr, "usage: bench_problems --problem \"OP SHAPE DTYPE [FLAGS]\"... [--json out.json] [--repeats N]\n");
            return 2;
        }
    }
    try {
        Runtime rt;
        tuning::KernelTimer timer(rt.device());
        const double copy_gbps = bench::measure_copy_bandwidth(timer, repeats);
        bench::print_device(rt.device(), copy_gbps);
        nlohmann::json out = {{"device", rt.device().name}, {"copy_gbps", copy_gbps}, {"results", nlohmann::json::array()}};
        fmt::print("{:<48} {:>10} {:>10} {:>9}\n", "problem", "us", "GB/s", "of copy");
        for (const std::string& text : problems) {
            const auto op = detail::make_op(parse_problem(text));
            tuning::OperandBuffers buffers(op->model(), 1);
            rt.prepare(*op);
            const double ms = bench::time_ms([&] { op->run(rt, buffers.inputs(), buffers.outputs()); }, timer, repeats);
            const double gbps = buffers.bytes_moved() / (ms * 1e-3) / 1e9;
            fmt::print("{:<48} {:>10.2f} {:>10.0f} {:>8.1f}%\n", op->describe(), ms * 1e3, gbps, 100 * gbps / copy_gbps);
            out["results"].push_back({{"problem", op->describe()}, {"median_us", ms * 1e3}, {"gbps", gbps},
                                      {"fraction_of_copy", gbps / copy_gbps}, {"config", rt.explain(*op)}});
        }
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_problems: %s\n", e.what());
        return 1;
    }
    return 0;
}
