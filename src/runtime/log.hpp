// Logging: spdlog with the level from TILEOPS_LOG_LEVEL (trace, debug, info, warn, error, off).
#pragma once

namespace tileops::runtime {

// Applies TILEOPS_LOG_LEVEL once per process (default: warn, so a library stays quiet).
void configure_logging();

}  // namespace tileops::runtime
