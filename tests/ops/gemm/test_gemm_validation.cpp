// Gemm refuses bad problems and operands by name, and picks the vector width the operands allow.
// Needs no GPU: check() runs run()'s argument checks without launching.
#include <set>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/gemm_operands.hpp"
#include "ops/gemm/gemm_config.hpp"
#include "ops/registry.hpp"
#include "core/op_model.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
void* const kA = reinterpret_cast<void*>(0x100000);
void* const kB = reinterpret_cast<void*>(0x200000);
void* const kC = reinterpret_cast<void*>(0x300000);
void* const kD = reinterpret_cast<void*>(0x400000);
void* const kBias = reinterpret_cast<void*>(0x500000);

GemmProblem problem(int64_t m, int64_t n, int64_t k) {
    GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    return p;
}
}  // namespace

TEST_CASE("Gemm refuses bad problems with the argument's name", "[validation][gemm]") {
    CHECK_THROWS_WITH(Gemm(problem(0, 8, 8)), ContainsSubstring("Gemm") && ContainsSubstring("m must be >= 1, got 0"));
    CHECK_THROWS_WITH(Gemm(problem(8, -1, 8)), ContainsSubstring("n must be >= 1"));
    CHECK_THROWS_WITH(Gemm(problem(8, 8, 0)), ContainsSubstring("k must be >= 1"));
    CHECK_THROWS_AS(Gemm(problem(0, 8, 8)), InvalidArgument);
    GemmProblem p = problem(8, 8, 8);
    p.dtype = DType::fp32;
    CHECK_THROWS_AS(Gemm(p), Unsupported);
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("dtype fp32 is not supported for A and B"));
    p = problem(8, 8, 8);
    for (DType out : {DType::int32, DType::fp8_e4m3}) {
        p.out_dtype = out;
        CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("out_dtype must be fp32, fp16 or bf16"));
    }
    p = problem(8, 8, 8);
    p.beta = 0.5f;
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("beta = 0.5 needs C: set has_c"));
    p = problem(8, 16, 32);
    p.lda = 16;
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("lda = 16 is smaller than a row (32 elements)"));
    p = problem(8, 16, 32);
    p.layout = GemmLayout::nt;
    p.ldb = 16;  // B is 16 x 32: rows of 32
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("ldb = 16"));
    p = problem(8, 16, 32);
    p.ldd = 8;
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("ldd = 8"));
    p = problem(8, 16, 32);
    p.batch = 0;
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("batch = 0 is not in [1, 65535]"));
    p.batch = 70000;
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("batch = 70000"));
    p = problem(8, 16, 32);
    p.batch = 2;
    p.batch_stride_d = 64;  // < 8 x 16: entries of D would overlap
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("batch_stride_d = 64") && ContainsSubstring("overlap"));
    p.batch_stride_d = 0;
    p.batch_stride_a = -5;
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("batch_stride_a = -5 is negative"));
    p = problem(8, 16, 32);
    p.alpha = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("alpha and beta must be finite"));
    p = problem(8, 16, 32);
    p.epilogue = static_cast<GemmEpilogue>(9);
    CHECK_THROWS_WITH(Gemm(p), ContainsSubstring("epilogue 9"));
}

