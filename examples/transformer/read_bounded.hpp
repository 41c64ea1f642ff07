// Reading a small file the user named (a model config), refusing what is not a regular file of
// bounded size: a FIFO would block, /dev/zero would never end.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace transformer {

// The file's bytes; throws std::invalid_argument naming `path` and `what` it was meant to be.
std::string read_bounded(const std::string& path, size_t max_bytes, const char* what);

// `text` parsed as JSON; otherwise `refuse` (which throws) is called with why not: "not valid
// JSON: ..." (a NUL byte included, where the parser would stop as at the end of the input).
template <class Refuse>
nlohmann::json parse_json_text(const std::string& text, Refuse&& refuse) {
    if (text.find('\0') != std::string::npos) refuse(std::string("not valid JSON: a NUL byte"));
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        refuse(std::string("not valid JSON: ") + e.what());
    }
    return {};  // not reached: refuse throws
}

}  // namespace transformer
