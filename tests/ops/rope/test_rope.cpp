// Rope without a GPU: bad problems and operands refused by name, the frequencies (plain, linear and
// Llama 3 scaling) against their definitions, tuning keys that round-trip through the registry,
// and the search space compiling for sm_80 and sm_90a.
#include <cmath>
#include <cstdint>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/error.hpp"
#include "tileops/rope.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
// Fake device addresses, a terabyte apart: check() never dereferences them.
void* address(int i) { return reinterpret_cast<void*>(uintptr_t(i) << 40); }
void* const kQ = address(1);
void* const kK = address(2);
void* const kV = address(3);
void* const kPositions = address(4);
void* const kSlots = address(5);
void* const kQOut = address(6);
void* const kKOut = address(7);
void* const kKCache = address(8);
void* const kVCache = address(9);

RopeProblem llama_append(int64_t tokens) {
    RopeProblem p{tokens, 32, 8, 128};
    p.theta = 500000.0, p.scaling = RopeScaling::llama3();
    p.append_kv = true, p.page_size = 16, p.num_pages = 64;
    return p;
}
}  // namespace

TEST_CASE("Rope refuses bad problems by name", "[validation][rope]") {
    CHECK_THROWS_WITH(Rope({0, 32, 8, 128}), ContainsSubstring("Rope") && ContainsSubstring("num_tokens"));
    CHECK_THROWS_WITH(Rope({1, 0, 8, 128}), ContainsSubstring("num_heads"));
    CHECK_THROWS_WITH(Rope({1, 32, 8, 127}), ContainsSubstring("head_dim must be even"));
    CHECK_THROWS_WITH(Rope({1, 32, 8, 1024}), ContainsSubstring("head_dim"));
    CHECK_THROWS_WITH(Rope({1, 32, 8, 128, 130}), ContainsSubstring("rotary_dim"));
    CHECK_THROWS_WITH(Rope({1, 32, 8, 128, 33}), ContainsSubstring("rotary_dim must be even"));
    RopeProblem p{1, 32, 8, 128};
    p.theta = 0;
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("theta"));
    p.theta = 1e4, p.scaling = RopeScaling::llama3(8, 4, 1);
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("high_freq_factor"));
    p.scaling = {RopeScaling::Type::linear, std::nan("")};
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("scaling.factor"));
    p.scaling = {static_cast<RopeScaling::Type>(7)};
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("scaling.type"));
    p.scaling = {};
    p.style = static_cast<RopeStyle>(3);
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("style"));
    p.style = RopeStyle::none, p.rotary_dim = 64;
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("rotary_dim must be 0"));
    p.rotary_dim = 0;
    CHECK(Rope(p).problem().rotary_dim == 0);
    CHECK(Rope(p).frequencies().empty());
    p.style = RopeStyle::neox, p.dtype = DType::int32;
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("dtype"));
    p.dtype = DType::bf16, p.q_stride = 100;
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("q_stride"));
    p.q_stride = 0, p.page_size = 16;
    CHECK_THROWS_WITH(Rope(p), ContainsSubstring("append_kv only"));

    RopeProblem a = llama_append(4);
    a.page_size = 0;
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("page_size"));
    a = llama_append(4), a.num_pages = int64_t{1} << 28;  // 2^32 slots: past int32
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("num_pages"));
    a = llama_append(4), a.kv_dtype = DType::fp16;
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("kv_dtype"));
    a = llama_append(4), a.k_scale = 2.0f;
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("k_scale"));
    a.kv_dtype = DType::fp8_e4m3, a.v_scale = -1.0f;
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("v_scale"));
    a.v_scale = 1e-40f;  // subnormal: its reciprocal overflows
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("v_scale") && ContainsSubstring("subnormal"));
    a = llama_append(4), a.cache_token_stride = 64;  // 8 heads of 128 in 64 elements
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("overlap"));
    a = llama_append(4), a.cache_page_stride = int64_t{1} << 58;
    CHECK_THROWS_WITH(Rope(a), ContainsSubstring("overflows"));
}