TEST_CASE("Gemm checks run()'s operands by name", "[validation][gemm]") {
    GemmProblem p = problem(64, 128, 256);
    Gemm plain(p);
    CHECK_NOTHROW(plain.check({kA, kB}, {kD}));
    CHECK_THROWS_WITH(plain.check({kA}, {kD}), ContainsSubstring("expected 2 inputs (A, B), got 1"));
    CHECK_THROWS_WITH(plain.check({kA, kB}, {kD, kC}), ContainsSubstring("expected 1 outputs (D), got 2"));
    CHECK_THROWS_WITH(plain.check({kA, nullptr}, {kD}), ContainsSubstring("argument 'B' is a null pointer"));
    CHECK_THROWS_WITH(plain.check({kA, kB}, {static_cast<char*>(kD) + 1}),
                      ContainsSubstring("argument 'D'") && ContainsSubstring("not aligned"));

    p.has_c = true, p.beta = 1.0f, p.bias = true;
    Gemm fused(p);
    CHECK_NOTHROW(fused.check({kA, kB, kC, kBias}, {kD}));
    CHECK_NOTHROW(fused.check({kA, kB, kD, kBias}, {kD}));  // C in place of D
    CHECK_THROWS_WITH(fused.check({kA, kB, kC}, {kD}), ContainsSubstring("expected 4 inputs (A, B, C, bias), got 3"));
    CHECK_THROWS_WITH(fused.check({kA, kB, kC, nullptr}, {kD}), ContainsSubstring("argument 'bias' is a null pointer"));

    GemmProblem shifted = p;
    shifted.ldc = 256;
    Gemm shifted_alias(shifted);
    CHECK_THROWS_WITH(shifted_alias.check({kA, kB, kD, kBias}, {kD}), ContainsSubstring("C and D overlap"));
    // C one row (128 elements) past D, same leading dimension: blocks would read C rows that
    // others have already overwritten as D.
    CHECK_THROWS_WITH(fused.check({kA, kB, static_cast<char*>(kD) + 128 * 2, kBias}, {kD}),
                      ContainsSubstring("C and D overlap"));
    // Just past D's last element (64 rows of 128 bf16): apart.
    CHECK_NOTHROW(fused.check({kA, kB, static_cast<char*>(kD) + 64 * 128 * 2, kBias}, {kD}));

    // A leading dimension or batch stride too large for 64-bit offsets is named.
    GemmProblem huge = problem(1024, 1024, 1024);
    huge.lda = int64_t{1} << 45;
    CHECK_THROWS_WITH(Gemm(huge), ContainsSubstring("lda = 35184372088832 is larger than supported"));

    // Views are checked against the problem.
    const TensorView a = TensorView::contiguous(kA, DType::bf16, {64, 256});
    const TensorView wrong = TensorView::contiguous(kA, DType::bf16, {64, 255});
    CHECK_NOTHROW(plain.check({a, kB}, {kD}));
    CHECK_THROWS_WITH(plain.check({wrong, kB}, {kD}), ContainsSubstring("argument 'A' must have shape [64, 256]"));
    // A batch of one as [1, rows, cols] views (a batched caller whose batch is 1).
    CHECK_NOTHROW(plain.check({TensorView::contiguous(kA, DType::bf16, {1, 64, 256}), kB},
                              {TensorView::contiguous(kD, DType::bf16, {1, 64, 128})}));
    CHECK_THROWS_WITH(plain.check({TensorView::contiguous(kA, DType::bf16, {2, 64, 256}), kB}, {kD}),
                      ContainsSubstring("argument 'A'"));
    const TensorView d16 = TensorView::contiguous(kD, DType::fp16, {64, 128});
    CHECK_THROWS_WITH(plain.check({kA, kB}, {d16}), ContainsSubstring("argument 'D' has dtype fp16, expected bf16"));
}

TEST_CASE("Gemm packs unaligned A and B and stores unaligned D from registers", "[validation][gemm]") {
    // Launch widths: 8 all aligned; 1 A or B copied into the workspace first; ragged_width: D's
    // rows not 16-byte aligned (no TMA store).
    const int packed = 1, ragged_d = detail::ragged_width(8), packed_ragged_d = detail::ragged_width(1);
    Gemm aligned(problem(64, 128, 256));
    CHECK(aligned.vector_width({kA, kB}, {kD}) == 8);
    CHECK(aligned.vector_width({static_cast<char*>(kA) + 4, kB}, {kD}) == packed);
    CHECK(aligned.vector_width({kA, static_cast<char*>(kB) + 2}, {kD}) == packed);
    GemmProblem odd = problem(64, 128, 127);  // A's rows are 127 elements apart
    CHECK(Gemm(odd).vector_width({kA, kB}, {kD}) == packed);
    odd.lda = 132;
    CHECK(Gemm(odd).vector_width({kA, kB}, {kD}) == packed);
    // A 16-bit D is stored with TMA by the sm_90 kernel where its rows are aligned. An fp32 D is
    // always stored from registers (element pairs where it can).
    CHECK(aligned.vector_width({kA, kB}, {static_cast<char*>(kD) + 2}) == ragged_d);
    CHECK(aligned.vector_width({static_cast<char*>(kA) + 2, kB}, {static_cast<char*>(kD) + 2}) == packed_ragged_d);
    GemmProblem unaligned_ldd = problem(64, 128, 256);
    unaligned_ldd.ldd = 130;
    CHECK(Gemm(unaligned_ldd).vector_width({kA, kB}, {kD}) == ragged_d);
    GemmProblem fp32_out = problem(64, 128, 256);
    fp32_out.out_dtype = DType::fp32;
    CHECK(Gemm(fp32_out).vector_width({kA, kB}, {static_cast<char*>(kD) + 4}) == 8);

    // warm compiles every width run() may pick, and no more: widths the shape rules out are left out.
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    const Config config = aligned.model().heuristic(h100);
    CHECK(aligned.model().vector_widths(config) == std::vector<int>{8, ragged_d, packed, packed_ragged_d});
    CHECK(Gemm(unaligned_ldd).model().vector_widths(config) == std::vector<int>{ragged_d, packed_ragged_d});
    CHECK(Gemm(problem(64, 128, 127)).model().vector_widths(config) == std::vector<int>{packed, packed_ragged_d});

    // Every width stays on the TMA kernel: packing runs a copy kernel first, with the workspace
    // to hold both copies (rows padded to 8 elements, 256-byte aligned).
    GemmProblem lm_head = problem(8192, 50257, 768);  // GPT-2's LM head: D's rows are 50257 apart
    lm_head.layout = GemmLayout::nt;
    const Gemm gpt2(lm_head);
    const Config tma = gpt2.model().heuristic(h100);
    CHECK(tma.at("kernel") == 1);
    for (int width : gpt2.model().vector_widths(tma)) {
        const detail::LaunchPlan plan = gpt2.model().plan(tma, width, h100);
        INFO("width " << width);
        CHECK(plan.template_file == "gemm/gemm_sm90.cuh");
        // TMA_STORE, then SPLIT_K, end the arguments: no TMA store.
        CHECK_THAT(plan.name_expression, ContainsSubstring(", false, false>") || ContainsSubstring(", false, true>"));
        CHECK(static_cast<bool>(plan.before) == (width == packed_ragged_d));
    }
    const Gemm odd_k(problem(4096, 4096, 4095));
    const Config odd_config = odd_k.model().heuristic(h100);
    CHECK(odd_config.at("kernel") == 1);
    const detail::LaunchPlan plan = odd_k.model().plan(odd_config, packed, h100);
    CHECK_THAT(plan.before.name_expression, ContainsSubstring("gemm_sm90_pack_kernel<__nv_bfloat16>"));
    // D is stored with TMA (TMA_STORE, then SPLIT_K).
    CHECK_THAT(plan.name_expression, ContainsSubstring(", true, false>") || ContainsSubstring(", true, true>"));
    const size_t copies = (4096 * 4096 + 4095 * 4096) * 2;  // A: 4096 rows of 4096; B (K x N): 4095 rows
    CHECK(odd_k.model().workspace_bytes(odd_config, packed) >= copies);
    CHECK(odd_k.model().workspace_bytes(odd_config, packed) < copies + 2 * 256 + (size_t{64} << 20));
    CHECK(aligned.model().workspace_bytes(config, 8) == 0);
}

