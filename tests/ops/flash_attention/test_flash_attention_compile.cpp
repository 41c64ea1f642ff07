// Every config in the flash attention search space compiles with NVRTC for its arch: the sm_80
// kernel's configs for sm_80, the TMA kernel's for sm_90a; each head dim, non-causal bf16 (test_compile_templates.cpp compiles the heuristic
// configs of every dtype and mask option). Needs no GPU.
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
    for (int64_t head_dim : {64, 128, 256}) {
        FlashAttentionProblem p;
        p.batch = 4, p.num_heads = 16, p.head_dim = head_dim, p.seqlen_q = 4096;
        FlashAttention op(p);
        const detail::OpModel& model = op.model();
        const auto space = model.search_space(device);
        REQUIRE(space.size() >= 2);  // head dim 256 on sm_90a: block_n 64, 2 stages, with or without pingpong
        for (const Config& config : space) test::add_kernels(kernels, model, config, 1, device);
    }
    test::compile_all(kernels, arch);
}
