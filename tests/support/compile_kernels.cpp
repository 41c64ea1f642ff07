#include "support/compile_kernels.hpp"

#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "codegen/template_registry.hpp"
#include "runtime/compiler.hpp"

namespace tileops::test {

void add_kernels(KernelsByFile& kernels, const detail::OpModel& model, const Config& config, int vec,
                 const DeviceInfo& device) {
    const detail::LaunchPlan plan = model.plan(config, vec, device);
    for (const std::string& name : plan.name_expressions()) kernels[plan.template_file].insert(name);
}

void compile_all(const KernelsByFile& kernels, const std::string& arch) {
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
        CHECK(result.cubin.size() > 0);
        CHECK(result.lowered_names.size() == jobs[i].second.size());
    }
}

}  // namespace tileops::test
