// Every config in the GEMM search space compiles with NVRTC, for both layouts, at the aligned
// width: the sm_80 kernel's configs for sm_80, the TMA kernel's for sm_90a, the skinny kernel's for
// both; and the heuristic's config at every width run() may take (the copy kernel that packs
// unaligned A and B, the TMA kernel storing D from registers). Each GEMM kernel takes 1-3 s to
// compile, and CI has two cores: the other configs' other widths are the same code paths. Needs no GPU.
#include <initializer_list>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/gemm.hpp"

using namespace tileops;

namespace {

// Checks that no kernel spills. The test compiles its kernels in a few large NVRTC programs, and
// ptxas' choices there vary with the company a kernel keeps (a kernel that spilled 4 bytes among
// 80 others did not alone); the runtime compiles each kernel in a program of its own, so a kernel
// that spills in the group is compiled again alone, and that is what must not spill.
void check_no_spills(const test::KernelsByFile& kernels, const std::string& arch) {
    for (const auto& [name, report] : test::compile_all_with_report(kernels, arch)) {
        if (report.spill_bytes == 0) continue;
        test::KernelsByFile alone;
        alone[kernels.begin()->first].insert(name);
        const int spilled = test::compile_all_with_report(alone, arch).begin()->second.spill_bytes;
        INFO(arch << " " << name << ": " << spilled << " bytes of spill stores compiled alone (" << report.spill_bytes
                  << " among the others)");
        CHECK(spilled == 0);
    }
}

}  // namespace


TEST_CASE("every GEMM config of the search space compiles for sm_80 and sm_90a", "[compile][gemm]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    // One problem per layout, and 16-row ones where the skinny kernel (sm_80+) joins; flags
    // on, so the epilogue code is compiled too. The sm_80 kernel is compiled for sm_80, the TMA
    // kernel for sm_90a, the skinny kernel for both.
    for (const auto& [layout, m] : {std::pair{GemmLayout::nn, 4096}, std::pair{GemmLayout::nt, 4096}, std::pair{GemmLayout::nt, 16},
                                    std::pair{GemmLayout::nn, 16}}) {
        GemmProblem p;
        p.m = m, p.n = 4096, p.k = 4096, p.layout = layout, p.has_c = true, p.beta = 1.0f, p.bias = true;
        p.epilogue = layout == GemmLayout::nt ? GemmEpilogue::gelu : GemmEpilogue::silu;
        Gemm op(p);
        const detail::OpModel& model = op.model();
        const auto space = model.search_space(device);
        REQUIRE(space.size() >= 8);
        int skinny = 0;
        for (const Config& config : space) {
            const long long kernel = config.at("kernel");
            skinny += kernel == 2;
            if (kernel == 0 && arch != "sm_80") continue;
            if (kernel == 1 && arch != "sm_90a") continue;
            test::add_kernels(kernels, model, config, model.vector_widths(config).front(), device);
        }
        CHECK((skinny > 0) == (m <= 64));
        const Config heuristic = model.heuristic(device);
        for (int width : model.vector_widths(heuristic)) test::add_kernels(kernels, model, heuristic, width, device);
    }
    test::compile_all(kernels, arch);
}

// Every config of `kernel` in the search spaces of these problems (C, bias and an activation on),
// none spilling.
static void check_kernel_configs_do_not_spill(const std::string& arch, int kernel,
                                              std::initializer_list<std::pair<GemmLayout, int64_t>> problems,
                                              int64_t nn_n, GemmEpilogue epilogue) {
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (const auto& [layout, m] : problems) {
        GemmProblem p;
        p.m = m, p.n = layout == GemmLayout::nt ? 4096 : nn_n, p.k = 4095, p.layout = layout, p.has_c = true,
        p.beta = 1.0f, p.bias = true;
        p.epilogue = epilogue;
        Gemm op(p);
        const detail::OpModel& model = op.model();
        for (const Config& config : model.search_space(device))
            if (config.at("kernel") == kernel)
                test::add_kernels(kernels, model, config, model.vector_widths(config).front(), device);
    }
    REQUIRE(kernels.size() == 1);
    CHECK(kernels.begin()->second.size() >= 12);  // (a sharded run, the asan preset's, compiles a share)
    check_no_spills(kernels, arch);
}

// The skinny kernel keeps its accumulators, a 64 x 64 tile's 128 a lane included, and each
// fragment row's shift (gemm_skinny.cuh) in registers.
TEST_CASE("the skinny kernel's configs compile without spilling for sm_80 and sm_90a", "[compile][gemm]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    check_kernel_configs_do_not_spill(
        arch, 2, {{GemmLayout::nt, 16}, {GemmLayout::nt, 64}, {GemmLayout::nn, 16}, {GemmLayout::nn, 64}}, 4095,
        GemmEpilogue::silu);
}

// The gemv kernel keeps a lane's loads in flight (up to 8 chunks) and, in layout NN, 8 sums per
// row of A (32 at block_m 4) in registers. NN's N of 4095 makes few enough blocks that sm_90's
// space splits K over clusters too.
TEST_CASE("the gemv kernel's configs compile without spilling for sm_80 and sm_90a", "[compile][gemm]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    check_kernel_configs_do_not_spill(
        arch, 3, {{GemmLayout::nt, 1}, {GemmLayout::nt, 4}, {GemmLayout::nn, 1}, {GemmLayout::nn, 4}}, 4095,
        GemmEpilogue::gelu);
}
