#include "tileops/device_info.hpp"

#include <cctype>

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops {

std::string DeviceInfo::arch() const {
    if (cc_major == 9 && cc_minor == 0) return "sm_90a";
    return fmt::format("sm_{}{}", cc_major, cc_minor);
}

DeviceInfo DeviceInfo::for_arch(const std::string& arch) {
    // "sm_90a" -> 9.0, "sm_86" -> 8.6, "sm_120" -> 12.0
    if (arch.rfind("sm_", 0) != 0 || arch.size() < 5)
        throw InvalidArgument(fmt::format("tileops: '{}' is not an arch name like sm_80 or sm_90a", arch));
    std::string digits;
    for (size_t i = 3; i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])); ++i) digits += arch[i];
    if (digits.size() < 2) throw InvalidArgument(fmt::format("tileops: '{}' is not an arch name like sm_80 or sm_90a", arch));
    DeviceInfo info;
    info.name = "any " + arch;
    info.cc_major = std::stoi(digits.substr(0, digits.size() - 1));
    info.cc_minor = digits.back() - '0';
    const int sm = info.sm();
    // Opt-in shared memory per block and SM counts of the arch's common parts.
    if (sm >= 90) {
        info.max_shared_memory_per_block_optin = 227 * 1024;
        info.sm_count = 132;
        info.l2_bytes = 50 << 20;
    } else if (sm == 80 || sm == 87) {
        info.max_shared_memory_per_block_optin = 163 * 1024;
        info.sm_count = 108;
        info.l2_bytes = 40 << 20;
    } else {
        info.max_shared_memory_per_block_optin = 99 * 1024;
        info.sm_count = 84;
        info.l2_bytes = 6 << 20;
    }
    return info;
}

}  // namespace tileops
