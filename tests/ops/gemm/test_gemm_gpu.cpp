// Gemm against a double-precision reference on the CPU: random inputs (never zeros), poisoned
// outputs, ragged shapes (1, 7, 127, 129, 1000), both layouts, fp16 and bf16 inputs, every output
// dtype, alpha / beta / bias / activations, batches, padded and misaligned operands, and large
// problems checked on a sample of their outputs.
#include <array>
#include <cmath>
#include <future>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/device_tensor.hpp"
#include "support/gemm_reference.hpp"
#include "support/run_op.hpp"
#include "support/shipped_db.hpp"
#include "support/test_support.hpp"
#include "tuning/op_config.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

// fp32 outputs of 16-bit inputs are accurate to the fp32 accumulation (about 1e-6 here; 1e-4 still
// tells a D that went through a 16-bit intermediate, 3e-4 or more); 16-bit outputs to their
// rounding (the reference is rounded the same way, so only accumulation-order flips remain).
double gemm_tolerance(DType out) { return out == DType::fp32 ? 1e-4 : 1e-2; }

struct Host {
    std::vector<double> a, b, c, bias;
};

// D[batch][i][j] for the problem p (packed host copies: A m x k, B k x n or n x k, C m x n).
double reference(const GemmProblem& p, const Host& h, int64_t batch, int64_t i, int64_t j) {
    const bool nt = p.layout == GemmLayout::nt;
    const double* a = h.a.data() + batch * p.m * p.k + i * p.k;
    const double* b = h.b.data() + batch * p.n * p.k;
    double sum = 0;
    for (int64_t kk = 0; kk < p.k; ++kk) sum += a[kk] * (nt ? b[j * p.k + kk] : b[kk * p.n + j]);
    double v = p.alpha * sum;
    if (p.has_c) v += p.beta * h.c[(batch * p.m + i) * p.n + j];
    if (p.bias) v += h.bias[j];
    return test::gemm_activation(p.epilogue, v);
}

struct Case {
    GemmProblem p;
    int64_t pad = 0;          // extra elements per row of every matrix
    size_t misalign = 0;      // bytes A and B are shifted off 16-byte alignment
    bool in_place = false;    // C is D
    int64_t samples = 0;      // 0: check every output; else this many random ones
    std::optional<Config> config;  // run this config (twice, D poisoned in between) instead of the runtime's choice
    size_t d_misalign = 0;    // bytes C and D are shifted off 16-byte alignment (D stored from registers)
};

std::string describe(const Case& c) {
    const GemmProblem& p = c.p;
    return fmt::format("{}x{}x{}x{} {} {}->{} alpha {} beta {} bias {} {} pad {} misalign {} / {}{}", p.batch, p.m, p.n,
                       p.k, gemm_layout_name(p.layout), dtype_name(p.dtype), dtype_name(*p.out_dtype), p.alpha,
                       p.has_c ? p.beta : 0.0f, p.bias, gemm_epilogue_name(p.epilogue), c.pad, c.misalign, c.d_misalign,
                       c.in_place ? " in place" : "");
}