TEST_CASE("Gemm tuning keys carry layout, epilogue and batch; the factory builds them back", "[validation][gemm]") {
    detail::ProblemSpec spec{"gemm", {4, 128, 256, 512}, "bf16->fp32", "nt,beta,bias,gelu"};
    auto op = detail::make_op(spec);
    CHECK(op->describe() == "gemm 4x128x256x512 bf16->fp32 [nt,beta,bias,gelu]");
    const auto& gemm = dynamic_cast<const Gemm&>(*op);
    CHECK(gemm.problem().batch == 4);
    CHECK(gemm.problem().layout == GemmLayout::nt);
    CHECK(gemm.problem().has_c);
    CHECK(gemm.problem().epilogue == GemmEpilogue::gelu);
    auto plain = detail::make_op({"gemm", {16, 4096, 4096}, "fp16", ""});
    CHECK(plain->describe() == "gemm 16x4096x4096 fp16");
    CHECK_THROWS_WITH(detail::make_op({"gemm", {16, 4096}, "bf16", ""}), ContainsSubstring("MxNxK"));
    CHECK_THROWS_WITH(detail::make_op({"gemm", {16, 16, 16}, "bf16", "gelu,silu"}), ContainsSubstring("flag 'silu'"));
    CHECK_THROWS_WITH(detail::make_op({"gemm", {16, 16, 16}, "bf16", "residual"}), ContainsSubstring("flag 'residual'"));
}

TEST_CASE("Gemm's TMA box of A holds only the rows M has, rounded up to 8", "[validation][gemm]") {
    CHECK(detail::gemm_a_box_rows(1, 64) == 8);
    CHECK(detail::gemm_a_box_rows(8, 64) == 8);
    CHECK(detail::gemm_a_box_rows(9, 64) == 16);
    CHECK(detail::gemm_a_box_rows(60, 64) == 64);
    CHECK(detail::gemm_a_box_rows(100, 128) == 104);
    CHECK(detail::gemm_a_box_rows(64, 64) == 64);  // a whole tile and more: the tile's rows
    CHECK(detail::gemm_a_box_rows(4096, 128) == 128);
}

