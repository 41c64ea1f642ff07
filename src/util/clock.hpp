// Wall-clock helpers.
#pragma once

#include <string>

namespace tileops::util {

// Now in UTC, ISO 8601: "2026-11-22T12:44:27Z" (tuning entries and database metadata).
std::string utc_timestamp();

}  // namespace tileops::util
