#include "runtime/log.hpp"

#include <mutex>

#include <spdlog/spdlog.h>

#include "util/file_util.hpp"

namespace tileops::runtime {

void configure_logging() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto level = util::env("TILEOPS_LOG_LEVEL");
        // from_str maps an unknown name to "off", which would also silence the library's warnings.
        const spdlog::level::level_enum parsed = level ? spdlog::level::from_str(*level) : spdlog::level::warn;
        const bool known = !level || parsed != spdlog::level::off || *level == "off";
        spdlog::set_level(known ? parsed : spdlog::level::warn);
        if (!known)
            spdlog::warn("tileops: TILEOPS_LOG_LEVEL={} is not trace, debug, info, warn, error, critical or off; using warn",
                         *level);
    });
}

}  // namespace tileops::runtime
