#include "core/launch.hpp"

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "cuda/driver.hpp"

namespace tileops::detail {

LaunchConfig::LaunchConfig(const ResolvedLaunch& launch, CUstream stream, bool programmatic) {
    unsigned count = 0;
    if (launch.cluster > 1) {
        CUlaunchAttribute& cluster = attributes[count++];
        cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        cluster.value.clusterDim.x = launch.cluster;
        cluster.value.clusterDim.y = 1;
        cluster.value.clusterDim.z = 1;
    }
    if (programmatic) {
        CUlaunchAttribute& serialization = attributes[count++];
        serialization.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        serialization.value.programmaticStreamSerializationAllowed = 1;
    }
    config.gridDimX = launch.grid[0];
    config.gridDimY = launch.grid[1];
    config.gridDimZ = launch.grid[2];
    config.blockDimX = launch.block[0];
    config.blockDimY = launch.block[1];
    config.blockDimZ = launch.block[2];
    config.sharedMemBytes = launch.shared_bytes;
    config.hStream = stream;
    config.attrs = attributes;
    config.numAttrs = count;
}

bool programmatic_launch(int cc_major) {
    static const bool disabled = [] {
        const char* value = std::getenv("TILEOPS_NO_PDL");
        return value != nullptr && std::string_view(value) == "1";
    }();
    return cc_major >= 9 && !disabled;
}

void launch(const ResolvedLaunch& launch, void** args, CUstream stream, const OpModel& op) {
    const cuda::DriverApi& cu = cuda::driver();
    CUresult status;
    if (launch.cluster <= 1 && !launch.programmatic) {
        status = cu.cuLaunchKernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
                                   launch.block[1], launch.block[2], launch.shared_bytes, stream, args, nullptr);
    } else {
        LaunchConfig config(launch, stream, launch.programmatic);
        status = cu.cuLaunchKernelEx(&config.config, launch.function, args, nullptr);
    }
    if (status == CUDA_SUCCESS && launch.follow_up != nullptr) {
        ResolvedLaunch follow_up;
        for (int i = 0; i < 3; ++i) {
            follow_up.grid[i] = launch.follow_up_grid[i];
            follow_up.block[i] = launch.follow_up_block[i];
        }
        LaunchConfig config(follow_up, stream, launch.programmatic);
        status = cu.cuLaunchKernelEx(&config.config, launch.follow_up, args, nullptr);
    }
    if (status != CUDA_SUCCESS)
        cuda::throw_driver_error(status, fmt::format("launching {}", op.describe()).c_str(), __FILE__, __LINE__);
}

}  // namespace tileops::detail
