// A kernel launch resolved for one op on one runtime: the loaded function, its geometry and its
// scratch memory, and the one call that launches it.
#pragma once

#include <cuda.h>

#include <any>
#include <memory>

#include "core/op_model.hpp"
#include "cuda/device.hpp"

namespace tileops::detail {

// Scratch memory of a resolved launch. It keeps its device's primary context retained, so that the
// memory stays valid, and is freed where it was allocated, when the op outlives its Runtime.
struct Workspace {
    Workspace(int device_ordinal, size_t bytes) : context(device_ordinal), buffer(bytes) {}
    cuda::PrimaryContext context;  // declared first: released after the buffer is freed
    cuda::DeviceBuffer buffer;
};

struct ResolvedLaunch {
    CUfunction function = nullptr;
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned cluster = 1;
    unsigned shared_bytes = 0;
    // The launch's scratch memory (OpModel::workspace_bytes), or null. Owned here so that it lives
    // as long as the resolved launch. Launches of one op on one runtime share it, so runs of the
    // same op object on different streams must not overlap (as with a cuBLAS handle's workspace).
    std::shared_ptr<Workspace> workspace;
    void* workspace_data() const noexcept { return workspace ? workspace->buffer.data() : nullptr; }
    std::any details;  // LaunchPlan::details
    // LaunchPlan's side kernels, loaded; a null function: none.
    struct Side {
        CUfunction function = nullptr;
        unsigned grid[3] = {1, 1, 1};
        unsigned block[3] = {1, 1, 1};
    };
    Side before, after;
};

// The driver's description of a launch in clusters of launch.cluster CTAs along x (for
// cuLaunchKernelEx and cuOccupancyMaxActiveClusters). Not copyable: `config` points at `attribute`.
struct ClusterLaunchConfig {
    ClusterLaunchConfig(const ResolvedLaunch& launch, CUstream stream);
    ClusterLaunchConfig(const ClusterLaunchConfig&) = delete;
    ClusterLaunchConfig& operator=(const ClusterLaunchConfig&) = delete;
    CUlaunchAttribute attribute{};
    CUlaunchConfig config{};
};

// Launches on `stream`: the `before` kernel, if any; the kernel itself (cuLaunchKernel, or
// cuLaunchKernelEx when it runs in clusters); then the `after` kernel, if any; all with the same
// arguments.
// Throws DriverError (naming the op) when the launch is refused.
void launch(const ResolvedLaunch& launch, void** args, CUstream stream, const OpModel& op);

}  // namespace tileops::detail
