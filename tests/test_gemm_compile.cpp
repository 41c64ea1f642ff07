// Every config in the GEMM search space compiles with NVRTC, for both layouts, at the widest vector
// width: the sm_80 kernel's configs for sm_80, the TMA kernel's for sm_90a (the sm_80 kernel's
// sm_90a builds and the narrower fallbacks of the heuristic configs are compiled by
// test_compile_templates.cpp: each GEMM kernel takes 1-3 s, and CI has two cores). Needs no GPU.
#include <future>
#include <set>
#include <thread>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "codegen/template_registry.hpp"
#include "ops/op_model.hpp"
#include "runtime/compiler.hpp"
#include "tileops/gemm.hpp"

using namespace tileops;

namespace {

// Compiles each template's kernels in a few NVRTC programs at once (one core each).
void compile_all(const std::map<std::string, std::set<std::string>>& kernels, const std::string& arch) {
    const unsigned workers = std::max(2u, std::thread::hardware_concurrency());
    std::vector<std::pair<std::string, std::vector<std::string>>> jobs;
    for (const auto& [file, names] : kernels) {
        const size_t per_job = (names.size() + workers - 1) / workers;
        std::vector<std::string> chunk;
        for (const std::string& name : names) {
            chunk.push_back(name);
            if (chunk.size() == per_job) jobs.emplace_back(file, std::move(chunk)), chunk.clear();
        }
        if (!chunk.empty()) jobs.emplace_back(file, std::move(chunk));
    }
    std::vector<std::future<runtime::CompileResult>> results;
    for (const auto& [file, names] : jobs)
        results.push_back(std::async(std::launch::async, [&, file = file, names = names] {
            return runtime::compile(codegen::compile_request(file, names, arch));
        }));
    for (size_t i = 0; i < jobs.size(); ++i) {
        INFO(jobs[i].first << " for " << arch << ": " << jobs[i].second.size() << " kernels, first "
                           << jobs[i].second.front());
        runtime::CompileResult result;
        REQUIRE_NOTHROW(result = results[i].get());
        CHECK(result.lowered_names.size() == jobs[i].second.size());
    }
}

}  // namespace

TEST_CASE("every GEMM config of the search space compiles for sm_80 and sm_90a", "[compile][gemm]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    std::map<std::string, std::set<std::string>> kernels;
    // One problem per layout; flags on, so the epilogue code is compiled too.
    for (GemmLayout layout : {GemmLayout::nn, GemmLayout::nt}) {
        GemmProblem p;
        p.m = 4096, p.n = 4096, p.k = 4096, p.layout = layout, p.has_c = true, p.beta = 1.0f, p.bias = true;
        p.epilogue = layout == GemmLayout::nt ? GemmEpilogue::gelu : GemmEpilogue::silu;
        Gemm op(p);
        const detail::OpModel& model = op.model();
        const auto space = model.search_space(device);
        REQUIRE(space.size() >= 8);
        for (const Config& config : space) {
            if ((config.at("kernel") == 1) != (arch == "sm_90a")) continue;
            const detail::LaunchPlan plan = model.plan(config, model.vector_widths(config).front(), device);
            kernels[plan.template_file].insert(plan.name_expression);
        }
    }
    compile_all(kernels, arch);
}