TEST_CASE("Gemm's quick stand-in: 128 x 128 tiles for a bigger TMA tile, none otherwise", "[validation][gemm]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    Gemm op(problem(4096, 4096, 4096));
    const auto& model = op.model();
    detail::GemmConfig big;
    big.kernel = detail::kGemmSm90, big.block_m = 128, big.block_n = 256, big.block_k = 64, big.consumers = 2;
    big.pingpong = 0, big.cluster = 2, big.split_k = 1, big.stages = 4, big.group_m = 8, big.vec = 8;
    REQUIRE_FALSE(model.invalid_reason(big.to_config(), h100).has_value());
    const std::optional<Config> quick = model.quick_config(big.to_config(), h100);
    REQUIRE(quick.has_value());
    CHECK_FALSE(model.invalid_reason(*quick, h100).has_value());
    const detail::GemmConfig q = detail::GemmConfig::from(*quick);
    CHECK((q.kernel == detail::kGemmSm90 && q.block_m == 128 && q.block_n == 128 && q.consumers == 2 && q.cluster == 1));
    CHECK(q.vec == big.vec);  // the same launch widths as the chosen config
    // Tiles no bigger than the quick one's, and the other kernels: nothing faster to compile.
    CHECK_FALSE(model.quick_config(*quick, h100).has_value());
    detail::GemmConfig small = big;
    small.block_m = 64, small.block_n = 128, small.consumers = 1, small.cluster = 1;
    CHECK_FALSE(model.quick_config(small.to_config(), h100).has_value());
    const DeviceInfo a100 = DeviceInfo::for_arch("sm_80");
    CHECK_FALSE(model.quick_config(model.heuristic(a100), a100).has_value());
    // Every problem's quick config is valid for it, where there is one.
    for (int64_t m : {1, 100, 2048, 8192})
        for (GemmLayout layout : {GemmLayout::nn, GemmLayout::nt}) {
            GemmProblem p = problem(m, 10240, 8192);
            p.layout = layout;
            Gemm other(p);
            for (const Config& c : other.model().search_space(h100))
                if (auto qc = other.model().quick_config(c, h100)) CHECK_FALSE(other.model().invalid_reason(*qc, h100).has_value());
        }
}

TEST_CASE("Gemm configs: heuristics are valid, search spaces are pruned to the device", "[validation][gemm]") {
    for (const char* arch : {"sm_80", "sm_90a"}) {
        const DeviceInfo device = DeviceInfo::for_arch(arch);
        for (int64_t m : {1, 16, 127, 1000, 8192}) {
            for (GemmLayout layout : {GemmLayout::nn, GemmLayout::nt}) {
                GemmProblem p = problem(m, 4096, 4096);
                p.layout = layout;
                Gemm op(p);
                const auto& model = op.model();
                INFO(arch << " " << model.describe());
                CHECK_FALSE(model.invalid_reason(model.heuristic(device), device).has_value());
                const auto space = model.search_space(device);
                CHECK(space.size() >= 3);
                CHECK(space.size() <= 96);
                for (const Config& c : space) CHECK_FALSE(model.invalid_reason(c, device).has_value());
            }
        }
        Gemm op(problem(128, 128, 128));
        Config too_big = op.model().heuristic(device);
        too_big["stages"] = 8;
        too_big["block_m"] = 256;
        too_big["block_n"] = 256;
        too_big["block_k"] = 64;
        CHECK(op.model().invalid_reason(too_big, device).has_value());
        Config missing = op.model().heuristic(device);
        missing.erase("block_n");
        CHECK_THAT(*op.model().invalid_reason(missing, device), ContainsSubstring("block_n"));
        // Values from a hostile database: a reason, never int overflow (warps_m = 2^28 times
        // warps_n = 16 wrapped to 0, passed the warp count check, then was divided by).
        Config absurd = op.model().heuristic(device);
        absurd["kernel"] = 0;
        absurd["warps_m"] = 1LL << 28;
        absurd["warps_n"] = 16;
        CHECK_THAT(op.model().invalid_reason(absurd, device).value_or(""), ContainsSubstring("'warps_m' = 268435456"));
        absurd["warps_m"] = 2;
        absurd["stages"] = -3;
        CHECK_THAT(op.model().invalid_reason(absurd, device).value_or(""), ContainsSubstring("'stages' = -3"));
    }
    // The TMA kernel's widths: the instantiated wgmma widths only, and multiples of 64 for layout
    // NN (B comes in boxes of 64 columns).
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    for (GemmLayout layout : {GemmLayout::nn, GemmLayout::nt}) {
        GemmProblem p = problem(512, 6144, 4096);
        p.layout = layout;
        Gemm op(p);
        const Config tma{{"kernel", 1}, {"block_m", 128}, {"block_n", 192}, {"block_k", 64}, {"stages", 4},
                         {"group_m", 8},  {"vec", 8},       {"consumers", 2},  {"cluster", 1},  {"split_k", 1},
                         {"pingpong", 0}};
        CHECK_FALSE(op.model().invalid_reason(tma, h100).has_value());
        for (int bn : {48, 100, 288}) {
            Config odd = tma;
            odd["block_n"] = bn;
            CHECK_THAT(*op.model().invalid_reason(odd, h100), ContainsSubstring("block_n = " + std::to_string(bn)));
        }
        Config narrow = tma;
        narrow["block_n"] = 160;
        CHECK(op.model().invalid_reason(narrow, h100).has_value() == (layout == GemmLayout::nn));
        // Ping-pong: two consumers taking whole tiles of 64 or 128 rows, no split K.
        Config turns = tma;
        turns["pingpong"] = 1, turns["block_m"] = 64, turns["block_n"] = 256;
        CHECK_FALSE(op.model().invalid_reason(turns, h100).has_value());
        Config tall = turns;
        tall["block_m"] = 256, tall["block_n"] = 64, tall["stages"] = 2;
        CHECK_THAT(*op.model().invalid_reason(tall, h100), ContainsSubstring("block_m = 256 with pingpong"));
        Config alone = turns;
        alone["consumers"] = 1;
        CHECK_THAT(*op.model().invalid_reason(alone, h100), ContainsSubstring("needs consumers = 2"));
        Config split = turns;
        split["split_k"] = 2;
        CHECK_THAT(*op.model().invalid_reason(split, h100), ContainsSubstring("needs split_k = 1"));
        Config wide = turns;
        wide["block_m"] = 128;  // 128 x 256 per warpgroup: 256 accumulators a thread
        CHECK_THAT(*op.model().invalid_reason(wide, h100), ContainsSubstring("accumulators"));
    }
}