TEST_CASE("Rope checks its operands by name", "[validation][rope]") {
    Rope op(llama_append(8));
    CHECK(op.vector_width({kQ, kK, kV, kPositions, kSlots}, {kQOut, kKOut, kKCache, kVCache}) == 8);
    // In place is allowed for q and k.
    CHECK(op.vector_width({kQ, kK, kV, kPositions, kSlots}, {kQ, kK, kKCache, kVCache}) == 8);
    CHECK_THROWS_WITH(op.check({kQ, kK, kPositions}, {kQOut, kKOut}), ContainsSubstring("q, k, v, positions, slots"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kPositions, kSlots}, {kQOut, kKOut}),
                      ContainsSubstring("q_out, k_out, k_cache, v_cache"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kPositions, nullptr}, {kQOut, kKOut, kKCache, kVCache}),
                      ContainsSubstring("slots"));
    // Outputs may not alias anything but their own input.
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kPositions, kSlots}, {kK, kKOut, kKCache, kVCache}),
                      ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kPositions, kSlots}, {kQOut, kKOut, kKCache, kKCache}),
                      ContainsSubstring("overlaps"));
    CHECK_THROWS_WITH(op.check({kQ, kK, kV, kPositions, kSlots}, {kQOut, kKOut, kV, kVCache}),
                      ContainsSubstring("overlaps"));
    // A cache 2 bytes past a 16-byte boundary: 2-byte accesses only.
    CHECK(op.vector_width({kQ, kK, kV, kPositions, kSlots}, {kQOut, kKOut, static_cast<char*>(kKCache) + 2, kVCache}) == 1);

    // A fused QKV projection: q, k and v inside one row of (32 + 2 x 8) x 128.
    RopeProblem fused{8, 32, 8, 128};
    fused.q_stride = fused.k_stride = 48 * 128;
    char* qkv = static_cast<char*>(kQ);
    // In place needs the outputs' strides too: packed outputs would overlap the fused rows.
    CHECK_THROWS_WITH(Rope(fused).check({qkv, qkv + 32 * 128 * 2, kPositions}, {qkv, qkv + 32 * 128 * 2}),
                      ContainsSubstring("'q_out' overlaps 'q'"));
    fused.q_out_stride = fused.k_out_stride = 48 * 128;
    Rope in_qkv(fused);
    CHECK(in_qkv.vector_width({qkv, qkv + 32 * 128 * 2, kPositions}, {qkv, qkv + 32 * 128 * 2}) == 8);
}

TEST_CASE("Rope frequencies follow their definitions", "[config][rope]") {
    RopeProblem p{1, 32, 8, 128};
    p.theta = 500000.0;
    const std::vector<float> plain = Rope(p).frequencies();
    REQUIRE(plain.size() == 64);
    for (size_t i = 0; i < plain.size(); ++i)
        CHECK(plain[i] == static_cast<float>(std::pow(500000.0, -static_cast<double>(2 * i) / 128.0)));

    p.scaling = {RopeScaling::Type::linear, 4.0};
    const std::vector<float> linear = Rope(p).frequencies();
    for (size_t i = 0; i < plain.size(); ++i)
        CHECK(linear[i] == static_cast<float>(std::pow(500000.0, -static_cast<double>(2 * i) / 128.0) / 4.0));

    // Llama 3.1: short wavelengths (below 8192 / 4 = 2048 positions) kept, long ones (above 8192)
    // divided by 8, a blend between.
    p.scaling = RopeScaling::llama3();
    const std::vector<float> llama = Rope(p).frequencies();
    int kept = 0, divided = 0, blended = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
        const double f = std::pow(500000.0, -static_cast<double>(2 * i) / 128.0);
        const double wavelength = 2 * 3.14159265358979323846 / f;
        if (wavelength < 2048) {
            CHECK(llama[i] == plain[i]);
            ++kept;
        } else if (wavelength > 8192) {
            CHECK(llama[i] == static_cast<float>(f / 8));
            ++divided;
        } else {
            // Between, Hugging Face's smooth factor on 8192 / wavelength from 1 to 4 moves the
            // frequency from f / 8 up to f, written here as a step from f / 8.
            const double smooth = (8192 / wavelength - 1) / (4 - 1);
            const double blend = f / 8 + smooth * (f - f / 8);
            CHECK(std::abs(llama[i] - blend) <= 1e-6 * blend);
            CHECK(llama[i] < plain[i]);
            CHECK(llama[i] > static_cast<float>(f / 8));
            ++blended;
        }
    }
    CHECK(kept > 0);
    CHECK(divided > 0);
    CHECK(blended > 0);

    RopeProblem partial{1, 16, 16, 256, 64};
    CHECK(Rope(partial).frequencies().size() == 32);
}

