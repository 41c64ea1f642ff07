#include "util/log.hpp"

#include <memory>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "util/file_util.hpp"

namespace tileops::util {
namespace {

constexpr const char* kLoggerName = "tileops";

std::shared_ptr<spdlog::logger> make_logger() {
    std::shared_ptr<spdlog::logger> logger = spdlog::get(kLoggerName);  // the application's, if it made one
    if (!logger) {
        logger = std::make_shared<spdlog::logger>(kLoggerName, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
        logger->set_level(spdlog::level::warn);
        try {
            spdlog::register_logger(logger);
        } catch (const spdlog::spdlog_ex&) {
            // Registered by the application meanwhile: use that one.
            if (auto registered = spdlog::get(kLoggerName)) logger = std::move(registered);
        }
    }
    if (auto level = util::env("TILEOPS_LOG_LEVEL")) {
        // from_str maps an unknown name to "off", which would also silence the library's warnings.
        const spdlog::level::level_enum parsed = spdlog::level::from_str(*level);
        const bool known = parsed != spdlog::level::off || *level == "off";
        logger->set_level(known ? parsed : spdlog::level::warn);
        if (!known)
            logger->warn("tileops: TILEOPS_LOG_LEVEL={} is not trace, debug, info, warn, error, critical or off; using warn",
                         *level);
    }
    return logger;
}

}  // namespace

spdlog::logger& logger() {
    static const std::shared_ptr<spdlog::logger> instance = make_logger();
    return *instance;
}

void configure_logging() { (void)logger(); }

}  // namespace tileops::util