TEST_CASE("Gemm refuses D over its operands and C read at beta = 0", "[validation][gemm]") {
    // D written over A or B races (X = X W in place).
    GemmProblem p = problem(64, 64, 64);  // square: A, B and D each 64 x 64 bf16, 8 KB
    Gemm square(p);
    CHECK_THROWS_WITH(square.check({kA, kB}, {kA}), ContainsSubstring("D overlaps A"));
    CHECK_THROWS_WITH(square.check({kA, kB}, {kB}), ContainsSubstring("D overlaps B"));
    CHECK_THROWS_WITH(square.check({kA, kB}, {static_cast<char*>(kB) + 64 * 2}), ContainsSubstring("D overlaps B"));
    CHECK_NOTHROW(square.check({kA, kB}, {static_cast<char*>(kB) + 64 * 64 * 2}));  // just past B
    // A and D as the two column halves of one [64, 128] buffer: interleaved but disjoint.
    GemmProblem halves = p;
    halves.lda = 128, halves.ldd = 128;
    Gemm side_by_side(halves);
    CHECK_NOTHROW(side_by_side.check({kA, kB}, {static_cast<char*>(kA) + 64 * 2}));
    CHECK_THROWS_WITH(side_by_side.check({kA, kB}, {static_cast<char*>(kA) + 32 * 2}), ContainsSubstring("D overlaps A"));
    GemmProblem with_bias = p;
    with_bias.bias = true;
    Gemm biased(with_bias);
    CHECK_THROWS_WITH(biased.check({kA, kB, kD}, {kD}), ContainsSubstring("D overlaps the bias"));

    // C given at beta = 0 would still be read: NaN there reaches D.
    GemmProblem unread_c = p;
    unread_c.has_c = true, unread_c.beta = 0.0f;
    CHECK_THROWS_WITH(Gemm(unread_c), ContainsSubstring("beta = 0"));
}

