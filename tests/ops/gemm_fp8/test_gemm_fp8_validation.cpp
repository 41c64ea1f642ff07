// GemmFp8 refuses bad problems and operands by name, keys its tuning entries by scaling and
// epilogue, builds back from its key, and has configs only where FP8 wgmma runs. Needs no GPU.
#include <algorithm>
#include <array>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
void* const kA = reinterpret_cast<void*>(0x100000);
void* const kB = reinterpret_cast<void*>(0x200000);
void* const kScaleA = reinterpret_cast<void*>(0x300000);
void* const kScaleB = reinterpret_cast<void*>(0x310000);
void* const kC = reinterpret_cast<void*>(0x400000);
void* const kD = reinterpret_cast<void*>(0x500000);
void* const kBias = reinterpret_cast<void*>(0x600000);

GemmFp8Problem problem(int64_t m, int64_t n, int64_t k, GemmFp8Scaling scaling = GemmFp8Scaling::per_tensor) {
    GemmFp8Problem p;
    p.m = m, p.n = n, p.k = k, p.scaling = scaling;
    return p;
}
}  // namespace

TEST_CASE("GemmFp8 refuses bad problems with the argument's name", "[validation][gemm_fp8]") {
    CHECK_THROWS_WITH(GemmFp8(problem(0, 8, 16)), ContainsSubstring("GemmFp8: m must be >= 1, got 0"));
    CHECK_THROWS_WITH(GemmFp8(problem(8, 8, 100)), ContainsSubstring("k = 100 is not a multiple of 16"));
    GemmFp8Problem p = problem(8, 8, 16);
    p.out_dtype = DType::fp8_e4m3;
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("out_dtype must be fp32, fp16 or bf16"));
    p = problem(8, 8, 16);
    p.scaling = static_cast<GemmFp8Scaling>(7);
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("scaling 7"));
    p = problem(8, 8, 16, GemmFp8Scaling::per_row);
    p.batch = 2;
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("batch = 2 needs per_tensor scaling"));
    p = problem(8, 8, 32);
    p.lda = 40;
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("lda = 40 is not a multiple of 16"));
    p = problem(8, 8, 32);
    p.ldb = 16;
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("ldb = 16 is smaller than a row"));
    p = problem(8, 8, 32);
    p.has_c = true;
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("has_c with beta = 0"));
    p = problem(8, 8, 32);
    p.epilogue = static_cast<GemmEpilogue>(5);
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("epilogue 5"));
    p = problem(1024, 1024, 1024);
    p.ldd = int64_t{1} << 45;
    CHECK_THROWS_WITH(GemmFp8(p), ContainsSubstring("ldd = 35184372088832 is larger than supported"));
}

TEST_CASE("GemmFp8 checks run()'s operands by name, scales included", "[validation][gemm_fp8]") {
    GemmFp8 plain(problem(64, 128, 256));
    CHECK_NOTHROW(plain.check({kA, kB, kScaleA, kScaleB}, {kD}));
    CHECK_THROWS_WITH(plain.check({kA, kB}, {kD}), ContainsSubstring("expected 4 inputs (A, B, scales_a, scales_b), got 2"));
    CHECK_THROWS_WITH(plain.check({kA, kB, kScaleA, nullptr}, {kD}), ContainsSubstring("argument 'scales_b' is a null pointer"));
    CHECK_THROWS_WITH(plain.check({static_cast<char*>(kA) + 8, kB, kScaleA, kScaleB}, {kD}),
                      ContainsSubstring("argument 'A' must start on 16 bytes"));
    // D is stored from registers: any pointer aligned to its element works.
    CHECK_NOTHROW(plain.check({kA, kB, kScaleA, kScaleB}, {static_cast<char*>(kD) + 2}));
    CHECK_THROWS_WITH(plain.check({kA, kB, kScaleA, kScaleB}, {kA}), ContainsSubstring("overlap"));

    // The scales' lengths follow the scaling: checked through views.
    GemmFp8 blocks(problem(64, 300, 1000 / 16 * 16, GemmFp8Scaling::blocks));  // K = 992: 8 steps of 128
    const TensorView right_a = TensorView::contiguous(kScaleA, DType::fp32, {8 * 64});
    const TensorView right_b = TensorView::contiguous(kScaleB, DType::fp32, {3 * 8});
    const TensorView wrong_b = TensorView::contiguous(kScaleB, DType::fp32, {300});
    CHECK_NOTHROW(blocks.check({kA, kB, right_a, right_b}, {kD}));
    CHECK_THROWS_WITH(blocks.check({kA, kB, right_a, wrong_b}, {kD}), ContainsSubstring("argument 'scales_b'"));

    GemmFp8Problem fused = problem(64, 128, 256, GemmFp8Scaling::per_row);
    fused.has_c = true, fused.beta = 1.0f, fused.bias = true;
    GemmFp8 with_c(fused);
    CHECK_NOTHROW(with_c.check({kA, kB, kScaleA, kScaleB, kC, kBias}, {kD}));
    CHECK_NOTHROW(with_c.check({kA, kB, kScaleA, kScaleB, kD, kBias}, {kD}));  // C in place of D
    CHECK_THROWS_WITH(with_c.check({kA, kB, kScaleA, kScaleB, kC}, {kD}),
                      ContainsSubstring("expected 6 inputs (A, B, scales_a, scales_b, C, bias), got 5"));
}

