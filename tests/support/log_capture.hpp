// Captures the library's log (its "tileops" spdlog logger) in a string, so tests can check what
// was reported and deliberately bad input does not fill the terminal.
#pragma once

#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/common.h>
#include <spdlog/sinks/sink.h>

namespace tileops::test {

// For the object's lifetime the library's messages at `level` and up go only into a string, one
// "<level> <message>" line each (levels as spdlog names them: "debug", "warning", ...); the
// logger's own sinks and level come back on destruction.
class LogCapture {
public:
    explicit LogCapture(spdlog::level::level_enum level = spdlog::level::debug);
    ~LogCapture();
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;

    std::string text() const { return stream_.str(); }
    // Occurrences of `needle` in the whole text.
    size_t count(std::string_view needle) const;
    // Lines holding every one of `parts`.
    size_t lines_with(const std::vector<std::string>& parts) const;

private:
    std::ostringstream stream_;
    std::vector<spdlog::sink_ptr> previous_sinks_;
    spdlog::level::level_enum previous_level_;
};

}  // namespace tileops::test
