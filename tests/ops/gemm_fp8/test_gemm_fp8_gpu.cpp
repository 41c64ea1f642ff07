// GemmFp8 against a double-precision reference on the dequantized inputs: random e4m3 codes
// (never zeros) and random positive scales, every scaling, ragged M and N, K not a multiple of
// the 128-element step, long K (where the FP8 tensor cores' narrow accumulation would show
// without the kernel's promotion to fp32), C, bias and activations, batches, padded operands,
// D stored with TMA (16-bit rows on 16 bytes) and from registers, poisoned outputs, and every
// config of the search space.
#include <cmath>
#include <optional>
#include <utility>

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

// The inputs are exactly what the kernel multiplies, so the error is the accumulation's (fp32
// after each 128-element step; the tensor cores' within it) and D's rounding: a 16-bit D is
// within its rounding (the reference is rounded the same way); an fp32 D within 2e-3, a bound
// that leaves room for the tensor cores' narrower sums inside each step.
double fp8_tolerance(DType out) { return out == DType::fp32 ? 2e-3 : 1.6e-2; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Fp8Case {
    GemmFp8Problem p;
    int64_t pad = 0;               // extra elements per row of D and C (A and B: 16, when set)
    std::optional<Config> config;  // run this config (twice, D poisoned in between) instead of the runtime's choice
};

void run_case(Fp8Case c) {
    GemmFp8Problem& p = c.p;
    const DType out = p.out_dtype;
    p.lda = p.ldb = p.k + (c.pad ? 16 : 0);
    p.ldc = p.ldd = p.n + c.pad;
    INFO(fmt::format("{}x{}x{}x{} scaling {} out {} beta {} bias {} {} pad {}", p.batch, p.m, p.n, p.k,
                     gemm_fp8_scaling_name(p.scaling), dtype_name(out), p.has_c ? p.beta : 0.0f, p.bias,
                     gemm_epilogue_name(p.epilogue), c.pad));
    GemmFp8 op(p);
    const uint64_t seed = static_cast<uint64_t>(p.m * 131 + p.n * 17 + p.k + static_cast<int>(p.scaling));
    // Codes spread over e4m3's range; the scales keep each dot product O(1) whatever K is.
    const std::vector<double> a = test::round_to(DType::fp8_e4m3, test::random_values(p.batch * p.m * p.k, seed + 1, -240, 240));
    const std::vector<double> b = test::round_to(DType::fp8_e4m3, test::random_values(p.batch * p.n * p.k, seed + 2, -240, 240));
    const double norm = 1.0 / (240.0 * std::sqrt(static_cast<double>(p.k)));
    int64_t count_a = 1, count_b = 1;
    if (p.scaling == GemmFp8Scaling::per_row) count_a = p.m, count_b = p.n;
    if (p.scaling == GemmFp8Scaling::blocks) count_a = ceil_div(p.k, 128) * p.m, count_b = ceil_div(p.n, 128) * ceil_div(p.k, 128);
    const std::vector<double> sa = test::random_values(count_a, seed + 3, 0.5 * norm, 2.0 * norm);
    const std::vector<double> sb = test::random_values(count_b, seed + 4, 0.25 / 240, 1.0 / 240);
    auto scale_a = [&](int64_t i, int64_t kk) {
        return p.scaling == GemmFp8Scaling::per_tensor ? sa[0] : p.scaling == GemmFp8Scaling::per_row ? sa[i] : sa[(kk / 128) * p.m + i];
    };
    auto scale_b = [&](int64_t j, int64_t kk) {
        return p.scaling == GemmFp8Scaling::per_tensor ? sb[0]
               : p.scaling == GemmFp8Scaling::per_row  ? sb[j]
                                                       : sb[(j / 128) * ceil_div(p.k, 128) + kk / 128];
    };
    std::vector<double> cvals, bias;
    if (p.has_c) cvals = test::round_to(out, test::random_values(p.batch * p.m * p.n, seed + 5));
    if (p.bias) bias = test::round_to(out, test::random_values(p.n, seed + 6));

    DeviceMatrix da(DType::fp8_e4m3, p.batch * p.m, p.k, p.lda), db(DType::fp8_e4m3, p.batch * p.n, p.k, p.ldb);
    DeviceMatrix dsa(DType::fp32, 1, count_a), dsb(DType::fp32, 1, count_b);
    DeviceMatrix dc(out, p.batch * p.m, p.n, p.ldc), dd(out, p.batch * p.m, p.n, p.ldd), dbias(out, 1, p.n);
    da.upload(a), db.upload(b), dsa.upload(sa), dsb.upload(sb);
    std::vector<TensorArg> inputs{da.data(), db.data(), dsa.data(), dsb.data()};
    if (p.has_c) dc.upload(cvals), inputs.emplace_back(dc.data());
    if (p.bias) dbias.upload(bias), inputs.emplace_back(dbias.data());
    test::run_op(op, inputs, OutputArg(dd.data()), dd, c.config);
    std::vector<double> ref(p.batch * p.m * p.n);
    for (int64_t bt = 0; bt < p.batch; ++bt)
        for (int64_t i = 0; i < p.m; ++i)
            for (int64_t j = 0; j < p.n; ++j) {
                const double* ar = a.data() + (bt * p.m + i) * p.k;
                const double* br = b.data() + (bt * p.n + j) * p.k;
                double sum = 0;
                for (int64_t kk = 0; kk < p.k; ++kk) sum += ar[kk] * scale_a(i, kk) * br[kk] * scale_b(j, kk);
                double v = p.alpha * sum;
                if (p.bias) v += bias[j];
                if (p.has_c) v += p.beta * cvals[(bt * p.m + i) * p.n + j];
                ref[(bt * p.m + i) * p.n + j] = test::gemm_activation(p.epilogue, v);
            }
    const double error = test::relative_error(dd.download(), test::round_to(out, ref));
    INFO("relative error " << error << " (tolerance " << fp8_tolerance(out) << ")");
    CHECK(error <= fp8_tolerance(out));
    if (c.pad > 0) CHECK(dd.gaps_untouched());
}

GemmFp8Problem make(int64_t m, int64_t n, int64_t k, GemmFp8Scaling scaling, DType out = DType::bf16) {
    GemmFp8Problem p;
    p.m = m, p.n = n, p.k = k, p.scaling = scaling, p.out_dtype = out;
    return p;
}

bool fp8_device() { return shared_runtime().device().sm() == 90; }

}  // namespace

