// Where an NVRTC compile's time goes, per op family, and what compile options change it. For one
// problem of each family (the registry's first representative op of each, its heuristic config
// at its widest vector width), compiles the kernel as the library does and with each variant of
// the options, median of --repeats wall-clock compiles, and NVRTC's own phase times (--time).
// Needs no GPU.
//
// With --dump DIR, also writes each cubin there (FAMILY.cubin, FAMILY.VARIANT.cubin), to compare
// the code a variant gives (cuobjdump -sass).
//
//   bench_nvrtc [--arch sm_90a] [--repeats 3] [--json out.json] [--variants "-minimal;--split-compile=0"] [--dump DIR]
//               [--only gemm,flash_attention]
#include <unistd.h>

#include <cctype>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "core/op_model.hpp"
#include "jit/compiler.hpp"
#include "jit/template_registry.hpp"
#include "ops/registry.hpp"
#include "tileops/op.hpp"
#include "tileops/tuning_db.hpp"

using namespace tileops;
namespace fs = std::filesystem;

namespace {

// Wall-clock milliseconds of one compile; with a `dump` path, writes the cubin there.
double compile_ms(const jit::CompileRequest& request, const fs::path& dump = {}) {
    const auto start = std::chrono::steady_clock::now();
    const jit::CompileResult result = jit::compile(request);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!dump.empty()) std::ofstream(dump, std::ios::binary) << result.cubin;
    return ms;
}

// A variant's options as a file name part: "--Ofast-compile=mid" -> "Ofast-compile_mid".
std::string file_part(const std::string& variant) {
    std::string out;
    for (char c : variant) {
        const bool kept = std::isalnum(static_cast<unsigned char>(c)) || c == '-';
        if (kept && !(c == '-' && out.empty())) out += c;  // leading dashes dropped
        else if (!kept && !out.empty() && out.back() != '_') out += '_';
    }
    return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> parts;
    std::stringstream in(text);
    for (std::string part; std::getline(in, part, separator);)
        if (!part.empty()) parts.push_back(part);
    return parts;
}

// NVRTC's phase times (--time=FILE writes a CSV of phase, milliseconds), summed per phase.
std::map<std::string, double> phase_ms(jit::CompileRequest request) {
    const fs::path file = fs::temp_directory_path() / fmt::format("tileops_nvrtc_time_{}.csv", ::getpid());
    fs::remove(file);
    request.extra_options.push_back("--time=" + file.string());
    jit::compile(request);
    std::map<std::string, double> phases;
    std::ifstream in(file);
    // Rows: "file name, phase name, metric, unit" (a header first).
    for (std::string line; std::getline(in, line);) {
        const std::vector<std::string> columns = split(line, ',');
        if (columns.size() < 4 || columns[3].find("ms") == std::string::npos) continue;
        try {
            phases[columns[1].substr(columns[1].find_first_not_of(' '))] += std::stod(columns[2]);
        } catch (...) {
        }
    }
    fs::remove(file);
    return phases;
}


}  // namespace

int main(int argc, char** argv) {
    std::string arch = "sm_90a", json_path, dump, only;
    std::string variants = "-minimal;--split-compile=0;-minimal --split-compile=0";
    int repeats = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--arch" && i + 1 < argc) arch = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--variants" && i + 1 < argc) variants = argv[++i];
        else if (arg == "--dump" && i + 1 < argc) dump = argv[++i];
        else if (arg == "--only" && i + 1 < argc) only = argv[++i];
        else {
            fmt::print(stderr, "usage: bench_nvrtc [--arch sm_90a] [--repeats N] [--json out.json] [--variants \"A;B\"] "
                               "[--dump DIR] [--only FAMILY,...]\n");
            return 2;
        }
    }
    if (!dump.empty()) fs::create_directories(dump);
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    nlohmann::json out = {{"arch", arch}, {"nvrtc", jit::nvrtc_version()}};
    std::map<std::string, bool> seen_family;
    for (const auto& op : detail::representative_ops()) {
        const detail::OpModel& model = op->model();
        const std::string family = model.op_name();
        if (seen_family[family]) continue;
        seen_family[family] = true;
        const std::vector<std::string> wanted = split(only, ',');
        if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), family) == wanted.end()) continue;
        const Config config = model.heuristic(device);
        const std::vector<int> widths = model.vector_widths(config);
        const detail::LaunchPlan plan = model.plan(config, widths.empty() ? 1 : widths.front(), device);
        const jit::CompileRequest base = jit::compile_request(plan.template_file, {plan.name_expression}, arch);
        std::vector<double> times;
        const auto dump_path = [&](const std::string& name) { return dump.empty() ? fs::path() : fs::path(dump) / name; };
        for (int r = 0; r < repeats; ++r) times.push_back(compile_ms(base, r == 0 ? dump_path(family + ".cubin") : fs::path()));
        const double base_ms = bench::median(times);
        nlohmann::json row = {{"problem", op->describe()}, {"kernel", plan.name_expression}, {"ms", base_ms},
                              {"phases_ms", phase_ms(base)}};
        fmt::print("{:<40} {:8.0f} ms", op->describe(), base_ms);
        for (const std::string& variant : split(variants, ';')) {
            jit::CompileRequest request = base;
            for (const std::string& option : split(variant, ' ')) request.extra_options.push_back(option);
            times.clear();
            try {
                const fs::path variant_dump = dump_path(fmt::format("{}.{}.cubin", family, file_part(variant)));
                for (int r = 0; r < repeats; ++r) times.push_back(compile_ms(request, r == 0 ? variant_dump : fs::path()));
                row["variants"][variant] = bench::median(times);
                fmt::print("   {}: {:.0f}", variant, bench::median(times));
            } catch (const std::exception& e) {
                row["variants"][variant] = e.what();
                fmt::print("   {}: failed", variant);
            }
        }
        fmt::print("\n");
        for (const auto& [phase, ms] : row["phases_ms"].items()) fmt::print("    {:<50} {:8.1f} ms\n", phase, ms.get<double>());
        out["families"][family] = row;
    }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << '\n';
    return 0;
}