TEST_CASE("Gemm reads rows off 16 bytes in place for few rows of A, at any K", "[validation][gemm]") {
    // The other kernels would copy rows off 16 bytes into aligned ones first; the gemv kernel (up
    // to 4 rows of A) and the skinny kernel (up to 16) read them in place, so the heuristic takes
    // them in either layout on sm_80 and sm_90a (at 64 the copies won). Rows that are aligned keep
    // the TMA (or sm_80) kernel, whatever K.
    for (const char* arch : {"sm_80", "sm_90a"}) {
        const DeviceInfo device = DeviceInfo::for_arch(arch);
        INFO(arch);
        auto heuristic_kernel = [&](int64_t m, int64_t k, int64_t ld, GemmLayout layout) {
            GemmProblem p = problem(m, 4096, k);
            p.layout = layout, p.lda = ld, p.ldb = ld;
            return Gemm(p).model().heuristic(device).at("kernel");
        };
        CHECK(heuristic_kernel(1, 4095, 4095, GemmLayout::nt) == 3);    // odd K
        CHECK(heuristic_kernel(4, 4095, 4095, GemmLayout::nt) == 3);
        CHECK(heuristic_kernel(5, 4095, 4095, GemmLayout::nt) == 2);
        CHECK(heuristic_kernel(16, 4095, 4095, GemmLayout::nt) == 2);
        CHECK(heuristic_kernel(16, 4096, 4100, GemmLayout::nt) == 2);   // padded off 16 bytes
        CHECK(heuristic_kernel(17, 4095, 4095, GemmLayout::nt) < 2);    // the copies win from here
        CHECK(heuristic_kernel(1, 4100, 4104, GemmLayout::nt) < 2);     // aligned rows, K not a multiple of 8
        CHECK(heuristic_kernel(1, 4096, 4096, GemmLayout::nt) < 2);
    }
    // Layout NT at 3-4 rows of A: 32 rows of B a block where that leaves every SM two blocks (A's
    // staging shared by more rows), else 16, and 8 where 16 leave SMs idle.
    auto nt_rows_a_block = [](int64_t m, int64_t n, const char* arch) {
        GemmProblem p = problem(m, n, 4095);
        p.layout = GemmLayout::nt;
        return Gemm(p).model().heuristic(DeviceInfo::for_arch(arch)).at("block_n");
    };
    CHECK(nt_rows_a_block(3, 28672, "sm_90a") == 32);  // 896 blocks on 132 SMs
    CHECK(nt_rows_a_block(4, 8448, "sm_90a") == 32);   // 264: two an SM
    CHECK(nt_rows_a_block(4, 8416, "sm_90a") == 16);   // 263
    CHECK(nt_rows_a_block(3, 4544, "sm_90a") == 16);
    CHECK(nt_rows_a_block(3, 2048, "sm_90a") == 8);    // 128 blocks of 16 rows
    CHECK(nt_rows_a_block(1, 28672, "sm_90a") == 16);  // one row of A: 16 rows a block
    CHECK(nt_rows_a_block(2, 28672, "sm_90a") == 16);
    CHECK(nt_rows_a_block(3, 28672, "sm_80") == 32);   // 108 SMs
    // Every K is valid for them, the search space offers them at K not a multiple of 8, and the
    // skinny kernel's rows carry eight elements of slack for the shift (shared memory).
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    GemmProblem odd_k = problem(1, 4096, 4095);
    odd_k.layout = GemmLayout::nt;
    const Config skinny{{"kernel", 2}, {"block_m", 16}, {"block_n", 16}, {"block_k", 64}, {"warps", 8},
                        {"stages", 2}, {"group_m", 1},  {"vec", 8}};
    CHECK_FALSE(Gemm(odd_k).model().invalid_reason(skinny, h100).has_value());
    int skinny_configs = 0, gemv_configs = 0;
    for (const Config& c : Gemm(odd_k).model().search_space(h100)) {
        skinny_configs += c.at("kernel") == 2;
        gemv_configs += c.at("kernel") == 3;
    }
    CHECK(skinny_configs >= 6);
    CHECK(gemv_configs >= 12);
    const detail::GemmShape shape{1, 1, 4096, 4095, 2, true, 2, false};
    CHECK(detail::GemmConfig::from(skinny).shared_bytes(shape) == 8 * 2 * (16 + 16) * 72 * 2 + 16 * 16 * 4);
    // The gemv kernel stages A's rows (NT) as 8 classes of k mod 8 with zeros around: K + 16 and
    // more, (4095 + 23) / 8 = 514 positions a class; then block_m x block_n fp32 sums.
    Config gemv{{"kernel", 3}, {"block_m", 2}, {"block_n", 16}, {"block_k", 8}, {"warps", 8},
                {"stages", 4}, {"group_m", 1}, {"vec", 8}};
    CHECK(detail::GemmConfig::from(gemv).shared_bytes(shape) == 2 * 8 * 514 * 2 + 2 * 16 * 4);
    CHECK_FALSE(Gemm(odd_k).model().invalid_reason(gemv, h100).has_value());
    const std::pair<const char*, long long> bad_gemv[] = {{"block_m", 3}, {"block_n", 12}, {"block_n", 128},
                                                          {"warps", 4},   {"block_k", 64}, {"vec", 4}};
    for (const auto& [key, value] : bad_gemv) {
        Config bad = gemv;
        bad[key] = value;
        INFO(key << " = " << value);
        CHECK(Gemm(odd_k).model().invalid_reason(bad, h100).has_value());
    }
    // A's staged rows must fit in shared memory: 4 rows of K = 30000 do not.
    GemmProblem long_k = problem(4, 4096, 30001);
    long_k.layout = GemmLayout::nt;
    gemv["block_m"] = 4;
    CHECK_THAT(*Gemm(long_k).model().invalid_reason(gemv, h100), ContainsSubstring("shared memory"));
    CHECK(Gemm(long_k).model().heuristic(h100).at("kernel") == 2);

    // Layout NN: an odd N puts B's rows (K x N) off 16 bytes (GPT-2's vocabulary as N); both
    // kernels read them in place too, the gemv kernel 248 columns a block, each lane one 16-byte
    // chunk of a row, fewer where the blocks would leave SMs idle.
    GemmProblem odd_n = problem(1, 50257, 768);
    odd_n.layout = GemmLayout::nn;
    for (const char* arch : {"sm_80", "sm_90a"}) {
        const Config chosen = Gemm(odd_n).model().heuristic(DeviceInfo::for_arch(arch));
        CHECK(chosen.at("kernel") == 3);
        CHECK(chosen.at("block_n") == 248);
    }
    // Few columns over a long K: sm_90 splits K over the 8 blocks of a cluster, 8 warps each (17
    // blocks of 248 columns, 136 with the split), older GPUs take 16 warps and narrow the blocks
    // (74 of 56 columns).
    GemmProblem narrow_n = problem(1, 4097, 14336);
    narrow_n.layout = GemmLayout::nn;
    const Config narrow = Gemm(narrow_n).model().heuristic(h100);
    CHECK(narrow.at("block_n") == 248);
    CHECK(narrow.at("cluster") == 8);
    CHECK(narrow.at("warps") == 8);
    const Config narrow_sm80 = Gemm(narrow_n).model().heuristic(DeviceInfo::for_arch("sm_80"));
    CHECK(narrow_sm80.at("warps") == 16);
    CHECK(narrow_sm80.at("block_n") == 56);
    CHECK(narrow_sm80.at("cluster") == 1);
    std::set<long long> clusters;
    for (const Config& c : Gemm(narrow_n).model().search_space(h100))
        if (c.at("kernel") == 3) clusters.insert(c.at("cluster"));
    CHECK(clusters == std::set<long long>{1, 2, 4, 8});
    for (const Config& c : Gemm(odd_n).model().search_space(h100))  // 203 blocks: no split
        if (c.at("kernel") == 3) CHECK(c.at("cluster") == 1);
    for (const Config& c : Gemm(narrow_n).model().search_space(DeviceInfo::for_arch("sm_80")))
        if (c.at("kernel") == 3) CHECK(c.at("cluster") == 1);
    // A cluster splits K in layout NN on sm_90 only, over 2, 4 or 8 blocks; a config from before
    // the key existed splits none. NN stages A 1024 positions of k at a time as floats.
    Config split = narrow;
    CHECK_FALSE(Gemm(narrow_n).model().invalid_reason(split, h100).has_value());
    CHECK_THAT(*Gemm(narrow_n).model().invalid_reason(split, DeviceInfo::for_arch("sm_80")), ContainsSubstring("sm_90"));
    split["cluster"] = 3;
    CHECK_THAT(*Gemm(narrow_n).model().invalid_reason(split, h100), ContainsSubstring("cluster = 3"));
    split["cluster"] = 2;
    GemmProblem narrow_nt = narrow_n;
    narrow_nt.layout = GemmLayout::nt;
    split["block_n"] = 16;
    CHECK_THAT(*Gemm(narrow_nt).model().invalid_reason(split, h100), ContainsSubstring("NN on sm_90 only"));
    split.erase("cluster");
    CHECK(detail::GemmConfig::from(split).cluster == 1);
    const detail::GemmShape long_nn{1, 1, 4097, 14336, 2, false, 2, false};
    split["block_n"] = 248;
    CHECK(detail::GemmConfig::from(split).shared_bytes(long_nn) == 1024 * 4 + 248 * 4);
    GemmProblem almost = problem(1, 32001, 4096);  // 130 blocks of 248 columns on 132 SMs
    almost.layout = GemmLayout::nn;
    const Config almost_config = Gemm(almost).model().heuristic(h100);
    CHECK(almost_config.at("block_n") == 248);
    CHECK(almost_config.at("warps") == 16);
    CHECK(Gemm(odd_n).model().heuristic(h100).at("warps") == 8);  // 203 blocks
    gemv["block_n"] = 56, gemv["block_m"] = 1;
    CHECK_FALSE(Gemm(odd_n).model().invalid_reason(gemv, h100).has_value());
    gemv["block_n"] = 64;
    CHECK(Gemm(odd_n).model().invalid_reason(gemv, h100).has_value());
    CHECK_FALSE(Gemm(odd_n).model().invalid_reason(skinny, h100).has_value());
    odd_n.m = 16;
    CHECK(Gemm(odd_n).model().heuristic(h100).at("kernel") == 2);
    const Config nn_skinny = Gemm(odd_n).model().heuristic(h100);
    CHECK(nn_skinny.at("block_n") == 32);  // 64-byte pieces of B's rows, not 32
    CHECK(nn_skinny.at("warps") == 4);
    odd_n.m = 17;
    CHECK(Gemm(odd_n).model().heuristic(h100).at("kernel") < 2);
    GemmProblem aligned_nn = problem(1, 50264, 768);
    aligned_nn.layout = GemmLayout::nn;
    CHECK(Gemm(aligned_nn).model().heuristic(h100).at("kernel") < 2);
    const detail::GemmShape nn_shape{1, 1, 50257, 768, 2, false, 2, false};
    CHECK(detail::GemmConfig::from(skinny).shared_bytes(nn_shape) == 8 * 2 * (16 * 72 + 64 * 24) * 2 + 16 * 16 * 4);
}

