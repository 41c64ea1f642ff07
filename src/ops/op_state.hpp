// Per-op state: for each runtime the op runs on, the config chosen there and the resolved launch
// per vector width.
//
// The hot path (a cache hit) is OpState::find_launch(): an atomic load and a compare per runtime
// entry, the first entry for a process with one runtime. Everything else (claiming an entry,
// choosing a config, compiling or loading the kernel) happens once per op, runtime and vector
// width, under the op's own mutex, in RuntimeImpl::resolve(). A published entry is never rewritten
// while its runtime exists, so a launch read on the hot path cannot change under the reader.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/device.hpp"
#include "tileops/op.hpp"
#include "tileops/runtime.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::detail {

// Scratch memory of a resolved launch. It keeps its device's primary context retained, so that the
// memory stays valid, and is freed where it was allocated, when the op outlives its Runtime.
struct Workspace {
    Workspace(int device_ordinal, size_t bytes) : context(device_ordinal), buffer(bytes) {}
    runtime::PrimaryContext context;  // declared first: released after the buffer is freed
    runtime::DeviceBuffer buffer;
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
    std::atomic<bool> ready{false};  // `launch` is resolved; published with release
    ResolvedLaunch launch;
};

// How many runtimes one op object serves at a time (one per GPU of an 8-GPU node). The entry of a
// runtime that no longer exists is reused.
inline constexpr int kMaxRuntimesPerOp = 8;

// One runtime's view of an op.
struct RuntimeEntry {
    // The runtime (RuntimeImpl::id) this entry belongs to; 0: free. Set under OpState::mutex, with
    // release, after the slots are reset; entries are claimed in order and never freed again.
    std::atomic<uint64_t> runtime_id{0};
    std::array<KernelSlot, kVectorSlots> slots;
    std::optional<tuning::ConfigChoice> choice;  // chosen on the first run or explain
};

struct OpState {
    std::mutex mutex;  // taken only on the slow path
    std::array<RuntimeEntry, kMaxRuntimesPerOp> runtimes;

    // The hot path, without a lock: the launch resolved for vector slot `slot` on runtime `id`,
    // or null when there is none yet.
    const ResolvedLaunch* find_launch(uint64_t id, int slot) const noexcept {
        for (const RuntimeEntry& entry : runtimes) {
            const uint64_t owner = entry.runtime_id.load(std::memory_order_acquire);
            if (owner == id) {
                const KernelSlot& kernel = entry.slots[static_cast<size_t>(slot)];
                return kernel.ready.load(std::memory_order_acquire) ? &kernel.launch : nullptr;
            }
            if (owner == 0) return nullptr;  // claimed in order: no entry further on is in use
        }
        return nullptr;
    }

    // Under `mutex`: runtime `id`'s entry, claiming a free one, or else the entry of a runtime
    // that no longer exists (`is_live` false), when it has none. Throws Unsupported when every
    // entry belongs to a live runtime.
    RuntimeEntry& entry_locked(uint64_t id, bool (*is_live)(uint64_t));
};

// Launches on `stream`: cuLaunchKernel, or cuLaunchKernelEx when the kernel runs in clusters; then
// the follow-up kernel, if any, with the same arguments.
// Throws DriverError (naming the op) when the launch is refused.
void launch(const ResolvedLaunch& launch, void** args, CUstream stream, const Op& op);

}  // namespace tileops::detail
