// Embedding against a double-precision reference: random tables, ids spread over the vocabulary
// with some out of range (their rows must come out zero, never read), GPT-2's learned positions,
// odd hidden sizes, row strides, misaligned tables and poisoned outputs.
#include <cstdint>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "support/device_tensor.hpp"
#include "support/row_checks.hpp"
#include "support/test_support.hpp"
#include "tileops/embedding.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

// Token ids in [-3, vocab + 3): every eighth one is out of range.
std::vector<double> token_ids(int64_t count, int64_t vocab, uint64_t seed) {
    std::vector<double> ids = test::random_values(static_cast<size_t>(count), seed, 0.0, static_cast<double>(vocab));
    for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<double>(static_cast<int64_t>(ids[i]));
        if (i % 8 == 3) ids[i] = i % 16 == 3 ? -1.0 - static_cast<double>(i % 3) : static_cast<double>(vocab + i % 3);
    }
    return ids;
}

// table[ids[t]] (+ position_table[positions[t]]); out-of-range lookups add nothing.
std::vector<double> embedding_reference(const std::vector<double>& ids, const std::vector<double>& table,
                                        const std::vector<double>* positions, const std::vector<double>* position_table,
                                        int64_t vocab, int64_t max_positions, int64_t hidden) {
    std::vector<double> y(ids.size() * static_cast<size_t>(hidden), 0.0);
    for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t c = 0; c < hidden; ++c) {
            double v = 0;
            const auto id = static_cast<int64_t>(ids[t]);
            if (id >= 0 && id < vocab) v += table[static_cast<size_t>(id * hidden + c)];
            if (positions != nullptr) {
                const auto pos = static_cast<int64_t>((*positions)[t]);
                if (pos >= 0 && pos < max_positions) v += (*position_table)[static_cast<size_t>(pos * hidden + c)];
            }
            y[t * static_cast<size_t>(hidden) + static_cast<size_t>(c)] = v;
        }
    return y;
}

}  // namespace

TEST_CASE("Embedding matches a double-precision reference", "[gpu][embedding]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    const DType dtype = GENERATE(DType::fp32, DType::fp16, DType::bf16);
    const bool positions = GENERATE(false, true);
    struct Case {
        int64_t tokens, vocab, hidden, pad;
        size_t misalign;        // elements the tables are moved off a 16-byte boundary
        size_t out_misalign = 0;  // elements y is moved off a 16-byte boundary
    };
    for (const Case c : {Case{1, 1000, 4096, 0, 0}, Case{37, 50257, 768, 0, 0}, Case{130, 3001, 771, 5, 0},
                         Case{9, 512, 1024, 8, 1}, Case{70000, 64, 16, 0, 0}, Case{33, 700, 1024, 0, 0, 1}}) {
        const int64_t max_positions = 1024;
        const DType out = dtype == DType::fp16 ? DType::fp32 : dtype;  // fp16 tables into fp32 rows
        INFO(dtype_name(dtype) << " tokens " << c.tokens << " vocab " << c.vocab << " hidden " << c.hidden << " pad "
                               << c.pad << " misalign " << c.misalign << " / " << c.out_misalign
                               << (positions ? " positions" : ""));
        DeviceMatrix d_ids(DType::int32, 1, c.tokens), d_positions(DType::int32, 1, c.tokens);
        const size_t offset = c.misalign * dtype_size(dtype);
        DeviceMatrix d_table(dtype, c.vocab, c.hidden, c.hidden + c.pad, offset);
        DeviceMatrix d_position_table(dtype, max_positions, c.hidden, c.hidden + c.pad, offset);
        DeviceMatrix d_y(out, c.tokens, c.hidden, c.hidden + c.pad, c.out_misalign * dtype_size(out));
        const auto ids = token_ids(c.tokens, c.vocab, 11);
        const auto pos = token_ids(c.tokens, max_positions, 12);
        const auto table = test::round_to(dtype, test::random_values(static_cast<size_t>(c.vocab * c.hidden), 13));
        const auto position_table =
            test::round_to(dtype, test::random_values(static_cast<size_t>(max_positions * c.hidden), 14));
        d_ids.upload(ids);
        d_table.upload(table);
        EmbeddingProblem p{c.tokens, c.vocab, c.hidden, dtype, out};
        p.table_stride = c.hidden + c.pad, p.out_stride = c.hidden + c.pad;
        Embedding op = [&] {
            if (!positions) return Embedding(p);
            p.positions = true, p.max_positions = max_positions;
            d_positions.upload(pos);
            d_position_table.upload(position_table);
            return Embedding(p);
        }();
        if (positions)
            op.run(shared_runtime(), {d_ids.data(), d_table.data(), d_positions.data(), d_position_table.data()},
                   {d_y.data()});
        else
            op.run(shared_runtime(), {d_ids.data(), d_table.data()}, {d_y.data()});
        const auto ref = embedding_reference(ids, table, positions ? &pos : nullptr,
                                             positions ? &position_table : nullptr, c.vocab, max_positions, c.hidden);
        test::expect_close(d_y.download(), ref, out, "embedding");
        CHECK(d_y.gaps_untouched());
    }
}

TEST_CASE("Embedding writes 16-bit outputs and rows of out-of-range ids as exact zeros", "[gpu][embedding]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    const int64_t tokens = 64, vocab = 100, hidden = 256;
    DeviceMatrix d_ids(DType::int32, 1, tokens), d_table(DType::bf16, vocab, hidden), d_y(DType::bf16, tokens, hidden);
    const auto ids = token_ids(tokens, vocab, 21);
    const auto table = test::round_to(DType::bf16, test::random_values(static_cast<size_t>(vocab * hidden), 22));
    d_ids.upload(ids);
    d_table.upload(table);
    Embedding op({tokens, vocab, hidden, DType::bf16});
    op.run(shared_runtime(), {d_ids.data(), d_table.data()}, {d_y.data()});
    const auto y = d_y.download();
    // A gather of bf16 rows into bf16 is exact.
    CHECK(y == embedding_reference(ids, table, nullptr, nullptr, vocab, 0, hidden));
}