void run_case(Case c) {
    GemmProblem& p = c.p;
    if (!p.out_dtype) p.out_dtype = p.dtype;
    const DType out = *p.out_dtype;
    const bool nt = p.layout == GemmLayout::nt;
    const int64_t b_rows = nt ? p.n : p.k, b_cols = nt ? p.k : p.n;
    p.lda = p.k + c.pad, p.ldb = b_cols + c.pad, p.ldc = p.n + c.pad, p.ldd = p.n + c.pad;
    INFO(describe(c));
    Gemm op(p);
    const uint64_t seed = static_cast<uint64_t>(p.m * 131 + p.n * 17 + p.k);
    Host h;
    // Inputs scaled so that the dot products stay O(1) whatever K is.
    const double scale = 1.0 / std::sqrt(static_cast<double>(p.k));
    h.a = test::round_to(p.dtype, test::random_values(p.batch * p.m * p.k, seed + 1, -2.0 * scale, 2.0 * scale));
    h.b = test::round_to(p.dtype, test::random_values(p.batch * b_rows * b_cols, seed + 2));
    if (p.has_c) h.c = test::round_to(out, test::random_values(p.batch * p.m * p.n, seed + 3));
    if (p.bias) h.bias = test::round_to(p.dtype, test::random_values(p.n, seed + 4));
    // A batch is one tall matrix of batch x rows rows (packed batch strides).
    DeviceMatrix da(p.dtype, p.batch * p.m, p.k, p.lda, c.misalign);
    DeviceMatrix db(p.dtype, p.batch * b_rows, b_cols, p.ldb, c.misalign);
    DeviceMatrix dc(out, p.batch * p.m, p.n, p.ldc, c.d_misalign), dd(out, p.batch * p.m, p.n, p.ldd, c.d_misalign);
    DeviceMatrix dbias(p.dtype, 1, p.n);
    da.upload(h.a);
    db.upload(h.b);
    if (p.bias) dbias.upload(h.bias);
    std::vector<TensorArg> inputs{da.data(), db.data()};
    if (p.has_c) {
        if (c.in_place) dd.upload(h.c); else dc.upload(h.c);
        inputs.emplace_back(c.in_place ? dd.data() : dc.data());
    }
    if (p.bias) inputs.emplace_back(dbias.data());
    test::run_op(op, inputs, OutputArg(dd.data()), dd, c.config);
    const std::vector<double> got = dd.download();
    std::vector<double> out_values, ref_values;
    if (c.samples == 0) {
        ref_values.resize(got.size());
        for (int64_t bt = 0; bt < p.batch; ++bt)
            for (int64_t i = 0; i < p.m; ++i)
                for (int64_t j = 0; j < p.n; ++j) ref_values[(bt * p.m + i) * p.n + j] = reference(p, h, bt, i, j);
        out_values = got;
    } else {
        std::mt19937_64 rng(seed);
        for (int64_t s = 0; s < c.samples; ++s) {
            // Corners and edges of the last tiles included: they are where ragged handling breaks.
            const int64_t bt = static_cast<int64_t>(rng() % p.batch);
            const int64_t i = s < 4 ? (s & 1 ? p.m - 1 : 0) : static_cast<int64_t>(rng() % p.m);
            const int64_t j = s < 4 ? (s & 2 ? p.n - 1 : 0) : static_cast<int64_t>(rng() % p.n);
            ref_values.push_back(reference(p, h, bt, i, j));
            out_values.push_back(got[(bt * p.m + i) * p.n + j]);
        }
    }
    const double error = test::relative_error(out_values, test::round_to(out, ref_values));
    INFO("relative error " << error << " (tolerance " << gemm_tolerance(out) << ")");
    CHECK(error <= gemm_tolerance(out));
    if (c.pad > 0) CHECK(dd.gaps_untouched());
    if (c.samples > 0) {
        // Every output was written (no poison left), even those not compared.
        bool all_finite = true;
        for (double v : got) all_finite = all_finite && std::isfinite(v);
        CHECK(all_finite);
    }
}

GemmProblem make(int64_t m, int64_t n, int64_t k, GemmLayout layout, DType dtype, std::optional<DType> out = {}) {
    GemmProblem p;
    p.m = m, p.n = n, p.k = k, p.layout = layout, p.dtype = dtype, p.out_dtype = out;
    return p;
}

}  // namespace

TEST_CASE("Gemm matches a double-precision reference on ragged shapes", "[gpu][gemm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const GemmLayout layout = GENERATE(GemmLayout::nn, GemmLayout::nt);
    const DType dtype = GENERATE(DType::fp16, DType::bf16);
    const int64_t shapes[][3] = {{1, 1, 1},     {7, 7, 7},       {1, 129, 127},  {127, 129, 7},  {129, 127, 1000},
                                 {1000, 7, 129}, {7, 1000, 127},  {128, 256, 64}, {1000, 1000, 129}, {16, 4096, 512}};
    for (const auto& s : shapes) run_case({make(s[0], s[1], s[2], layout, dtype)});
    run_case({make(127, 129, 1000, layout, dtype, DType::fp32)});
    run_case({make(1000, 1000, 256, layout, dtype, DType::fp32)});
    // bf16 output of fp16 input and the reverse pairing.
    run_case({make(129, 257, 96, layout, dtype, dtype == DType::bf16 ? DType::fp16 : DType::bf16)});
}

