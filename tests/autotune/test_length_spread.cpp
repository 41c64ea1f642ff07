// The sequence lengths `tileops-tune tune --lengths` times decode batches on, and the group offsets
// it times grouped GEMMs on: in range, the longest always present (the rows all shared out),
// reproducible from the seed, and shaped as each spread says.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autotune/length_spread.hpp"
#include "autotune/operand_buffers.hpp"
#include "core/op_model.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tuning::LengthSpread;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("Length spreads parse by name and refuse others, naming the choices", "[autotune]") {
    for (LengthSpread s : {LengthSpread::uniform, LengthSpread::one_long, LengthSpread::long_tail, LengthSpread::ragged})
        CHECK(tuning::parse_length_spread(tuning::length_spread_name(s)) == s);
    try {
        tuning::parse_length_spread("sideways");
        FAIL("accepted an unknown spread");
    } catch (const InvalidArgument& e) {
        CHECK_THAT(e.what(), ContainsSubstring("'sideways'") && ContainsSubstring("one_long, long_tail or ragged"));
    }
    CHECK_THROWS_AS(tuning::parse_length_spread(""), InvalidArgument);
    CHECK_THROWS_AS(tuning::parse_length_spread("Uniform"), InvalidArgument);
}

TEST_CASE("Spread lengths stay in [1, longest], hold the longest, and follow the seed", "[autotune]") {
    const long long batch = 200, longest = 9000;
    for (LengthSpread s : {LengthSpread::one_long, LengthSpread::long_tail, LengthSpread::ragged}) {
        CAPTURE(tuning::length_spread_name(s));
        const std::vector<int32_t> a = tuning::spread_lengths(s, batch, longest, 7);
        REQUIRE(a.size() == static_cast<size_t>(batch));
        CHECK(*std::min_element(a.begin(), a.end()) >= 1);
        CHECK(*std::max_element(a.begin(), a.end()) == longest);
        CHECK(std::count(a.begin(), a.end(), static_cast<int32_t>(longest)) >= 1);
        CHECK(tuning::spread_lengths(s, batch, longest, 7) == a);
        CHECK(tuning::spread_lengths(s, batch, longest, 8) != a);
        const double mean = std::accumulate(a.begin(), a.end(), 0.0) / static_cast<double>(batch);
        CHECK(mean < 0.75 * static_cast<double>(longest));  // not the uniform batch
    }
    const std::vector<int32_t> chat = tuning::spread_lengths(LengthSpread::one_long, batch, longest, 3);
    CHECK(std::count_if(chat.begin(), chat.end(), [](int32_t n) { return n > 256; }) == 1);
    const std::vector<int32_t> tail = tuning::spread_lengths(LengthSpread::long_tail, batch, longest, 3);
    CHECK(*std::min_element(tail.begin(), tail.end()) >= 16);
    const std::vector<int32_t> ragged = tuning::spread_lengths(LengthSpread::ragged, batch, longest, 3);
    CHECK(std::count_if(ragged.begin(), ragged.end(), [](int32_t n) { return n > 4500; }) > batch / 4);
}

TEST_CASE("The uniform spread and degenerate batches", "[autotune]") {
    CHECK(tuning::spread_lengths(LengthSpread::uniform, 5, 300, 1) == std::vector<int32_t>(5, 300));
    CHECK(tuning::spread_lengths(LengthSpread::ragged, 0, 300, 1).empty());
    CHECK(tuning::spread_lengths(LengthSpread::one_long, 4, 0, 1) == std::vector<int32_t>(4, 0));
    CHECK(tuning::spread_lengths(LengthSpread::long_tail, 4, 1, 1) == std::vector<int32_t>(4, 1));
    const std::vector<int32_t> short_cache = tuning::spread_lengths(LengthSpread::long_tail, 50, 10, 2);
    CHECK(*std::max_element(short_cache.begin(), short_cache.end()) == 10);
    CHECK(*std::min_element(short_cache.begin(), short_cache.end()) >= 1);
    CHECK(tuning::spread_lengths(LengthSpread::one_long, 1, 4096, 9) == std::vector<int32_t>{4096});
}

