#include "support/log_capture.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include "util/log.hpp"

namespace tileops::test {

LogCapture::LogCapture(spdlog::level::level_enum level) {
    spdlog::logger& logger = util::logger();
    previous_sinks_ = logger.sinks();
    previous_level_ = logger.level();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    sink->set_pattern("%l %v");
    logger.sinks() = {std::move(sink)};
    logger.set_level(level);
}

LogCapture::~LogCapture() {
    spdlog::logger& logger = util::logger();
    logger.sinks() = previous_sinks_;
    logger.set_level(previous_level_);
}

size_t LogCapture::count(std::string_view needle) const {
    const std::string all = text();
    size_t n = 0;
    for (size_t at = all.find(needle); at != std::string::npos; at = all.find(needle, at + 1)) ++n;
    return n;
}

size_t LogCapture::lines_with(const std::vector<std::string>& parts) const {
    std::istringstream lines(text());
    size_t n = 0;
    for (std::string line; std::getline(lines, line);) {
        bool all = true;
        for (const std::string& part : parts) all = all && line.find(part) != std::string::npos;
        n += all ? 1 : 0;
    }
    return n;
}

}  // namespace tileops::test