TEST_CASE("Gemm tiles of 96-224 columns store their whole boxes with TMA where the ring leaves room",
          "[validation][gemm]") {
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    GemmProblem short_k = problem(4097, 1152, 896);
    short_k.layout = GemmLayout::nt;
    const Gemm gemm(short_k);
    const detail::GemmShape shape{1, 4097, 1152, 896, 2, true, 2};
    detail::GemmConfig c;
    c.kernel = detail::kGemmSm90, c.block_m = 128, c.consumers = 2, c.block_k = 64, c.vec = 8;
    // 128 x 224 stages are 44 KB: four leave room for two 64 x 64 boxes per consumer, five do not
    // (kept, with every store from registers, so that configs tuned that way stay what they were).
    c.block_n = 224, c.stages = 4;
    CHECK(detail::gemm_sm90_stores_with_tma(shape, c));
    c.stages = 5;
    CHECK_FALSE(detail::gemm_sm90_stores_with_tma(shape, c));
    CHECK_FALSE(detail::gemm_invalid_reason(c, shape, h100));
    c.block_n = 160, c.stages = 5;
    CHECK(detail::gemm_sm90_stores_with_tma(shape, c));
    c.block_n = 32, c.stages = 4;
    CHECK_FALSE(detail::gemm_sm90_stores_with_tma(shape, c));
    c.block_n = 192, c.stages = 4;
    CHECK(detail::gemm_sm90_stores_with_tma(shape, c));
    CHECK_FALSE(detail::gemm_sm90_stores_with_tma({1, 4097, 1152, 896, 2, true, 4}, c));  // fp32 D

    // The heuristic gives such tiles the stages the boxes need, and the kernel is named with TMA
    // stores (TMA_STORE, then SPLIT_K, end its arguments).
    const Config config = gemm.model().heuristic(h100);
    const detail::GemmConfig chosen = detail::GemmConfig::from(config);
    INFO(chosen.block_m << " x " << chosen.block_n << ", " << chosen.stages << " stages");
    REQUIRE(chosen.block_n % 64 == 32);
    CHECK(detail::gemm_sm90_stores_with_tma(shape, chosen));
    CHECK_THAT(gemm.model().plan(config, 8, h100).name_expression, ContainsSubstring(", true, false>"));
    // Tiles of 32 columns store from registers whatever their ring: they keep the deepest.
    GemmProblem skinny = problem(64, 4096, 4096);
    skinny.layout = GemmLayout::nt;
    const detail::GemmConfig narrow = detail::GemmConfig::from(Gemm(skinny).model().heuristic(h100));
    REQUIRE(narrow.block_n == 32);
    CHECK(narrow.stages == detail::kGemmSm90MaxStages);
}

