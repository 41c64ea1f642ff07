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

TEST_CASE("TILEOPS_TEST_COMPILE_SHARD is read apart from TILEOPS_TEST_SHARD, and as strictly", "[test_support]") {
    using tileops::test::test_shard;
    ScopedEnv search_space("TILEOPS_TEST_SHARD", "1/3");
    {
        ScopedEnv unset("TILEOPS_TEST_COMPILE_SHARD", "");
        CHECK(test_shard("TILEOPS_TEST_COMPILE_SHARD").count == 1);
    }
    ScopedEnv compile("TILEOPS_TEST_COMPILE_SHARD", "0/32");
    const tileops::test::Shard share = test_shard("TILEOPS_TEST_COMPILE_SHARD");
    CHECK(share.index == 0);
    CHECK(share.count == 32);
    CHECK(test_shard().count == 3);  // the search-space shard is untouched
    std::vector<int> items(70);
    for (int i = 0; i < 70; ++i) items[static_cast<size_t>(i)] = i;
    CHECK(this_shard(items, share) == std::vector<int>{0, 32, 64});
    ScopedEnv malformed("TILEOPS_TEST_COMPILE_SHARD", "32/32");
    try {
        test_shard("TILEOPS_TEST_COMPILE_SHARD");
        FAIL("32/32 was accepted");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("TILEOPS_TEST_COMPILE_SHARD='32/32'") != std::string::npos);
    }
}
