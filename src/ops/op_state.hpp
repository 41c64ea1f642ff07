// Per-op state: the config chosen on a runtime and the resolved launch per vector width.
//
// The hot path (a cache hit) is resolved_launch(): one atomic load and a compare. Everything
// else (choosing a config, compiling or loading the kernel) happens once per op, runtime and
// vector width, under the op's own mutex, in RuntimeImpl::resolve().
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "runtime/device.hpp"
#include "tileops/op.hpp"
#include "tileops/runtime.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::detail {

struct ResolvedLaunch {
    CUfunction function = nullptr;
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned cluster = 1;
    unsigned shared_bytes = 0;
    // The launch's scratch memory (OpModel::workspace_bytes), or null. Owned here so that it lives
    // as long as the resolved launch. Launches of one op on one runtime share it, so runs of the
    // same op object on different streams must not overlap (as with a cuBLAS handle's workspace).
    std::shared_ptr<runtime::DeviceBuffer> workspace;
    void* workspace_data() const noexcept { return workspace ? workspace->data() : nullptr; }
    unsigned kind = 0;  // LaunchPlan::kind
    // LaunchPlan's follow-up kernel, or null.
    CUfunction follow_up = nullptr;
    unsigned follow_up_grid[3] = {1, 1, 1};
    unsigned follow_up_block[3] = {1, 1, 1};
};

// Vector widths 1, 2, 4, 8, 16 elements map to slots 0..4.
inline constexpr int kVectorSlots = 5;
inline int vector_slot(int vec) noexcept { return vec <= 1 ? 0 : vec == 2 ? 1 : vec == 4 ? 2 : vec == 8 ? 3 : 4; }

struct KernelSlot {
    std::atomic<uint64_t> runtime_id{0};  // the runtime `launch` was resolved on; 0: none yet
    ResolvedLaunch launch;
};

struct OpState {
    std::mutex mutex;  // taken only on the slow path
    std::array<KernelSlot, kVectorSlots> slots;
    uint64_t config_runtime_id = 0;  // the runtime `choice` was made on
    tuning::ConfigChoice choice;
};

// Launches on `stream`: cuLaunchKernel, or cuLaunchKernelEx when the kernel runs in clusters; then
// the follow-up kernel, if any, with the same arguments.
// Throws DriverError (naming the op) when the launch is refused.
void launch(const ResolvedLaunch& launch, void** args, CUstream stream, const Op& op);

}  // namespace tileops::detail
