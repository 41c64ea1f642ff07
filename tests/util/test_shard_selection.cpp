// The search-space tests' sharding (TILEOPS_TEST_SHARD): shards are disjoint, cover every item,
// and a malformed value is refused rather than read as "everything".
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "support/test_support.hpp"

using tileops::test::ScopedEnv;
using tileops::test::this_shard;

TEST_CASE("TILEOPS_TEST_SHARD=i/n splits a list into n disjoint parts that cover it", "[test_support]") {
    std::vector<int> items;
    for (int i = 0; i < 11; ++i) items.push_back(i);
    {
        ScopedEnv unset("TILEOPS_TEST_SHARD", "");
        CHECK(this_shard(items) == items);
    }
    std::vector<int> seen;
    for (int i = 0; i < 3; ++i) {
        ScopedEnv shard("TILEOPS_TEST_SHARD", std::to_string(i) + "/3");
        for (int item : this_shard(items)) seen.push_back(item);
    }
    std::sort(seen.begin(), seen.end());
    CHECK(seen == items);
    ScopedEnv second("TILEOPS_TEST_SHARD", "1/3");
    CHECK(this_shard(items) == std::vector<int>{1, 4, 7, 10});
    for (const char* bad : {"3/3", "1/0", "1", "/3", "a/3", "1/3x", "-1/3", "1/9999999"}) {
        INFO(bad);
        ScopedEnv malformed("TILEOPS_TEST_SHARD", bad);
        CHECK_THROWS_AS(this_shard(items), std::invalid_argument);
    }
}