TEST_CASE("GemmFp8 matches a double-precision reference on the dequantized inputs", "[gpu][gemm_fp8]") {
    TILEOPS_REQUIRE_GPU();
    if (!fp8_device()) SKIP("the FP8 GEMM needs sm_90");
    const GemmFp8Scaling scaling = GENERATE(GemmFp8Scaling::per_tensor, GemmFp8Scaling::per_row, GemmFp8Scaling::blocks);
    // One row; ragged M and N; K of 17 steps of 16 (the last 128-element step partial); long K;
    // a round square; fp32 and fp16 out.
    run_case({make(1, 200, 256, scaling)});
    run_case({make(77, 300, 4096, scaling)});
    run_case({make(300, 520, 272, scaling)});
    run_case({make(256, 384, 1024, scaling, DType::fp32)});
    run_case({make(129, 1000, 512, scaling, DType::fp16)});
}

TEST_CASE("GemmFp8 epilogue, batches and padded rows", "[gpu][gemm_fp8]") {
    TILEOPS_REQUIRE_GPU();
    if (!fp8_device()) SKIP("the FP8 GEMM needs sm_90");
    GemmFp8Problem fused = make(200, 328, 640, GemmFp8Scaling::per_row);
    fused.alpha = 0.75f, fused.has_c = true, fused.beta = 0.5f, fused.bias = true, fused.epilogue = GemmEpilogue::gelu;
    run_case({fused});
    fused.scaling = GemmFp8Scaling::blocks, fused.epilogue = GemmEpilogue::silu, fused.out_dtype = DType::fp32;
    run_case({fused, 3});  // D and C rows 3 elements longer: D stored from registers, unaligned
    GemmFp8Problem batched = make(70, 130, 384, GemmFp8Scaling::per_tensor);
    batched.batch = 3;
    run_case({batched, 16});
}

TEST_CASE("GemmFp8: every config of the search space on ragged problems", "[gpu][gemm_fp8][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    if (!fp8_device()) SKIP("the FP8 GEMM needs sm_90");
    // N = 328: rows of 656 bytes, D stored with TMA; N = 330: from registers.
    for (const auto& [scaling, n] : {std::pair{GemmFp8Scaling::per_tensor, 328}, {GemmFp8Scaling::blocks, 330}}) {
        GemmFp8Problem p = make(150, n, 400, scaling);
        p.has_c = true, p.beta = 1.0f, p.bias = true, p.epilogue = GemmEpilogue::silu;
        for (const Config& config : test::this_shard(GemmFp8(p).model().search_space(runtime.device())))
            run_case({p, 0, config});
    }
}