TEST_CASE("Gemm epilogue: alpha, beta * C, bias, GELU and SiLU", "[gpu][gemm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const GemmLayout layout = GENERATE(GemmLayout::nn, GemmLayout::nt);
    const DType out = GENERATE(DType::bf16, DType::fp32);
    for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::gelu, GemmEpilogue::silu}) {
        GemmProblem p = make(257, 383, 200, layout, DType::bf16, out);
        p.alpha = 0.75f, p.has_c = true, p.beta = -0.5f, p.bias = true, p.epilogue = e;
        run_case({p});
        p.has_c = false, p.beta = 0.0f;
        run_case({p});
        p.bias = false, p.alpha = 2.0f;
        run_case({p});
    }
    // C in place of D.
    GemmProblem p = make(130, 260, 70, layout, DType::fp16, out);
    p.has_c = true, p.beta = 1.0f;
    run_case({p, 0, 0, true});
}

TEST_CASE("Gemm on padded, misaligned and batched operands", "[gpu][gemm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const GemmLayout layout = GENERATE(GemmLayout::nn, GemmLayout::nt);
    // Padding that keeps 16-byte rows, padding that breaks them (narrow copies), and pointers
    // off 16-byte alignment by 4 and by 2 bytes (4- and 2-byte copies).
    run_case({make(200, 300, 136, layout, DType::bf16), 8});
    run_case({make(200, 300, 136, layout, DType::bf16), 3});
    run_case({make(200, 300, 136, layout, DType::fp16), 0, 4});
    run_case({make(200, 300, 136, layout, DType::fp16), 0, 2});
    run_case({make(129, 127, 127, layout, DType::bf16, DType::fp32), 1});
    GemmProblem batched = make(100, 200, 72, layout, DType::bf16);
    batched.batch = 5;
    run_case({batched});
    batched.has_c = true, batched.beta = 0.25f, batched.bias = true, batched.epilogue = GemmEpilogue::silu;
    batched.out_dtype = DType::fp32;
    run_case({batched});
    // K not a multiple of 8 in rows padded to 16 bytes, few rows, layout NT: whole 16-byte copies
    // of K (the skinny kernel's) would add the NaN-poisoned padding into every sum.
    if (layout == GemmLayout::nt) run_case({make(4, 513, 1001, layout, DType::bf16), 7});  // every ld 8-aligned
    GemmProblem tiny_batch = make(1, 7, 9, layout, DType::fp16);
    tiny_batch.batch = 33;
    run_case({tiny_batch});
}

TEST_CASE("Gemm keeps the sm_90 kernel for rows off 16 bytes: odd K, odd N, shifted pointers", "[gpu][gemm]") {
    // A and B that TMA cannot load are copied into the workspace first (gemm_pack.cuh); a 16-bit D
    // that TMA cannot store is stored from registers. Each problem runs under the heuristic's
    // config and under a split-K config (whose partial sums share the workspace with the copies).
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    if (runtime.device().sm() != 90) SKIP("the TMA kernel needs sm_90");
    const GemmLayout layout = GENERATE(GemmLayout::nn, GemmLayout::nt);
    struct Shape {
        int64_t batch, m, n, k;
        DType out;
        int64_t pad;
        size_t misalign;
        size_t d_misalign = 0;
    };
    const Shape shapes[] = {{1, 257, 515, 4095, DType::bf16, 0, 0},  // odd K: A and B packed (NT), A (NN)
                            {1, 300, 1001, 640, DType::bf16, 0, 0},  // odd N: D ragged (and B packed in NN)
                            {1, 1, 1999, 777, DType::fp16, 0, 0},    // decode-like, everything odd
                            {1, 64, 520, 1000, DType::bf16, 0, 2},   // A and B shifted by 2 bytes
                            {1, 130, 264, 136, DType::bf16, 3, 0},   // rows padded off 16 bytes
                            {3, 70, 333, 99, DType::bf16, 0, 0},     // batched, every stride odd
                            {1, 129, 127, 127, DType::fp32, 1, 0},   // fp32 out
                            {1, 200, 264, 136, DType::bf16, 0, 0, 2},  // C and D shifted by 2 bytes
                            {1, 9, 1024, 512, DType::fp32, 0, 0, 4}};  // fp32 D shifted by 4 bytes
    for (const Shape& s : shapes) {
        GemmProblem p = make(s.m, s.n, s.k, layout, s.out == DType::fp16 ? DType::fp16 : DType::bf16, s.out);
        p.batch = s.batch;
        p.has_c = s.m % 2 == 1, p.beta = p.has_c ? 0.5f : 0.0f, p.bias = s.n % 3 == 0;
        p.epilogue = s.k % 2 == 1 ? GemmEpilogue::gelu : GemmEpilogue::none;
        auto run_with = [&](std::optional<Config> config) {
            Case c{p, s.pad, s.misalign};
            c.d_misalign = s.d_misalign;
            c.samples = s.m * s.n * s.k > 100'000'000 ? 3000 : 0;  // the CPU reference of every output is slow
            c.config = std::move(config);
            run_case(c);
        };
        const Config heuristic = Gemm(p).model().heuristic(runtime.device());
        CHECK(heuristic.at("kernel") != 0);
        run_with(heuristic);
        const Config split{{"kernel", 1},    {"block_m", 64},  {"block_n", 64}, {"block_k", 64},
                           {"stages", 8},    {"consumers", 1}, {"pingpong", 0}, {"cluster", 1},
                           {"split_k", 3},   {"group_m", 8},   {"vec", 8}};
        if (!Gemm(p).model().invalid_reason(split, runtime.device())) run_with(split);
        run_with(std::nullopt);  // and through run(), with its own choice
    }
}

