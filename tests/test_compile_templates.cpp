// Every kernel the ops can launch with their default (heuristic) configs, at every vector width
// run() may pick, compiles with NVRTC for sm_80 and sm_90a. Needs no GPU.
#include <future>
#include <map>
#include <set>

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
    // One NVRTC program per file and batch of kernels; the batches compile in parallel.
    struct Batch {
        std::string file;
        std::vector<std::string> names;
    };
    std::vector<Batch> batches;
    constexpr size_t kBatch = 12;
    for (const auto& [file, names] : kernels)
        for (auto it = names.begin(); it != names.end();) {
            Batch batch{file, {}};
            for (; it != names.end() && batch.names.size() < kBatch; ++it) batch.names.push_back(*it);
            batches.push_back(std::move(batch));
        }
    std::vector<std::future<runtime::CompileResult>> results;
    for (const Batch& batch : batches)
        results.push_back(std::async(std::launch::async, [&batch, &arch] {
            return runtime::compile(codegen::compile_request(batch.file, batch.names, arch));
        }));
    for (size_t i = 0; i < batches.size(); ++i) {
        INFO(batches[i].file << " for " << arch << ": " << batches[i].names.size() << " kernels");
        runtime::CompileResult result;
        REQUIRE_NOTHROW(result = results[i].get());
        CHECK(result.cubin.size() > 0);
        CHECK(result.lowered_names.size() == batches[i].names.size());
    }
}