TEST_CASE("Gemm stores a 16-bit D with TMA only where N ends on 16 bytes, whatever its ld", "[validation][gemm]") {
    // A TMA store writes whole 16-byte chunks: with N = 513 and rows padded to 520 it would
    // overwrite columns 513-519 of every row. Such a D is stored from registers; N = 512 with the
    // same rows keeps the TMA store.
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    const auto tma_stores = [&](int64_t n) {
        GemmProblem p = problem(4, n, 1001);
        p.layout = GemmLayout::nt, p.lda = 1008, p.ldb = 1008, p.ldd = 520;
        const Gemm gemm(p);
        const Config config{{"kernel", 1}, {"block_m", 64}, {"block_n", 64}, {"block_k", 64}, {"stages", 8},
                            {"consumers", 1}, {"pingpong", 0}, {"cluster", 1}, {"split_k", 1}, {"group_m", 8},
                            {"vec", 8}};
        REQUIRE_FALSE(gemm.model().invalid_reason(config, h100).has_value());
        bool any = false;
        for (int width : gemm.model().vector_widths(config))
            any = any || gemm.model().plan(config, width, h100).name_expression.find(", true, false>") != std::string::npos;
        return any;
    };
    CHECK_FALSE(tma_stores(513));
    CHECK(tma_stores(512));
    // The same rule for the other GEMM models' D: gemm_d_rows_aligned.
    CHECK_FALSE(detail::gemm_d_rows_aligned(2, {513, 520}));
    CHECK(detail::gemm_d_rows_aligned(2, {512, 520, 0}));
    CHECK_FALSE(detail::gemm_d_rows_aligned(2, {512, 520, 4}));
    CHECK(detail::gemm_d_rows_aligned(4, {513, 517}));  // fp32: stored from registers anyway
}
