#include "jit/compile_order.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "util/parallel_for.hpp"

namespace tileops::jit {

namespace {

// Compile times per kernel function, ms: the mean over the kernels of a warm of the shipped
// database and tools/workloads/llama3-8b.json on a 2-core machine (NVRTC 13.0, sm_90a,
// TILEOPS_LOG_LEVEL=debug), and bench_nvrtc for the families that warm does not hold. Only the
// ratios matter; docs/perf/compile.md has the figures.
constexpr std::pair<std::string_view, double> kMeasuredMs[] = {
    {"mla_decode_seesaw_kernel", 1938},
    {"sampling_kernel", 1004},
    {"decode_attention_mma_kernel", 841},
    {"decode_attention_mma_fp8_kernel", 841},
    {"decode_attention_kernel", 774},
    {"flash_attention_sm90_kernel", 737},
    {"layernorm_resident_ragged_kernel", 722},
    {"mla_decode_sm90_kernel", 650},
    {"softmax_resident_ragged_kernel", 559},
    {"gemm_sm90_kernel", 552},
    {"layernorm_resident_kernel", 431},
    {"softmax_resident_kernel", 410},
    {"rmsnorm_resident_ragged_kernel", 348},
    {"rmsnorm_resident_kernel", 268},
    {"moe_permute_route_kernel", 230},
    {"layernorm_ragged_kernel", 221},
    {"quantize_per_token_kernel", 200},
    {"rmsnorm_ragged_kernel", 193},
    {"mla_merge_kernel", 192},
    {"rope_kernel", 182},
    {"layernorm_kernel", 178},
    {"rmsnorm_kernel", 173},
    {"moe_unpermute_kernel", 150},
    {"softmax_ragged_kernel", 144},
    {"elementwise_ragged_kernel", 132},
    {"moe_topk_kernel", 132},
    {"softmax_split_stats_kernel", 125},
    {"softmax_split_apply_kernel", 122},
    {"softmax_kernel", 114},
    {"elementwise_kernel", 72},
    {"embedding_kernel", 64},
    {"gemm_sm90_pack_kernel", 63},
};

// "tileops::gemm_sm90_kernel<...>" -> "gemm_sm90_kernel".
std::string_view function_name(std::string_view expression) {
    expression = expression.substr(0, expression.find('<'));
    const size_t colon = expression.rfind("::");
    return colon == std::string_view::npos ? expression : expression.substr(colon + 2);
}

// Tensor-core and long single-kernel families take most of a second; the memory-bound ones a
// fraction of one.
double family_ms(std::string_view template_file) {
    const std::string_view family = template_file.substr(0, template_file.find('/'));
    for (std::string_view heavy : {"gemm", "gemm_fp8", "flash_attention", "decode_attention", "mla_decode", "sampling"})
        if (family == heavy) return 700;
    return family == "rows" ? 250 : 150;
}

}  // namespace

double expected_compile_ms(std::string_view template_file, std::string_view name_expression) {
    const std::string_view name = function_name(name_expression);
    for (const auto& [function, ms] : kMeasuredMs)
        if (function == name) return ms;
    return family_ms(template_file);
}

std::vector<std::string_view> measured_kernel_functions() {
    std::vector<std::string_view> names;
    for (const auto& [function, ms] : kMeasuredMs) names.push_back(function);
    return names;
}

std::vector<size_t> costliest_first(size_t n, const std::function<double(size_t)>& cost) {
    std::vector<double> costs(n);
    for (size_t i = 0; i < n; ++i) costs[i] = cost(i);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
    return order;
}

void for_each_costliest_first(size_t n, size_t threads, const std::function<KernelRef(size_t)>& kernel,
                              const std::function<void(size_t)>& build) {
    const std::vector<size_t> order = costliest_first(n, [&](size_t i) {
        const KernelRef k = kernel(i);
        return expected_compile_ms(k.template_file, k.name_expression);
    });
    util::parallel_for_each(order.size(), threads, [&](size_t position) { build(order[position]); });
}

}  // namespace tileops::jit
