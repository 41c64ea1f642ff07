// What the runtime knows about a GPU.
#pragma once

#include <cstddef>
#include <string>

#include "tileops/export.hpp"

namespace tileops {

struct TILEOPS_EXPORT DeviceInfo {
    int ordinal = 0;
    std::string name;
    int cc_major = 0;
    int cc_minor = 0;
    int sm_count = 0;
    int max_threads_per_block = 1024;
    int max_shared_memory_per_block_optin = 0;  // bytes a block may use after opting in
    int l2_bytes = 0;
    size_t total_memory = 0;
    int driver_version = 0;

    // The NVRTC target: "sm_90a" on Hopper (wgmma and setmaxnreg need it), "sm_<major><minor>" elsewhere.
    std::string arch() const;
    int sm() const { return cc_major * 10 + cc_minor; }

    // Limits of a GPU of this arch without asking one (for compiling caches on a CPU-only machine):
    // the numbers are those of the arch's flagship (A100 for sm_80, H100 for sm_90a, ...).
    static DeviceInfo for_arch(const std::string& arch);
};

}  // namespace tileops