TEST_CASE("Decode ops mark their lengths and the caches read as far as the lengths reach", "[autotune]") {
    DecodeAttentionProblem d;
    d.batch = 3, d.num_heads = 8, d.num_kv_heads = 2, d.head_dim = 64, d.max_kv_len = 100;
    const auto operands = DecodeAttention(d).model().operands();
    REQUIRE(operands.size() >= 4);
    CHECK(operands[3].name == "lengths");
    CHECK(operands[3].fill == detail::OperandFill::sequence_lengths);
    CHECK(operands[3].fill_value == 100);
    CHECK((operands[1].read_by_lengths && operands[2].read_by_lengths));
    CHECK_FALSE(operands[0].read_by_lengths);

    MlaDecodeProblem m;
    m.batch = 2, m.num_heads = 16, m.max_kv_len = 64;
    const auto mla = MlaDecode(m).model().operands();
    CHECK(mla[2].fill == detail::OperandFill::sequence_lengths);
    CHECK(mla[1].read_by_lengths);
}

TEST_CASE("Group offsets share every row out, evenly or as the spread draws them", "[autotune]") {
    const long long groups = 160, rows = 49152;
    // Uniform: the even split the tuner uses without --lengths (detail::OperandFill::even_offsets).
    const std::vector<int64_t> even = tuning::spread_group_offsets(LengthSpread::uniform, groups, rows, 1);
    detail::OperandSpec spec{"group_rows", DType::int32, 0, groups + 1, groups + 1, false};
    spec.fill = detail::OperandFill::even_offsets;
    spec.fill_value = rows;
    REQUIRE(even.size() == static_cast<size_t>(groups + 1));
    for (size_t g = 0; g < even.size(); ++g) CHECK(even[g] == tuning::index_fill(spec, g, even.size()));

    for (LengthSpread s : {LengthSpread::one_long, LengthSpread::long_tail, LengthSpread::ragged}) {
        INFO(tuning::length_spread_name(s));
        const std::vector<int64_t> offsets = tuning::spread_group_offsets(s, groups, rows, 7);
        REQUIRE(offsets.size() == static_cast<size_t>(groups + 1));
        CHECK(offsets.front() == 0);
        CHECK(offsets.back() == rows);
        int64_t largest = 0;
        for (size_t g = 0; g + 1 < offsets.size(); ++g) {
            CHECK(offsets[g + 1] >= offsets[g]);
            largest = std::max(largest, offsets[g + 1] - offsets[g]);
        }
        CHECK(largest >= 2 * rows / groups);  // uneven: the hottest group holds twice its share or more
        CHECK(tuning::spread_group_offsets(s, groups, rows, 7) == offsets);
        CHECK(tuning::spread_group_offsets(s, groups, rows, 8) != offsets);
    }
    // One hot expert: it holds the longest draw (4096) against 1-256 for each other.
    const std::vector<int64_t> hot = tuning::spread_group_offsets(LengthSpread::one_long, 8, 16384, 3);
    int64_t hottest = 0;
    for (size_t g = 0; g + 1 < hot.size(); ++g) hottest = std::max(hottest, hot[g + 1] - hot[g]);
    CHECK(hottest > 16384 / 2);

    // Edges: no groups, no rows, fewer rows than groups (every row still in a group).
    CHECK(tuning::spread_group_offsets(LengthSpread::ragged, 0, 100, 1) == std::vector<int64_t>{0});
    CHECK(tuning::spread_group_offsets(LengthSpread::ragged, 3, 0, 1) == std::vector<int64_t>(4, 0));
    const std::vector<int64_t> few = tuning::spread_group_offsets(LengthSpread::long_tail, 64, 5, 2);
    CHECK(few.back() == 5);
    CHECK(std::is_sorted(few.begin(), few.end()));
}
