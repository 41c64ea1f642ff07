// Embedding without a GPU: bad problems and operands refused by name, tuning keys that round-trip
// through the registry, and every config of the search space compiling for sm_80 and sm_90a.
#include <cstdint>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "support/compile_kernels.hpp"
#include "tileops/embedding.hpp"
#include "tileops/error.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {
// Fake device addresses, a terabyte apart: check() never dereferences them.
void* const kIds = reinterpret_cast<void*>(uintptr_t{1} << 40);
void* const kTable = reinterpret_cast<void*>(uintptr_t{2} << 40);
void* const kPositions = reinterpret_cast<void*>(uintptr_t{3} << 40);
void* const kPositionTable = reinterpret_cast<void*>(uintptr_t{4} << 40);
void* const kY = reinterpret_cast<void*>(uintptr_t{5} << 40);
}  // namespace

TEST_CASE("Embedding refuses bad problems by name", "[validation][embedding]") {
    CHECK_THROWS_WITH(Embedding({0, 100, 64}), ContainsSubstring("Embedding") && ContainsSubstring("rows must be >= 1"));
    CHECK_THROWS_WITH(Embedding({4, 0, 64}), ContainsSubstring("vocab_size"));
    CHECK_THROWS_WITH(Embedding({4, 100, 64, DType::int32}), ContainsSubstring("dtype"));
    CHECK_THROWS_WITH(Embedding({4, 100, 64, DType::bf16, {}, false, 0, 32}), ContainsSubstring("table_stride"));
    CHECK_THROWS_WITH(Embedding({4, 100, 64, DType::bf16, {}, true, 0}), ContainsSubstring("max_positions"));
    CHECK_THROWS_WITH(Embedding({4, int64_t{1} << 30, (int64_t{1} << 31) - 1, DType::bf16}), ContainsSubstring("overflows"));
    CHECK_NOTHROW(Embedding({4, 100, 64, DType::bf16, {}, false, -7}));  // max_positions unused without positions
}

TEST_CASE("Embedding checks its operands by name", "[validation][embedding]") {
    Embedding op({8, 1000, 768, DType::bf16});
    CHECK(op.vector_width({kIds, kTable}, {kY}) == 8);
    CHECK_THROWS_WITH(op.check({kIds}, {kY}), ContainsSubstring("inputs") && ContainsSubstring("ids, table"));
    CHECK_THROWS_WITH(op.check({nullptr, kTable}, {kY}), ContainsSubstring("ids"));
    CHECK_THROWS_WITH(op.check({kIds, kTable}, {kTable}), ContainsSubstring("overlaps"));
    // A table 2 bytes past a 16-byte boundary: 2-byte accesses only.
    CHECK(op.vector_width({kIds, static_cast<char*>(kTable) + 2}, {kY}) == 1);

    EmbeddingProblem gpt2{8, 50257, 768, DType::fp32};
    gpt2.positions = true, gpt2.max_positions = 1024;
    Embedding with_positions(gpt2);
    CHECK(with_positions.vector_width({kIds, kTable, kPositions, kPositionTable}, {kY}) == 8);  // the config caps it
    CHECK_THROWS_WITH(with_positions.check({kIds, kTable}, {kY}), ContainsSubstring("positions"));
}

TEST_CASE("Embedding keys round-trip through the registry", "[config][embedding]") {
    EmbeddingProblem p{512, 50257, 768, DType::bf16, DType::fp32};
    p.positions = true, p.max_positions = 1024;
    const Embedding op(p);
    const TuningKey key = op.model().tuning_key("sm_90a", "");
    CHECK(key.to_string() == "embedding 512x50257x768 bf16->fp32 [positions1024] sm_90a");
    const auto rebuilt = detail::make_op({key.op, key.shape, key.dtype, key.flags});
    CHECK(rebuilt->describe() == op.describe());
    CHECK_THROWS_WITH(detail::make_op({"embedding", {4, 100}, "bf16", ""}), ContainsSubstring("tokens x vocab x hidden"));
    CHECK_THROWS_WITH(detail::make_op({"embedding", {4, 100, 64}, "bf16", "page16"}), ContainsSubstring("flag 'page16'"));
}

TEST_CASE("every Embedding config of the search space compiles for sm_80 and sm_90a", "[compile][embedding]") {
    const std::string arch = GENERATE("sm_80", "sm_90a");
    const DeviceInfo device = DeviceInfo::for_arch(arch);
    test::KernelsByFile kernels;
    for (DType dtype : {DType::fp32, DType::bf16}) {
        EmbeddingProblem p{64, 50257, 768, dtype, DType::fp16};
        p.positions = dtype == DType::fp32, p.max_positions = 1024;
        const Embedding op(p);
        const auto space = op.model().search_space(device);
        REQUIRE(space.size() >= 10);
        for (const Config& config : space)
            for (int vec : op.model().vector_widths(config)) test::add_kernels(kernels, op.model(), config, vec, device);
    }
    test::compile_all(kernels, arch);
}
