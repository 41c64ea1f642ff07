// Logging: the library's own spdlog logger, "tileops", with the level from TILEOPS_LOG_LEVEL
// (trace, debug, info, warn, error, critical, off; default warn, so a library stays quiet).
//
// The library never touches spdlog's default logger or global level, so an application that logs
// through spdlog itself keeps its own settings. To send the library's messages elsewhere, register
// a logger named "tileops" (spdlog::register_logger) before the first call into the library; it then
// logs through it, and TILEOPS_LOG_LEVEL, when set, sets its level.
#pragma once

#include <spdlog/logger.h>

namespace tileops::util {

// The logger every part of the library logs through (created, or found, on first use).
spdlog::logger& logger();

// Applies TILEOPS_LOG_LEVEL now (the first logger() call does it anyway), so that a bad value is
// reported when the first Runtime is made rather than at the first message.
void configure_logging();

}  // namespace tileops::util
