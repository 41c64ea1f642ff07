#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "util/json_keys.hpp"

// The repeated keys of a scan.
static std::vector<tileops::util::RepeatedKey> repeated_keys(const std::string& text) {
    return tileops::util::scan_json(text).repeated;
}

TEST_CASE("scan_json finds each object's first repeated key and where the object is", "[util]") {
    CHECK(repeated_keys(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"b": 4}]})").empty());

    const auto top = repeated_keys(R"({"entries": [], "meta": 1, "entries": [1]})");
    REQUIRE(top.size() == 1);
    CHECK(top[0].key == "entries");
    CHECK(top[0].where.empty());

    // In a list of objects: the index of the object; nested deeper: each parent's key or index.
    const auto nested = repeated_keys(
        R"({"entries": [{"op": "a"}, 7, [1, 2], {"op": "b", "config": {"x": 1, "x": 2, "x": 3}, "op": "c"}]})");
    REQUIRE(nested.size() == 2);
    CHECK(nested[0].key == "x");
    CHECK(nested[0].where == std::vector<std::string>{"entries", "3", "config"});
    CHECK(nested[1].key == "op");
    CHECK(nested[1].where == std::vector<std::string>{"entries", "3"});

    // A top-level list; a long key is cut.
    const std::string long_key(200, 'k');
    const auto listed = repeated_keys("[[{}], {\"" + long_key + "\": 1, \"" + long_key + "\": 2}]");
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].key == long_key.substr(0, 64));
    CHECK(listed[0].where == std::vector<std::string>{"1"});
}

TEST_CASE("scan_json walks deep nesting without recursion", "[util]") {
    const std::string deep = std::string(100000, '[') + "{\"a\": 1, \"a\": 2}" + std::string(100000, ']');
    const auto found = repeated_keys(deep);
    REQUIRE(found.size() == 1);
    CHECK(found[0].where.size() == 100000);
    CHECK(found[0].where.back() == "0");
}

TEST_CASE("scan_json counts every value without building them, up to where the JSON breaks", "[util]") {
    const auto json_value_count = [](const std::string& text) { return tileops::util::scan_json(text).values; };
    CHECK(json_value_count(R"({"a": [1, 2.5, {"b": null}], "c": "x", "d": true})") == 8);
    CHECK(json_value_count("[1, 2, x") == 3);
    CHECK(json_value_count("") == 0);
    CHECK(json_value_count(std::string(100000, '[') + std::string(100000, ']')) == 100000);
}

TEST_CASE("first_control_character finds escapes, line breaks, NUL and DEL, not printable text", "[util]") {
    using tileops::util::first_control_character;
    CHECK(first_control_character("sm_90a rmsnorm 8192x4096 \xc3\xa9") == -1);
    CHECK(first_control_character("a\x1b[2J") == 0x1b);
    CHECK(first_control_character(std::string("a\0b", 3)) == 0);
    CHECK(first_control_character("x\r\n") == '\r');
    CHECK(first_control_character("\x7f") == 0x7f);
}