TEST_CASE("Gemm on large problems, sampled", "[gpu][gemm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const GemmLayout layout = GENERATE(GemmLayout::nn, GemmLayout::nt);
    run_case({make(4096, 4096, 512, layout, DType::bf16), 0, 0, false, 4000});
    run_case({make(2048, 4096, 4096, layout, DType::bf16, DType::fp32), 0, 0, false, 2000});
    run_case({make(1, 14336, 4096, layout, DType::fp16), 0, 0, false, 2000});
    run_case({make(64, 4096, 14336, layout, DType::bf16), 0, 0, false, 2000});
    run_case({make(3001, 2999, 1031, layout, DType::bf16), 0, 0, false, 3000});
}

TEST_CASE("Gemm: every sm_90 config of the search space, split K included, on ragged problems",
          "[gpu][gemm][search_space]") {
    // (The skinny kernel's configs, also in these spaces at M = 1, have their own test below.)
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    if (runtime.device().sm() != 90) SKIP("the TMA kernel needs sm_90");
    const GemmLayout layout = GENERATE(GemmLayout::nn, GemmLayout::nt);
    // Few tiles and long K (the search space adds split K), then more tiles than SMs; with C,
    // bias and an activation so that the reduction feeds the whole epilogue; fp32 and bf16 out.
    // The last problem has few 64-row tiles, where the space pairs blocks of 64 rows too: only
    // its pairs run (the other configs are covered by the problems before it).
    for (const auto& [m, n, k, pairs_only] : {std::array<int64_t, 4>{1, 1000, 2000, 0}, {100, 520, 1500, 0},
                                              {300, 4104, 264, 0}, {200, 1000, 700, 1}}) {
        for (DType out : {DType::bf16, DType::fp32}) {
            GemmProblem p = make(m, n, k, layout, DType::bf16, out);
            p.has_c = true, p.beta = 0.5f, p.bias = true, p.epilogue = GemmEpilogue::silu;
            const std::vector<Config> space = test::this_shard(Gemm(p).model().search_space(runtime.device()));
            for (const Config& config : space) {
                if (config.at("kernel") != 1 || (pairs_only && config.at("cluster") != 2)) continue;
                Case c{p};
                c.config = config;
                c.samples = m * n * k > 10'000'000 ? 2000 : 0;  // the CPU reference of every output is slow
                run_case(c);
            }
        }
    }
}