TEST_CASE("GemmFp8 tuning keys carry scaling and epilogue; the factory builds them back", "[validation][gemm_fp8]") {
    GemmFp8Problem p = problem(16, 7168, 2048, GemmFp8Scaling::blocks);
    p.bias = true, p.epilogue = GemmEpilogue::silu;
    GemmFp8 op(p);
    CHECK(op.describe() == "gemm_fp8 16x7168x2048 fp8_e4m3->bf16 [block,bias,silu]");
    auto rebuilt = detail::make_op({"gemm_fp8", {16, 7168, 2048}, "fp8_e4m3->bf16", "block,bias,silu"});
    CHECK(rebuilt->describe() == op.describe());
    CHECK(detail::make_op({"gemm_fp8", {2, 64, 64, 64}, "fp8_e4m3->fp32", ""})->describe() ==
          "gemm_fp8 2x64x64x64 fp8_e4m3->fp32 [tensor]");
    CHECK_THROWS_WITH(detail::make_op({"gemm_fp8", {64, 64, 64}, "bf16", ""}), ContainsSubstring("reads fp8_e4m3 codes"));
    CHECK_THROWS_WITH(detail::make_op({"gemm_fp8", {64, 64, 64}, "fp8_e4m3->bf16", "row,block"}),
                      ContainsSubstring("flag 'block' does not apply"));
}

