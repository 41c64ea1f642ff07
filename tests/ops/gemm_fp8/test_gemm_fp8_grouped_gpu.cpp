// GemmFp8Grouped against a double-precision reference on the dequantized inputs: random e4m3
// codes, random positive scales (each group's own for B), every scaling, uneven groups (empty,
// one row, rows past a tile), both group layouts, K with a partial last 128-element step, fp32
// and bf16 D, an activation, rows outside every group left poisoned, and every config of the
// search space.
#include <algorithm>
#include <cmath>
#include <optional>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/device_tensor.hpp"
#include "support/gemm_reference.hpp"
#include "support/run_op.hpp"
#include "support/test_support.hpp"
#include "tuning/op_config.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

// As GemmFp8's tests: the inputs are exactly what the kernel multiplies; fp32 D within 2e-3, a
// 16-bit D within its rounding.
double fp8_tolerance(DType out) { return out == DType::fp32 ? 2e-3 : 1.6e-2; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Case {
    GemmFp8GroupedProblem p;
    std::vector<int> group_rows;   // offsets [groups + 1] or counts [groups]
    std::optional<Config> config;  // run this config (twice, D poisoned in between) instead of the runtime's
};

void run_case(Case c) {
    shared_runtime();  // first: it makes the device's context current for the allocations
    const GemmFp8GroupedProblem& p = c.p;
    const bool masked = p.group_layout == GemmGroupLayout::masked;
    const int64_t rows = masked ? p.groups * p.rows : p.rows;
    const int64_t k_blocks = ceil_div(p.k, 128), n_blocks = ceil_div(p.n, 128);
    INFO(fmt::format("{} groups x {} rows, N {}, K {}, {} {} out {} {}", p.groups, p.rows, p.n, p.k,
                     gemm_group_layout_name(p.group_layout), gemm_fp8_scaling_name(p.scaling), dtype_name(p.out_dtype),
                     gemm_epilogue_name(p.epilogue)));
    GemmFp8Grouped op(p);
    const uint64_t seed = static_cast<uint64_t>(p.groups * 7 + rows * 131 + p.n * 17 + p.k + static_cast<int>(p.scaling));
    const std::vector<double> a = test::round_to(DType::fp8_e4m3, test::random_values(rows * p.k, seed + 1, -240, 240));
    const std::vector<double> b = test::round_to(DType::fp8_e4m3, test::random_values(p.groups * p.n * p.k, seed + 2, -240, 240));
    const double norm = 1.0 / (240.0 * std::sqrt(static_cast<double>(p.k)));
    int64_t count_a = 1, count_b = p.groups;
    if (p.scaling == GemmFp8Scaling::per_row) count_a = rows, count_b = p.groups * p.n;
    if (p.scaling == GemmFp8Scaling::blocks) count_a = k_blocks * rows, count_b = p.groups * n_blocks * k_blocks;
    const std::vector<double> sa = test::random_values(count_a, seed + 3, 0.5 * norm, 2.0 * norm);
    const std::vector<double> sb = test::random_values(count_b, seed + 4, 0.25 / 240, 1.0 / 240);
    auto scale_a = [&](int64_t r, int64_t kk) {
        return p.scaling == GemmFp8Scaling::per_tensor ? sa[0] : p.scaling == GemmFp8Scaling::per_row ? sa[r] : sa[(kk / 128) * rows + r];
    };
    auto scale_b = [&](int64_t g, int64_t j, int64_t kk) {
        return p.scaling == GemmFp8Scaling::per_tensor ? sb[g]
               : p.scaling == GemmFp8Scaling::per_row  ? sb[g * p.n + j]
                                                       : sb[(g * n_blocks + j / 128) * k_blocks + kk / 128];
    };
    DeviceMatrix da(DType::fp8_e4m3, rows, p.k), db(DType::fp8_e4m3, p.groups * p.n, p.k);
    DeviceMatrix dsa(DType::fp32, 1, count_a), dsb(DType::fp32, 1, count_b), dd(p.out_dtype, rows, p.n);
    DeviceMatrix dgroups(DType::int32, 1, static_cast<int64_t>(c.group_rows.size()));
    da.upload(a), db.upload(b), dsa.upload(sa), dsb.upload(sb);
    dgroups.upload(std::vector<double>(c.group_rows.begin(), c.group_rows.end()));
    std::vector<TensorArg> inputs{da.data(), db.data(), dsa.data(), dsb.data(), dgroups.data()};
    test::run_op(op, inputs, OutputArg(dd.data()), dd, c.config);
    const std::vector<double> got = dd.download();
    std::vector<int64_t> owner(rows, -1);
    for (int64_t g = 0; g < p.groups; ++g) {
        const int64_t begin = masked ? g * p.rows : c.group_rows[g];
        const int64_t end = masked ? begin + c.group_rows[g] : c.group_rows[g + 1];
        for (int64_t r = begin; r < end; ++r) owner[r] = g;
    }
    std::vector<double> out_values, ref_values;
    bool others_untouched = true;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t g = owner[r];
        for (int64_t j = 0; j < p.n; ++j) {
            if (g < 0) {
                others_untouched = others_untouched && std::isnan(got[r * p.n + j]);
                continue;
            }
            double sum = 0;
            for (int64_t kk = 0; kk < p.k; ++kk)
                sum += a[r * p.k + kk] * scale_a(r, kk) * b[(g * p.n + j) * p.k + kk] * scale_b(g, j, kk);
            ref_values.push_back(test::gemm_activation(p.epilogue, p.alpha * sum));
            out_values.push_back(got[r * p.n + j]);
        }
    }
    CHECK(others_untouched);
    const double error = test::relative_error(out_values, test::round_to(p.out_dtype, ref_values));
    INFO("relative error " << error << " over " << out_values.size() << " outputs");
    CHECK(error <= fp8_tolerance(p.out_dtype));
}

