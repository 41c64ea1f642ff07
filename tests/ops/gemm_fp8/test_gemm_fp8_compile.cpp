// Every FP8 GEMM config of the search space compiles with NVRTC for sm_90a, with every scaling
// and the epilogue options on, without spilling its accumulators (the K step's tile doubles them)
// and with its wgmmas kept asynchronous. Needs no GPU.
#include <catch2/catch_test_macros.hpp>

#include "core/op_model.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/gemm_fp8.hpp"

using namespace tileops;

TEST_CASE("every FP8 GEMM config of the search space compiles for sm_90a", "[compile][gemm_fp8]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    test::KernelsByFile kernels;
    for (GemmFp8Scaling scaling : {GemmFp8Scaling::per_tensor, GemmFp8Scaling::per_row, GemmFp8Scaling::blocks}) {
        GemmFp8Problem p;
        p.m = 4096, p.n = 4096, p.k = 4096, p.scaling = scaling;
        p.has_c = true, p.beta = 1.0f, p.bias = true, p.epilogue = GemmEpilogue::gelu;
        GemmFp8 op(p);
        const detail::OpModel& model = op.model();
        // The whole space once (per-tensor); the other scalings at their heuristic's config.
        auto configs = scaling == GemmFp8Scaling::per_tensor ? model.search_space(device)
                                                             : std::vector<Config>{model.heuristic(device)};
        // Block scales over two blocks of B's: the 192-column tiles (their promotion has two forms).
        if (scaling == GemmFp8Scaling::blocks)
            for (const Config& config : model.search_space(device))
                if (config.at("block_n") == 192) configs.push_back(config);
        REQUIRE_FALSE(configs.empty());
        // Every width: D stored with TMA and from registers.
        for (const Config& config : configs)
            for (int width : model.vector_widths(config)) test::add_kernels(kernels, model, config, width, device);
    }
    for (const auto& [name, report] : test::compile_all_with_report(kernels, "sm_90a")) {
        INFO(name << ": " << report.spill_bytes << " bytes of spill stores");
        CHECK(report.spill_bytes == 0);
        CHECK_FALSE(report.wgmma_serialized);
    }
}