namespace {

// A ragged problem for the kernels that read rows in place: pad extra elements a row, A and B
// shifted `misalign` bytes off 16-byte alignment.
struct InPlaceShape {
    int64_t m, n, k;
    DType in, out;
    GemmEpilogue epilogue;
    int64_t pad = 0;
    size_t misalign = 0;
};

// Runs every config of `kernel` in each shape's search space (C and bias on where the shape has an
// activation or an odd M, alpha 1.5), at least `at_least` a shape; under TILEOPS_TEST_SHARD only
// this shard's share of them, at least its share of `at_least`.
void run_search_space_of(int kernel, GemmLayout layout, const std::vector<InPlaceShape>& shapes, int at_least) {
    const DeviceInfo& device = shared_runtime().device();
    const test::Shard shard = test::test_shard();
    for (const InPlaceShape& s : shapes) {
        GemmProblem p = make(s.m, s.n, s.k, layout, s.in, s.out);
        p.has_c = s.epilogue != GemmEpilogue::none, p.beta = p.has_c ? 0.5f : 0.0f, p.bias = s.m % 2 == 1;
        p.epilogue = s.epilogue;
        p.alpha = 1.5f;
        std::vector<Config> configs;
        for (const Config& config : Gemm(p).model().search_space(device))
            if (config.at("kernel") == kernel) configs.push_back(config);
        configs = test::this_shard(configs, shard);
        // Compile them all at once first (misses on different keys compile in parallel): a
        // problem's space holds up to 36 gemv kernels with the K splits.
        const Gemm op(p);
        std::vector<std::future<detail::ResolvedLaunch>> compiled;
        for (const Config& config : configs)
            compiled.push_back(std::async(std::launch::async, [&, config] {
                return shared_runtime().impl().resolve_config(op.model(), config, op.model().vector_widths(config).front());
            }));
        for (auto& kernel_ready : compiled) kernel_ready.get();
        int tried = 0;
        for (const Config& config : configs) {
            Case c{p, s.pad, s.misalign};
            c.config = config;
            run_case(c);
            ++tried;
        }
        CHECK(tried >= static_cast<int>(at_least / shard.count));
    }
}

}  // namespace

TEST_CASE("Gemm: the skinny kernel (M up to 64, both layouts) in every config of its search space on ragged problems",
          "[gpu][gemm][search_space]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    // Layout NN reads B's rows of N, each row's columns at its own shift (an odd N, padded rows).
    const GemmLayout layout = GENERATE(GemmLayout::nt, GemmLayout::nn);
    // M below, at and past one block of rows; N and K not multiples of the block (K down to one
    // element). Rows off 16 bytes are read in place, each at its own shift: an odd K (rows of A
    // and B start at every offset in turn), rows padded off 16 bytes, pointers shifted by 2 bytes;
    // past K the copies hold the next row's elements (or the poisoned padding), which must not
    // reach the sums.
    run_search_space_of(2, layout,
                        {{1, 1000, 2000, DType::bf16, DType::bf16, GemmEpilogue::none},
                         {7, 333, 72, DType::fp16, DType::fp32, GemmEpilogue::gelu},
                         {16, 4104, 1032, DType::bf16, DType::bf16, GemmEpilogue::silu},
                         {33, 70, 8, DType::bf16, DType::fp32, GemmEpilogue::none},
                         {64, 1000, 520, DType::fp16, DType::fp16, GemmEpilogue::silu},
                         {1, 1000, 1001, DType::bf16, DType::bf16, GemmEpilogue::none},
                         {5, 333, 127, DType::fp16, DType::fp32, GemmEpilogue::gelu, 3, 2},
                         {16, 264, 777, DType::bf16, DType::bf16, GemmEpilogue::silu, 0, 2},
                         {64, 200, 65, DType::bf16, DType::fp32, GemmEpilogue::none, 1},
                         {2, 70, 1, DType::fp16, DType::fp16, GemmEpilogue::none}},
                        6);
    // Batched (strided), one config.
    GemmProblem p = make(5, 264, 136, layout, DType::bf16);
    p.batch = 3;
    Case c{p};
    c.config = Config{{"kernel", 2}, {"block_m", 16}, {"block_n", 32}, {"block_k", 64}, {"stages", 3},
                      {"group_m", 1},  {"vec", 8},      {"warps", 4}};
    run_case(c);
    // Batched with every stride odd: each batch entry's rows at other shifts.
    c.p = make(5, layout == GemmLayout::nt ? 264 : 263, 99, layout, DType::bf16);
    c.p.batch = 3;
    run_case(c);
}

