// The implementation behind tileops::Runtime.
#pragma once

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/op_model.hpp"
#include "cuda/device.hpp"
#include "jit/disk_cache.hpp"
#include "jit/in_flight.hpp"
#include "jit/kernel_builder.hpp"
#include "runtime/op_state.hpp"
#include "tileops/runtime.hpp"
#include "tuning/config_choice.hpp"

namespace tileops::detail {

// The plan of one of a launch's side kernels (its template file and options are the launch's own).
LaunchPlan side_plan(const LaunchPlan& plan, const SideKernel& side);

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

    // The hot path: the launch resolved for (op, vec) on this runtime, or the slow path. `stream`
    // is the one the launch goes to (a capturing stream never gets a stand-in).
    const ResolvedLaunch& resolved_launch(const Op& op, int vec, CUstream stream = nullptr) {
        if (const ResolvedLaunch* launch = op.state().find_launch(id_, vector_slot(vec))) return *launch;
        return resolve(op, vec, stream);
    }

    // The config `op` runs with here (chosen once per op and runtime).
    const tuning::ConfigChoice& choice(const Op& op);
    // Loads (compiling if needed) the kernel of `plan` into this context; shared by all ops.
    const LoadedKernel& kernel(const LaunchPlan& plan);
    // The launch plans of `config` at every width in `widths`, side kernels included (widths the
    // config cannot serve are left out: resolving them reports why).
    std::vector<LaunchPlan> plans(const OpModel& model, const Config& config, const std::vector<int>& widths) const;
    // Loads the kernels of `plans` at once, compiling on all cores (NVRTC compiles in parallel),
    // so that resolving their launches afterwards finds them loaded.
    void load_kernels(const std::vector<LaunchPlan>& plans);
    // Resolves a config's launch for `model` without an Op (autotuner).
    ResolvedLaunch resolve_config(const OpModel& model, const Config& config, int vec);
    unsigned resident_grid(const OpModel& model, const ResolvedLaunch& launch);
    // What explain() adds for an op whose chosen kernel still compiles in the background.
    std::string background_note(const Op& op);

private:
    // The launch plan of `config` at vector width `vec` (at most the config's own "vec").
    // Throws Unsupported where no kernel of the op runs on this device (OpModel::unsupported_reason).
    void check_supported(const OpModel& model) const;
    LaunchPlan plan(const OpModel& model, const Config& config, int vec) const;
    const ResolvedLaunch& resolve(const Op& op, int vec, CUstream stream);
    const tuning::ConfigChoice& choice_locked(const Op& op, RuntimeEntry& entry);

    // Background compiling (RuntimeOptions::background_compile), in runtime_background.cpp.
    // The launch to run while `config`'s kernels compile, or null when the chosen launch should be
    // resolved now: its kernels are at hand (or its compile ended), or no stand-in is.
    const ResolvedLaunch* standin_launch(const OpModel& model, const Config& config, int vec, KernelSlot& slot);
    // A config other than `config`, valid for `model`, whose kernels at width `vec` are at hand,
    // else the model's quick_config (compiled by the caller).
    std::optional<Config> standin_config(const OpModel& model, const Config& config, int vec);
    // Whether every kernel of `plan` is loaded or, with `look_on_disk`, loads without compiling
    // (from the disk cache or the bundle: it is loaded then).
    bool plan_at_hand(const LaunchPlan& plan, bool look_on_disk = true);
    std::shared_future<void> compile_in_background(const LaunchPlan& plan);
    // Records that `config` ran for an op of `model`'s kind: a stand-in candidate for the next.
    void remember_ran(const OpModel& model, const Config& config);

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

    bool background_compile_;
    std::mutex background_mutex_;  // guards the two members below
    std::vector<std::shared_future<void>> background_jobs_;  // waited for before the builder goes
    std::map<std::string, std::deque<Config>> ran_configs_;  // op kind -> configs that ran, newest first
    std::atomic<uint64_t> background_compiles_{0};
    std::atomic<uint64_t> standin_runs_{0};
};

}  // namespace tileops::detail
