#pragma once
// What a JSON text holds before it is parsed into a tree: how many values, and keys repeated
// within one object (JSON keeps only the last of them, so a file joined by hand, with two
// "entries" or "problems" lists, would silently lose the first: readers refuse it).

#include <string>
#include <string_view>
#include <vector>

namespace tileops::util {

struct RepeatedKey {
    std::string key;                 // cut to 64 characters
    std::vector<std::string> where;  // the object's place: its parents' keys and list indices
};

struct JsonScan {
    // Values (scalars, lists and objects). A parsed tree takes up to about 40 times the bytes of
    // a file of tiny values ("[1,1,1,..."), so readers refuse more than kMaxJsonValues before
    // parsing: a database of real entries (about 40 values in 1.6 KB each) reaches the file-size
    // bound first.
    size_t values = 0;
    std::vector<RepeatedKey> repeated;  // the first repeated key of each object that has one
};
inline constexpr size_t kMaxJsonValues = size_t{1} << 24;

// One SAX pass over `text`, up to where it stops being JSON (what was found so far stands), so
// readers scan before they parse and read the tree once. A SAX pass, not a parser callback:
// nlohmann::json 3.11's callback parser rescans the parent container at the end of every object,
// quadratic in the number of entries (20000 entries took 65 s in a Debug + ASan build against 3 s
// without it).
JsonScan scan_json(std::string_view text);

// The first control character of `text` (escape sequences start with one; a NUL cuts messages),
// or -1: strings from files must not drive the terminal they are printed on.
int first_control_character(std::string_view text);

}  // namespace tileops::util