TEST_CASE("Gemm: the gemv kernel (M up to 4, both layouts) in every config of its search space on ragged problems",
          "[gpu][gemm][search_space]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const GemmLayout layout = GENERATE(GemmLayout::nt, GemmLayout::nn);
    // Each warp reads rows of one shift; the first and last chunk of a row (NT) or of a block's
    // columns (NN) are read element by element. So: an odd K or N (every shift in turn), rows padded
    // off 16 bytes, pointers shifted by 2 bytes, K and N of one element, N not a multiple of the
    // block, M not a multiple of block_m; the poisoned padding must not reach a sum. Few NN blocks
    // (N up to 1000) bring sm_90's K splits over clusters: slices of several tiles of A (K = 5001),
    // blocks whose slice is empty (K = 1, 777, 999 over 8 blocks).
    run_search_space_of(3, layout,
                        {{1, 1000, 2000, DType::bf16, DType::bf16, GemmEpilogue::none},
                         {3, 333, 72, DType::fp16, DType::fp32, GemmEpilogue::gelu},
                         {4, 4104, 1032, DType::bf16, DType::bf16, GemmEpilogue::silu},
                         {1, 1000, 1001, DType::bf16, DType::bf16, GemmEpilogue::none},
                         {2, 333, 127, DType::fp16, DType::fp32, GemmEpilogue::gelu, 3, 2},
                         {4, 264, 777, DType::bf16, DType::bf16, GemmEpilogue::silu, 0, 2},
                         {1, 200, 65, DType::bf16, DType::fp32, GemmEpilogue::none, 1},
                         {2, 70, 1, DType::fp16, DType::fp16, GemmEpilogue::none},
                         {1, 1, 999, DType::bf16, DType::fp32, GemmEpilogue::none, 5, 2},
                         {1, 50257, 768, DType::bf16, DType::bf16, GemmEpilogue::none},
                         {2, 600, 5001, DType::bf16, DType::bf16, GemmEpilogue::silu}},
                        12);
    // Two blocks of rows of A (M = 7, block_m 4), then batched with every stride odd: each batch
    // entry's rows at other shifts.
    Case c{make(7, layout == GemmLayout::nt ? 264 : 263, 99, layout, DType::bf16)};
    c.config = Config{{"kernel", 3}, {"block_m", 4}, {"block_n", layout == GemmLayout::nt ? 16 : 120}, {"block_k", 8},
                      {"stages", 4}, {"group_m", 1}, {"vec", 8}, {"warps", 8}};
    run_case(c);
    c.p = make(2, layout == GemmLayout::nt ? 264 : 263, 99, layout, DType::bf16);
    c.p.batch = 3;
    run_case(c);
}

TEST_CASE("Gemm: every config of the shipped tuning database on a ragged problem of its kind", "[gpu][gemm]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    // Each distinct (config, layout, epilogue flags) of the shipped database for this GPU's arch, on
    // a problem no config's tiles divide: M from the entry's (at most 300), N = 520, K = 1000.
    std::set<std::string> seen;
    int checked = 0;
    for (const test::ShippedEntry& shipped : test::shipped_entries()) {
        const TuningKey& key = shipped.entry.key;
        if (key.op != "gemm" || key.arch != runtime.device().arch()) continue;
        const std::vector<long long>& shape = key.shape;
        const std::string& flags = key.flags;
        const Config& config = shipped.entry.config;
        const long long m = std::min(shape[shape.size() - 3], 300LL);
        if (!seen.insert(fmt::format("{} {} {}", tuning::config_text(config), flags, m <= 64)).second) continue;
        GemmProblem p = make(m, 520, 1000, flags.find("nt") != std::string::npos ? GemmLayout::nt : GemmLayout::nn,
                             DType::bf16);
        p.has_c = flags.find("beta") != std::string::npos, p.beta = p.has_c ? 0.5f : 0.0f;
        p.bias = flags.find("bias") != std::string::npos;
        Case c{p};
        c.config = config;
        run_case(c);
        ++checked;
    }
    CHECK(checked >= 10);
}
