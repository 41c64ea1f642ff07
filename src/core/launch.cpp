#include "core/launch.hpp"

#include <fmt/format.h>

#include "cuda/driver.hpp"

namespace tileops::detail {

ClusterLaunchConfig::ClusterLaunchConfig(const ResolvedLaunch& launch, CUstream stream) {
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = launch.cluster;
    attribute.value.clusterDim.y = 1;
    attribute.value.clusterDim.z = 1;
    config.gridDimX = launch.grid[0];
    config.gridDimY = launch.grid[1];
    config.gridDimZ = launch.grid[2];
    config.blockDimX = launch.block[0];
    config.blockDimY = launch.block[1];
    config.blockDimZ = launch.block[2];
    config.sharedMemBytes = launch.shared_bytes;
    config.hStream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
}

namespace {

CUresult launch_side(const ResolvedLaunch::Side& side, void** args, CUstream stream) {
    if (side.function == nullptr) return CUDA_SUCCESS;
    return cuda::driver().cuLaunchKernel(side.function, side.grid[0], side.grid[1], side.grid[2], side.block[0],
                                         side.block[1], side.block[2], 0, stream, args, nullptr);
}

}  // namespace

void launch(const ResolvedLaunch& launch, void** args, CUstream stream, const OpModel& op) {
    const cuda::DriverApi& cu = cuda::driver();
    CUresult status = launch_side(launch.before, args, stream);
    if (status == CUDA_SUCCESS) {
        if (launch.cluster <= 1) {
            status = cu.cuLaunchKernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
                                       launch.block[1], launch.block[2], launch.shared_bytes, stream, args, nullptr);
        } else {
            ClusterLaunchConfig cluster(launch, stream);
            status = cu.cuLaunchKernelEx(&cluster.config, launch.function, args, nullptr);
        }
    }
    if (status == CUDA_SUCCESS) status = launch_side(launch.after, args, stream);
    if (status != CUDA_SUCCESS)
        cuda::throw_driver_error(status, fmt::format("launching {}", op.describe()).c_str(), __FILE__, __LINE__);
}

}  // namespace tileops::detail