TEST_CASE("Rope keys round-trip through the registry", "[config][rope]") {
    RopeProblem p = llama_append(64);
    p.kv_dtype = DType::fp8_e4m3;
    const Rope op(p);
    const TuningKey key = op.model().tuning_key("sm_90a", "");
    CHECK(key.to_string() == "rope 64x32x8x128 bf16 [page16,kv_fp8] sm_90a");
    const auto rebuilt = detail::make_op({key.op, key.shape, key.dtype, key.flags});
    CHECK(rebuilt->describe() == op.describe());

    RopeProblem gptj{512, 16, 16, 256, 64};
    gptj.style = RopeStyle::gptj, gptj.dtype = DType::fp16;
    const Rope partial(gptj);
    const TuningKey partial_key = partial.model().tuning_key("sm_80", "");
    CHECK(partial_key.to_string() == "rope 512x16x16x256 fp16 [rot64,gptj] sm_80");
    CHECK(detail::make_op({partial_key.op, partial_key.shape, partial_key.dtype, partial_key.flags})->describe() ==
          partial.describe());

    RopeProblem gpt2 = llama_append(8);
    gpt2.style = RopeStyle::none;
    const Rope copy(gpt2);
    const TuningKey copy_key = copy.model().tuning_key("sm_90a", "");
    CHECK(copy_key.to_string() == "rope 8x32x8x128 bf16 [norot,page16] sm_90a");
    CHECK(detail::make_op({copy_key.op, copy_key.shape, copy_key.dtype, copy_key.flags})->describe() == copy.describe());

    CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8}, "bf16", ""}), ContainsSubstring("tokens x heads"));
    CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8, 128}, "bf16", "positions9"}),
                      ContainsSubstring("flag 'positions9'"));
    CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8, 128}, "bf16", "kv_fp8"}), ContainsSubstring("pageN"));
    // Contradictions are refused in either order; rot0 (a typo: 0 means the whole head) and repeats too.
    for (const char* flags : {"gptj,norot", "norot,gptj", "page16,norot,gptj"})
        CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8, 128}, "bf16", flags}), ContainsSubstring("contradict"));
    for (const char* flags : {"rot0", "rot1", "norot,rot0"})
        CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8, 128}, "bf16", flags}), ContainsSubstring("N >= 2"));
    CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8, 128}, "bf16", "rot32,rot64"}), ContainsSubstring("rotN given twice"));
    CHECK_THROWS_WITH(detail::make_op({"rope", {4, 32, 8, 128}, "bf16", "gptj,gptj"}), ContainsSubstring("gptj given twice"));
}

TEST_CASE("Rope configs compile for sm_80 and sm_90a", "[compile][rope]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    RopeProblem fp8 = llama_append(64);
    fp8.kv_dtype = DType::fp8_e4m3;
    RopeProblem gptj{512, 16, 16, 256, 64};
    gptj.style = RopeStyle::gptj, gptj.dtype = DType::fp32;
    // The whole search space of one problem, each config at its widest vector; the heuristic's
    // config of both at every width (misaligned operands).
    const Rope paged(fp8);
    const auto space = paged.model().search_space(device);
    REQUIRE(space.size() >= 16);
    for (const Config& config : space)
        test::add_kernels(kernels, paged.model(), config, paged.model().vector_widths(config)[0], device);
    RopeProblem copy = llama_append(5);
    copy.style = RopeStyle::none;
    for (const RopeProblem& p : {fp8, gptj, copy}) {
        const Rope op(p);
        const Config heuristic = op.model().heuristic(device);
        for (int vec : op.model().vector_widths(heuristic)) test::add_kernels(kernels, op.model(), heuristic, vec, device);
    }
    test::compile_all(kernels, arch);
}
