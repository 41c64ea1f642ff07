// The sequence lengths `tileops-tune tune --lengths` times decode batches on: in range, the longest
// always present, reproducible from the seed, and shaped as each spread says.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autotune/length_spread.hpp"
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
