#pragma once
// Keys repeated within one JSON object. JSON keeps only the last of them, so a file joined by
// hand (two "entries" or "problems" lists) would silently lose the first: readers refuse it.

#include <string>
#include <string_view>
#include <vector>

namespace tileops::util {

struct RepeatedKey {
    std::string key;                 // cut to 64 characters
    std::vector<std::string> where;  // the object's place: its parents' keys and list indices
};

// The first repeated key of each object that has one, in document order, from a SAX pass over
// `text` (which json::parse accepted). A SAX pass, not a parser callback: nlohmann::json 3.11's
// callback parser rescans the parent container at the end of every object, quadratic in the
// number of entries (20000 entries took 65 s in a Debug + ASan build against 3 s without it).
std::vector<RepeatedKey> repeated_keys(std::string_view text);

// How many values (scalars, lists and objects) `text` holds, up to where it stops being JSON,
// counted without building them. A parsed tree takes up to about 40 times the bytes of a file of
// tiny values ("[1,1,1,..."), so readers refuse more than kMaxJsonValues before parsing: a
// database of real entries (about 40 values in 1.6 KB each) reaches the file-size bound first.
inline constexpr size_t kMaxJsonValues = size_t{1} << 24;
size_t json_value_count(std::string_view text);

}  // namespace tileops::util
