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
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "tileops/op.hpp"
#include "tileops/runtime.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::detail {

// Launch widths (core/op_model.hpp): vector widths 1, 2, 4, 8, 16 elements map to slots 0..4, the
// ragged ones at 1, 2, 4, 8, 16 elements (the GEMM's ragged_width(1): packed A and B, D stored
// from registers) to slots 5..9.
inline constexpr int kVectorSlots = 10;
inline int vector_slot(int width) noexcept {
    const int vec = width_vector(width);
    const int slot = vec <= 1 ? 0 : vec == 2 ? 1 : vec == 4 ? 2 : vec == 8 ? 3 : 4;
    return is_ragged_width(width) ? 5 + slot : slot;
}

struct KernelSlot {
    std::atomic<bool> ready{false};  // `launch` is resolved; published with release
    ResolvedLaunch launch;
    // RuntimeOptions::background_compile, under OpState::mutex: the chosen kernel's compile in
    // flight, and the stand-in that runs meanwhile (kept after, for launches still using it).
    std::shared_future<void> pending;
    ResolvedLaunch standin;
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

}  // namespace tileops::detail