GemmFp8GroupedProblem make(int64_t groups, int64_t rows, int64_t n, int64_t k, GemmFp8Scaling scaling,
                           GemmGroupLayout layout = GemmGroupLayout::contiguous) {
    GemmFp8GroupedProblem p;
    p.groups = groups, p.rows = rows, p.n = n, p.k = k, p.scaling = scaling, p.group_layout = layout;
    return p;
}

}  // namespace

TEST_CASE("GemmFp8Grouped matches a double-precision reference under every scaling", "[gpu][gemm_fp8_grouped]") {
    TILEOPS_REQUIRE_GPU();
    if (shared_runtime().device().sm() != 90) SKIP("the FP8 GEMM needs sm_90");
    const GemmFp8Scaling scaling = GENERATE(GemmFp8Scaling::per_tensor, GemmFp8Scaling::per_row, GemmFp8Scaling::blocks);
    // Rows before the first group and after the last belong to none; K = 272: a partial last step.
    const std::vector<int> offsets{3, 3, 4, 81, 81, 210, 510, 574};
    Case contiguous{make(7, 590, 200, 272, scaling), offsets};
    run_case(contiguous);
    Case fp32{make(7, 590, 256, 1024, scaling), offsets};
    fp32.p.out_dtype = DType::fp32, fp32.p.alpha = 0.5f, fp32.p.epilogue = GemmEpilogue::silu;
    run_case(fp32);
    run_case(Case{make(5, 70, 384, 512, scaling, GemmGroupLayout::masked), {0, 1, 70, 17, 65}});
}

TEST_CASE("GemmFp8Grouped: every config of the search space on uneven groups", "[gpu][gemm_fp8_grouped][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    if (runtime.device().sm() != 90) SKIP("the FP8 GEMM needs sm_90");
    const GemmFp8Scaling scaling = GENERATE(GemmFp8Scaling::per_row, GemmFp8Scaling::blocks);
    const GemmFp8GroupedProblem p = make(5, 1137, 520, 384, scaling);
    for (const Config& config : test::this_shard(GemmFp8Grouped(p).model().search_space(runtime.device()))) {
        Case c{p, {0, 300, 300, 813, 877, 1137}};
        c.config = config;
        run_case(c);
    }
}
