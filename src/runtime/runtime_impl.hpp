// The implementation behind tileops::Runtime.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/op_model.hpp"
#include "cuda/device.hpp"
#include "jit/disk_cache.hpp"
#include "jit/in_flight.hpp"
#include "jit/kernel_builder.hpp"
#include "runtime/op_state.hpp"
#include "tileops/runtime.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::detail {

// A kernel loaded into this runtime's context.
struct LoadedKernel {
    cuda::Module module;
    CUfunction function = nullptr;
};

class RuntimeImpl {
public:
    explicit RuntimeImpl(const RuntimeOptions& options);
    ~RuntimeImpl();
    RuntimeImpl(const RuntimeImpl&) = delete;
    RuntimeImpl& operator=(const RuntimeImpl&) = delete;

    // Whether the runtime with this id still exists (ops reuse the entries of those that do not).
    static bool is_live(uint64_t id);

    uint64_t id() const noexcept { return id_; }
    const DeviceInfo& device() const noexcept { return device_; }
    jit::KernelBuilder& builder() noexcept { return builder_; }
    tuning::ConfigResolver& resolver() noexcept { return resolver_; }
    RuntimeStats stats() const;

    void make_current() const { context_.make_current(); }

    // The hot path: the launch resolved for (op, vec) on this runtime, or the slow path.
    const ResolvedLaunch& resolved_launch(const Op& op, int vec) {
        if (const ResolvedLaunch* launch = op.state().find_launch(id_, vector_slot(vec))) return *launch;
        return resolve(op, vec);
    }

    // The config `op` runs with here (chosen once per op and runtime).
    const tuning::ConfigChoice& choice(const Op& op);
    // Loads (compiling if needed) the kernel of `plan` into this context; shared by all ops.
    const LoadedKernel& kernel(const LaunchPlan& plan);
    // Loads the kernels of `config` at every width in `widths` at once, compiling on all cores
    // (NVRTC compiles in parallel), so that resolving each width afterwards finds them loaded.
    void load_kernels(const OpModel& model, const Config& config, const std::vector<int>& widths);
    // Resolves a config's launch for `model` without an Op (autotuner).
    ResolvedLaunch resolve_config(const OpModel& model, const Config& config, int vec);
    unsigned resident_grid(const OpModel& model, const ResolvedLaunch& launch);

private:
    // The launch plan of `config` at vector width `vec` (at most the config's own "vec").
    LaunchPlan plan(const OpModel& model, const Config& config, int vec) const;
    const ResolvedLaunch& resolve(const Op& op, int vec);
    const tuning::ConfigChoice& choice_locked(const Op& op, RuntimeEntry& entry);

    uint64_t id_;
    DeviceInfo device_;
    cuda::PrimaryContext context_;
    std::shared_ptr<const jit::Bundle> bundle_;  // RuntimeOptions::bundle, or null
    jit::KernelBuilder builder_;
    tuning::ConfigResolver resolver_;

    std::mutex kernels_mutex_;  // guards kernels_ (find/insert only; never held while compiling)
    std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> kernels_;
    jit::InFlight<std::string, const LoadedKernel*> loading_;
    std::atomic<uint64_t> memory_hits_{0};
};

}  // namespace tileops::detail
