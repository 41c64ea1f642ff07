// Every kernel the ops can launch with their default (heuristic) configs, at every vector width
// run() may pick, compiles with NVRTC for sm_80 and sm_90a. Needs no GPU.
#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "codegen/template_registry.hpp"
#include "ops/op_model.hpp"
#include "runtime/compiler.hpp"
#include "support/problems.hpp"

using namespace tileops;

TEST_CASE("default-config kernels of every op compile for sm_80 and sm_90a", "[compile]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    // template file -> every name expression the ops produce (one NVRTC program per file).
    std::map<std::string, std::set<std::string>> kernels;
    for (const auto& op : test::representative_ops()) {
        const detail::OpModel& model = op->model();
        Config config = model.heuristic(device);
        INFO(model.describe());
        REQUIRE_FALSE(model.invalid_reason(config, device).has_value());
        for (int vec : model.vector_widths(config))
            kernels[model.template_file()].insert(model.plan(config, vec, device).name_expression);
    }
    // One NVRTC program per template file and core (a file of many slow kernels, like the GEMM's,
    // is split), compiled at once.
    const size_t workers = std::max(2u, std::thread::hardware_concurrency());
    std::vector<std::pair<std::string, std::vector<std::string>>> jobs;
    for (const auto& [file, names] : kernels) {
        const size_t per_job = (names.size() + workers - 1) / workers;
        for (auto it = names.begin(); it != names.end();) {
            std::vector<std::string> chunk;
            while (it != names.end() && chunk.size() < per_job) chunk.push_back(*it++);
            jobs.emplace_back(file, std::move(chunk));
        }
    }
    std::vector<std::future<runtime::CompileResult>> results;
    for (const auto& job : jobs)
        results.push_back(std::async(std::launch::async, [&job, &arch] {
            return runtime::compile(codegen::compile_request(job.first, job.second, arch));
        }));
    for (size_t i = 0; i < jobs.size(); ++i) {
        INFO(jobs[i].first << " for " << arch << ": " << jobs[i].second.size() << " kernels");
        runtime::CompileResult result;
        REQUIRE_NOTHROW(result = results[i].get());
        CHECK(result.cubin.size() > 0);
        CHECK(result.lowered_names.size() == jobs[i].second.size());
    }
}
