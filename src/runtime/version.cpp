#include "tileops/version.hpp"

namespace tileops {

const char* version() noexcept { return TILEOPS_VERSION_STRING; }

}  // namespace tileops