TEST_CASE("GemmFp8 configs: sm_90 only; heuristics and search spaces valid", "[validation][gemm_fp8]") {
    const DeviceInfo sm90 = DeviceInfo::for_arch("sm_90a");
    const DeviceInfo sm80 = DeviceInfo::for_arch("sm_80");
    for (GemmFp8Scaling scaling : {GemmFp8Scaling::per_tensor, GemmFp8Scaling::per_row, GemmFp8Scaling::blocks}) {
        for (const auto& [m, n, k] : {std::array<int64_t, 3>{1, 4096, 4096}, {64, 7168, 2048}, {4096, 4096, 4096},
                                      {8192, 28672, 4096}, {300, 520, 272}}) {
            GemmFp8 op(problem(m, n, k, scaling));
            const detail::OpModel& model = op.model();
            INFO(op.describe());
            CHECK_FALSE(model.invalid_reason(model.heuristic(sm90), sm90));
            const auto space = model.search_space(sm90);
            CHECK(space.size() >= 4);
            for (const Config& c : space) {
                CHECK_FALSE(model.invalid_reason(c, sm90));
                if (scaling == GemmFp8Scaling::blocks) CHECK((128 % c.at("block_n") == 0 || c.at("block_n") == 192));
            }
            const auto why = model.invalid_reason(model.heuristic(sm80), sm80);
            REQUIRE(why);
            CHECK_THAT(*why, ContainsSubstring("needs sm_90"));
            REQUIRE(model.unsupported_reason(sm80));
            CHECK_THAT(*model.unsupported_reason(sm80), ContainsSubstring("FP8 wgmma"));
            CHECK_FALSE(model.unsupported_reason(sm90));
            CHECK(model.search_space(sm80).empty());
        }
    }
    // Small M takes the most blocks that fit in a wave; large problems 128-row tiles: 128 x 192
    // where those fill their waves as well as 128 x 128 do (8192^3), else 128 x 128 (4096^3).
    GemmFp8 decode(problem(1, 4096, 4096));
    CHECK(decode.model().heuristic(sm90).at("block_m") == 64);
    GemmFp8 large(problem(8192, 8192, 8192));
    CHECK(large.model().heuristic(sm90).at("block_m") == 128);
    CHECK(large.model().heuristic(sm90).at("block_n") == 192);
    GemmFp8 square(problem(4096, 4096, 4096));
    CHECK(square.model().heuristic(sm90).at("block_m") == 128);
    CHECK(square.model().heuristic(sm90).at("block_n") == 128);
    // Block scales keep the ring within 96 KB or three stages (their tuned problems ran faster so);
    // the others take the deepest that fits.
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{2048, 24576, 7168}, {64, 24576, 7168}, {16, 2048, 7168}}) {
        const Config blocks = GemmFp8(problem(m, n, k, GemmFp8Scaling::blocks)).model().heuristic(sm90);
        INFO(m << "x" << n << "x" << k << ": " << blocks.at("block_m") << "x" << blocks.at("block_n"));
        CHECK((blocks.at("stages") == 3 ||
               blocks.at("stages") * (blocks.at("block_m") + blocks.at("block_n")) * 128 <= 96 * 1024));
        const auto space = GemmFp8(problem(m, n, k, GemmFp8Scaling::blocks)).model().search_space(sm90);
        CHECK(std::find(space.begin(), space.end(), blocks) != space.end());
    }
    CHECK(square.model().heuristic(sm90).at("stages") >= 6);
}

TEST_CASE("GemmFp8 block scales: tiles within one block of B's, or 192 columns over two", "[validation][gemm_fp8]") {
    const DeviceInfo sm90 = DeviceInfo::for_arch("sm_90a");
    GemmFp8 op(problem(4096, 7168, 16384, GemmFp8Scaling::blocks));
    const detail::OpModel& model = op.model();
    Config c = model.heuristic(sm90);
    c["stages"] = 3;
    for (int width : {32, 64, 128, 192}) {
        c["block_n"] = width;
        INFO("block_n " << width);
        CHECK_FALSE(model.invalid_reason(c, sm90));
    }
    // 160 and 224 columns start anywhere in a block in steps of 32 and can span three blocks.
    for (int width : {96, 160, 224}) {
        c["block_n"] = width;
        const auto why = model.invalid_reason(c, sm90);
        REQUIRE(why);
        CHECK_THAT(*why, ContainsSubstring("span exactly two (192)"));
    }
    const auto space = model.search_space(sm90);
    CHECK(std::any_of(space.begin(), space.end(), [](const Config& s) { return s.at("block_n") == 192; }));
    // The heuristic takes 128 x 192 tiles with three stages where their waves cost less than 128 x
    // 128's (as measured on these four), and keeps 128 x 128 where both take two waves.
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{8192, 8192, 8192}, {4096, 7168, 16384}, {8192, 28672, 4096},
                                  {2048, 24576, 7168}}) {
        const Config chosen = GemmFp8(problem(m, n, k, GemmFp8Scaling::blocks)).model().heuristic(sm90);
        INFO(m << "x" << n << "x" << k);
        CHECK(chosen.at("block_m") == 128);
        CHECK(chosen.at("block_n") == 192);
        CHECK(chosen.at("stages") == 3);
    }
    CHECK(GemmFp8(problem(512, 8192, 8192, GemmFp8Scaling::blocks)).model().heuristic(sm90).at("block_n") == 128);
}
