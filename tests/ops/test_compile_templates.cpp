// Every kernel the ops can launch with their default (heuristic) configs, at every vector width
// run() may pick, compiles with NVRTC for sm_80 and sm_90a. Needs no GPU.

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "support/compile_kernels.hpp"
#include "ops/registry.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;

namespace {

// Adds the kernels `config` launches, at every vector width run() may pick.
void add_kernels(test::KernelsByFile& kernels, const detail::OpModel& model, const Config& config, const DeviceInfo& device) {
    for (int vec : model.vector_widths(config)) test::add_kernels(kernels, model, config, vec, device);
}

}  // namespace

TEST_CASE("default-config kernels of every op compile for sm_80 and sm_90a", "[compile]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (const auto& op : detail::representative_ops()) {
        const detail::OpModel& model = op->model();
        if (model.unsupported_reason(device)) continue;  // e.g. the FP8 GEMM on sm_80
        const Config config = model.heuristic(device);
        INFO(model.describe());
        REQUIRE_FALSE(model.invalid_reason(config, device).has_value());
        add_kernels(kernels, model, config, device);
    }
    test::compile_all(kernels, arch);
}

TEST_CASE("row-op kernels that prefetch compile for sm_80 and sm_90a", "[compile]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (const auto& op : detail::representative_ops()) {
        const detail::OpModel& model = op->model();
        Config config = model.heuristic(device);
        if (!config.count("prefetch")) continue;  // not a row op
        config["prefetch"] = 1;
        if (model.invalid_reason(config, device)) continue;  // streaming mode, or too much shared memory
        INFO(model.describe());
        add_kernels(kernels, model, config, device);
    }
    CHECK(kernels.size() == 3);  // rmsnorm, layernorm and softmax kernels
    test::compile_all(kernels, arch);
}

TEST_CASE("resident row-op kernels of the long rows' search spaces compile without spilling (ragged ones too)", "[compile]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    std::vector<std::unique_ptr<Op>> ops;
    for (const auto& [rows, cols, dtype] :
         {std::tuple{int64_t{256}, int64_t{262144}, DType::bf16}, std::tuple{int64_t{256}, int64_t{262144}, DType::fp32},
          std::tuple{int64_t{1024}, int64_t{65536}, DType::fp32},
          std::tuple{int64_t{1024}, int64_t{65536}, DType::bf16}}) {
        ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype}));
        ops.push_back(std::make_unique<LayerNorm>(LayerNormProblem{rows, cols, dtype}));
        ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype}));
        ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype, {}, true}));
    }
    test::KernelsByFile kernels;
    for (const auto& op : ops)
        for (const Config& config : op->model().search_space(device))
            if (config.count("slots")) {
                const int vec = static_cast<int>(config.at("vec"));
                test::add_kernels(kernels, op->model(), config, vec, device);
                test::add_kernels(kernels, op->model(), config, detail::ragged_width(vec), device);
            }
    REQUIRE(kernels.size() == 3);  // rmsnorm_resident, layernorm_resident and softmax_resident
    // The ragged kernels hold a row's edges and frame besides, which at 1024 threads (64 registers)
    // spill a few words in some configs; measured at 80-90% of copy on odd rows (docs/perf/rows.md).
    // The bound keeps that from growing unnoticed.
    constexpr int kRaggedSpillBound = 64;
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        INFO(arch << " " << name << ": " << report.spill_bytes << " bytes of spill stores");
        if (name.find("_ragged_kernel<") != std::string::npos)
            CHECK(report.spill_bytes <= kRaggedSpillBound);
        else
            CHECK(report.spill_bytes == 0);
    }
}

TEST_CASE("split softmax kernels compile for sm_80 and sm_90a", "[compile]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (const SoftmaxProblem& problem : {SoftmaxProblem{1, 1048576, DType::bf16}, SoftmaxProblem{3, 1000003, DType::fp32, {}, true}}) {
        const Softmax op(problem);
        for (const Config& config : op.model().search_space(device))
            if (config.count("split")) add_kernels(kernels, op.model(), config, device);
        add_kernels(kernels, op.model(), op.model().heuristic(device), device);
    }
    REQUIRE(kernels.count("rows/softmax_split.cuh") == 1);
    test::compile_all(kernels, arch);
}

TEST_CASE("split norm kernels compile for sm_80 and sm_90a", "[compile]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    // Aligned and ragged rows, with and without the residual add.
    const std::vector<std::shared_ptr<const Op>> ops{
        std::make_shared<RmsNorm>(RmsNormProblem{1, 1048576, DType::bf16}),
        std::make_shared<RmsNorm>(RmsNormProblem{3, 1000003, DType::fp32, {}, 1e-5f, true}),
        std::make_shared<LayerNorm>(LayerNormProblem{1, 1048576, DType::bf16}),
        std::make_shared<LayerNorm>(LayerNormProblem{3, 1000003, DType::fp32})};
    for (const auto& op : ops) {
        for (const Config& config : op->model().search_space(device))
            if (config.count("split")) add_kernels(kernels, op->model(), config, device);
        add_kernels(kernels, op->model(), op->model().heuristic(device), device);
    }
    REQUIRE(kernels.count("rows/rmsnorm_split.cuh") == 1);
    REQUIRE(kernels.count("rows/layernorm_split.cuh") == 1);
    // They stream a chunk a vector at a time: nothing to spill, but for the ragged stats kernel of
    // RMSNorm with the residual at 1024 threads (64 registers), which holds two inputs' edges and
    // spilled 8 bytes (sm_80 and sm_90a, fp32); the bound keeps that from growing unnoticed.
    constexpr int kRaggedSpillBound = 16;
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        INFO(arch << " " << name << ": " << report.spill_bytes << " bytes of spill stores");
        const bool ragged = name.find(", true>") != std::string::npos;  // RAGGED is the last argument
        CHECK(report.spill_bytes <= (ragged ? kRaggedSpillBound : 0));
    }
}
