// MlaDecode refuses bad problems and bad operands before any launch, naming what was wrong; its
// configs, workspace and the problem factory behave as documented. No GPU needed.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ops/registry.hpp"
#include "core/op_model.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {

// Device addresses that check() never dereferences (test::fake_device_address).
void* const kQ = test::fake_device_address(1);
void* const kKv = test::fake_device_address(2);
void* const kLengths = test::fake_device_address(4);
void* const kPages = test::fake_device_address(5);
void* const kOut = test::fake_device_address(6);
void* const kLse = test::fake_device_address(7);

MlaDecodeProblem deepseek() {
    MlaDecodeProblem p;
    p.batch = 64;
    p.num_heads = 128;
    p.max_kv_len = 4096;
    p.page_size = 64;
    p.max_pages_per_seq = 64;
    p.num_pages = 64 * 64;
    return p;
}

template <typename Edit>
MlaDecodeProblem with(Edit edit, MlaDecodeProblem p = deepseek()) {
    edit(p);
    return p;
}

MlaDecodeProblem contiguous() {
    return with([](auto& p) { p.page_size = 0, p.max_pages_per_seq = 0, p.num_pages = 0, p.batch = 2; });
}

}  // namespace

TEST_CASE("MlaDecode refuses bad problems by name", "[validation][mla]") {
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.num_heads = 0; })), ContainsSubstring("num_heads must be in [1, 1024]"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.q_len = 9; })), ContainsSubstring("q_len must be in [1, 8]"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.batch = 0; })), ContainsSubstring("batch must be in [1, 65535]"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.max_kv_len = 0; })), ContainsSubstring("max_kv_len"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.dtype = DType::fp32; })), ContainsSubstring("dtype must be fp16 or bf16, got fp32"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.scale = -1.0f; })), ContainsSubstring("scale must be positive"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.page_size = 48; })),
                      ContainsSubstring("page_size must be 16, 32, 64, 128 or 256"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.max_pages_per_seq = 8; })),
                      ContainsSubstring("max_kv_len (4096) exceeds max_pages_per_seq x page_size (8 x 64)"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.num_pages = 5; }, contiguous())), ContainsSubstring("need page_size > 0"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.kv_token_stride = 580; })),
                      ContainsSubstring("kv_token_stride = 580 must be a multiple of 8 elements"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.o_head_stride = 516; })),
                      ContainsSubstring("o_head_stride = 516 must be a multiple of 8 elements"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.q_head_stride = -576; })), ContainsSubstring("q_head_stride must be >= 0"));
    // Output rows of 512 that overlap would be written by racing blocks.
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.o_head_stride = 256; })), ContainsSubstring("make output rows overlap"));
    CHECK_NOTHROW(MlaDecode(with([](auto& p) { p.o_head_stride = 1024; })));
}

TEST_CASE("MlaDecode checks its operands by name", "[validation][mla]") {
    MlaDecode op(deepseek());
    CHECK_NOTHROW(op.check({kQ, kKv, kLengths, kPages}, {kOut}));
    CHECK_THROWS_WITH(op.check({kQ, kKv, kLengths}, {kOut}),
                      ContainsSubstring("expected 4 inputs (q, kv, lengths, page_table), got 3"));
    CHECK_THROWS_WITH(op.check({kQ, kKv, kLengths, kPages}, {kOut, kLse}), ContainsSubstring("expected 1 outputs (out), got 2"));
    CHECK_THROWS_WITH(op.check({kQ, nullptr, kLengths, kPages}, {kOut}), ContainsSubstring("argument 'kv' is a null pointer"));
    void* kv_off = static_cast<char*>(kKv) + 8;
    CHECK_THROWS_WITH(op.check({kQ, kv_off, kLengths, kPages}, {kOut}),
                      ContainsSubstring("argument 'kv'") && ContainsSubstring("16 bytes"));
    void* out_off = static_cast<char*>(kOut) + 4;
    CHECK_THROWS_WITH(op.check({kQ, kKv, kLengths, kPages}, {out_off}), ContainsSubstring("argument 'out'"));
    const TensorView kv_view = TensorView::contiguous(kKv, DType::bf16, {4096, 64, 1, 576});
    CHECK_THROWS_WITH(op.check({kQ, kv_view, kLengths, kPages}, {kOut}),
                      ContainsSubstring("'kv' must have shape [num_pages, page_size, 576] = [4096, 64, 576]"));
    CHECK_NOTHROW(op.check({TensorView::contiguous(kQ, DType::bf16, {64, 1, 128, 576}),
                            TensorView::contiguous(kKv, DType::bf16, {4096, 64, 576}),
                            TensorView::contiguous(kLengths, DType::int32, {64}),
                            TensorView::contiguous(kPages, DType::int32, {64, 64})},
                           {TensorView::contiguous(kOut, DType::bf16, {64, 1, 128, 512})}));
    CHECK_THROWS_WITH(op.check({kQ, kKv, TensorView::contiguous(kLengths, DType::fp32, {64}), kPages}, {kOut}),
                      ContainsSubstring("'lengths' has dtype fp32, expected int32"));

    MlaDecodeProblem with_lse = contiguous();
    with_lse.return_lse = true;
    MlaDecode contiguous_op(with_lse);
    CHECK_NOTHROW(contiguous_op.check({kQ, kKv, kLengths}, {kOut, kLse}));
    CHECK_THROWS_WITH(contiguous_op.check({kQ, kKv, kLengths}, {kOut}), ContainsSubstring("(out, lse)"));
}

