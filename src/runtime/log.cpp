#include "runtime/log.hpp"

#include <mutex>

#include <spdlog/spdlog.h>

#include "util/file_util.hpp"

namespace tileops::runtime {

void configure_logging() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto level = util::env("TILEOPS_LOG_LEVEL");
        spdlog::set_level(level ? spdlog::level::from_str(*level) : spdlog::level::warn);
    });
}

}  // namespace tileops::runtime
