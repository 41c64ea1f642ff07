// Every config in the flash attention search space compiles with NVRTC for its arch: the sm_80
// kernel's configs for sm_80, the TMA kernel's for sm_90a; the common head dims, one that is not a
// multiple of 64 (80) and distinct Q/K and V dims (192 / 128), non-causal bf16
// (test_compile_templates.cpp compiles the heuristic configs of every dtype and mask option).
// Needs no GPU.
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "core/op_model.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/flash_attention.hpp"

using namespace tileops;

TEST_CASE("every FlashAttention config of the search space compiles for sm_80 and sm_90a", "[compile][flash]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (auto [head_dim, head_dim_v] : {std::pair<int64_t, int64_t>{64, 64}, {80, 80}, {128, 128}, {192, 128}, {256, 256}}) {
        FlashAttentionProblem p;
        p.batch = 4, p.num_heads = 16, p.head_dim = head_dim, p.head_dim_v = head_dim_v, p.seqlen_q = 4096;
        FlashAttention op(p);
        const detail::OpModel& model = op.model();
        const auto space = model.search_space(device);
        REQUIRE(space.size() >= 2);  // head dim 256 on sm_90a: block_n 64, 2 stages, with or without pingpong
        for (const Config& config : space) test::add_kernels(kernels, model, config, 1, device);
    }
    test::compile_all(kernels, arch);
}

// Every head dim the op takes (multiples of 16 up to 256), with the heuristic's config: the
// consumers' accumulators stay in registers and the P V MMAs (one over the whole 64-column boxes,
// one over the rest) are not serialized. Past a value head dim of 192 the consumers take 240
// registers and leave the producer 24: its work queue spills (124 bytes, the head dim 256
// kernel's since it was written), off the MMAs' path. The same for the one-consumer kernel.
TEST_CASE("the sm_90a FlashAttention kernel of every head dim keeps its accumulators in registers", "[compile][flash]") {
    const DeviceInfo device = DeviceInfo::for_arch("sm_90a");
    test::KernelsByFile kernels;
    std::vector<std::pair<int64_t, int64_t>> dims{{192, 128}, {128, 192}};
    for (int64_t d = 16; d <= 256; d += 16) dims.emplace_back(d, d);
    for (auto [head_dim, head_dim_v] : dims) {
        FlashAttentionProblem p;
        p.batch = 4, p.num_heads = 16, p.head_dim = head_dim, p.head_dim_v = head_dim_v, p.seqlen_q = 4096;
        FlashAttention op(p);
        test::add_kernels(kernels, op.model(), op.model().heuristic(device), 1, device);
        // One consumer (two blocks an SM, 232 registers a consumer thread), where it runs.
        const Config one{{"kernel", 1}, {"block_m", 64}, {"block_n", head_dim > 192 ? 64 : 128},
                         {"warps", 8},  {"stages", 2},   {"pingpong", 0}};
        if (!op.model().invalid_reason(one, device)) test::add_kernels(kernels, op.model(), one, 1, device);
    }
    for (const auto& [name, report] : test::compile_all_with_report(kernels, "sm_90a")) {
        INFO(name << ": " << report.spill_bytes << " bytes of spill stores");
        // flash_attention_sm90_kernel<T, HEAD_DIM, HEAD_DIM_V, ...>
        const size_t v_dim = name.find(", ", name.find(", ") + 2) + 2;
        CHECK(report.spill_bytes <= (std::stoi(name.substr(v_dim)) > 192 ? 128 : 0));
        CHECK_FALSE(report.wgmma_serialized);
    }
}