TEST_CASE("MlaDecode refuses outputs that overlap its inputs or each other", "[validation][mla]") {
    MlaDecodeProblem with_lse = deepseek();
    with_lse.return_lse = true;
    const MlaDecode op(with_lse);
    for (void* out : {kQ, kKv, static_cast<void*>(static_cast<char*>(kKv) + (1 << 20)), kLengths, kPages})
        CHECK_THROWS_WITH(op.check({kQ, kKv, kLengths, kPages}, {out, kLse}), ContainsSubstring("output 'out' overlaps"));
    CHECK_THROWS_WITH(op.check({kQ, kKv, kLengths, kPages}, {kOut, kOut}), ContainsSubstring("output 'out' overlaps 'lse'"));
    CHECK_NOTHROW(op.check({kQ, kKv, kLengths, kPages}, {kOut, kLse}));
}

TEST_CASE("MlaDecode strides whose tensors overflow 64-bit offsets are refused", "[validation][mla]") {
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.num_heads = 24, p.o_batch_stride = 512, p.o_head_stride = int64_t{1} << 58; })),
                      ContainsSubstring("o_token_stride") && ContainsSubstring("2^58"));
    CHECK_THROWS_WITH(MlaDecode(with([](auto& p) { p.q_batch_stride = int64_t{1} << 57; })),
                      ContainsSubstring("q spans more than 2^58 elements"));
}

TEST_CASE("MlaDecode configs: heuristic valid, splits only where the GPU is not full", "[mla]") {
    for (const char* arch : {"sm_80", "sm_90a"}) {
        const DeviceInfo device = DeviceInfo::for_arch(arch);
        for (auto p : {deepseek(), contiguous(), with([](auto& q) { q.batch = 1, q.num_heads = 16; }),
                       with([](auto& q) { q.batch = 128, q.q_len = 2; }), with([](auto& q) { q.num_heads = 1; })}) {
            MlaDecode op(p);
            const detail::OpModel& model = op.model();
            INFO(arch << " " << model.describe());
            CHECK_FALSE(model.invalid_reason(model.heuristic(device), device).has_value());
            const auto space = model.search_space(device);
            CHECK(space.size() > 4);
            // A batch's keys are cut by the lengths on the device: any sequence may be split.
            for (const Config& config : space)
                CHECK((config.at("splits") > 1 || p.batch > 1) == (model.workspace_bytes(config, 1) > 0));
        }
    }
    const DeviceInfo h100 = DeviceInfo::for_arch("sm_90a");
    // batch 64 x 128 heads fills the GPU with 128 blocks of 64 rows; one sequence of 16 heads is split.
    CHECK(MlaDecode(deepseek()).model().heuristic(h100).at("splits") == 1);
    CHECK(MlaDecode(deepseek()).model().heuristic(h100).at("block_m") == 64);
    CHECK(MlaDecode(deepseek()).model().heuristic(h100).at("kernel") == 2);  // the seesaw wgmma kernel on sm_90a
    const DeviceInfo a100 = DeviceInfo::for_arch("sm_80");
    CHECK(MlaDecode(deepseek()).model().heuristic(a100).at("kernel") == 0);
    CHECK(MlaDecode(deepseek()).model().invalid_reason(MlaDecode(deepseek()).model().heuristic(h100), a100).value_or("").find(
              "needs sm_90a") != std::string::npos);
    CHECK(MlaDecode(with([](auto& q) { q.batch = 1, q.num_heads = 16; })).model().heuristic(h100).at("splits") > 8);
    // One long sequence is split until a wave fills the SMs, past the 64 splits the merge once allowed.
    const MlaDecode one_long(with([](auto& q) { q.batch = 1, q.num_heads = 32, q.max_kv_len = 65536, q.max_pages_per_seq = 1024; }));
    CHECK(one_long.model().heuristic(h100).at("splits") >= 113);
    CHECK(one_long.model().heuristic(h100).at("splits") <= 256);
    MlaDecode op(deepseek());
    Config bad = op.model().heuristic(h100);
    bad["block_m"] = 48;
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("kernel 2 (seesaw) takes block_m 64") != std::string::npos);
    bad["kernel"] = 1;
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("kernel 1 (wgmma) takes block_m 64") != std::string::npos);
    bad["kernel"] = 0;
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("block_m = 48") != std::string::npos);
    bad = op.model().heuristic(h100);
    bad["kernel"] = 1, bad["block_n"] = 32;
    bad["stages"] = 8;  // 64 + 8 x 32 rows of 1168 bytes: more than the H100 holds
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("shared memory") != std::string::npos);
    bad.erase("splits");
    CHECK(op.model().invalid_reason(bad, h100).value_or("").find("'splits'") != std::string::npos);
}

TEST_CASE("mla_decode problems parse from tileops-tune's text form", "[mla]") {
    auto op = detail::make_op({"mla_decode", {64, 128, 1, 4096}, "bf16", "page64"});
    CHECK(op->describe() == "mla_decode 64x128x1x4096 bf16 [page64]");
    const auto& p = static_cast<MlaDecode&>(*op).problem();
    CHECK(p.page_size == 64);
    CHECK(p.max_pages_per_seq == 64);
    CHECK(p.num_pages == 64 * 64);
    CHECK_THROWS_WITH(detail::make_op({"mla_decode", {8, 128, 4096}, "bf16", ""}),
                      ContainsSubstring("batch x heads x q_len x max_kv_len"));
    CHECK_THROWS_WITH(detail::make_op({"mla_decode", {8, 128, 1, 64}, "bf16", "causal"}),
                      ContainsSubstring("flag 'causal' does not apply to mla_decode"));
}
