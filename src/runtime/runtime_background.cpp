// Background compiling (RuntimeOptions::background_compile): a run whose chosen kernel is not
// compiled yet takes a stand-in config of the same op kind whose kernels are at hand (else one
// that compiles much faster, OpModel::quick_config, compiled there and then), while a
// background thread compiles the chosen kernel into the disk cache; the first run after that
// compile loads the chosen kernel (a disk hit) and publishes it for the hot path. Stand-ins are
// correct by construction: every valid config of an op computes the same result (the tuner checks
// each one against the heuristic's output); they differ in speed only.

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "runtime/runtime_impl.hpp"
#include "tuning/op_config.hpp"
#include "util/log.hpp"

namespace tileops::detail {
namespace {

// Ops whose kernels may serve one another: the same op on the same dtypes (a config's plan for
// this op decides the rest, and the plan's kernels must be at hand).
std::string op_kind(const OpModel& model) { return model.op_name() + '|' + model.dtype_key(); }

// The configs an op kind remembers as stand-in candidates.
constexpr size_t kRememberedConfigs = 8;

bool finished(const std::shared_future<void>& job) {
    return job.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

}  // namespace

const ResolvedLaunch* RuntimeImpl::standin_launch(const OpModel& model, const Config& config, int vec, KernelSlot& slot) {
    try {
        const LaunchPlan chosen = plan(model, config, vec);
        // The compile ended (a failure shows when the caller compiles in the foreground), or
        // prepare() or another op loaded the kernels meanwhile: resolve the chosen launch.
        if (slot.pending.valid()) return finished(slot.pending) || plan_at_hand(chosen, false) ? nullptr : &slot.standin;
        if (!builder_.allow_compile() || plan_at_hand(chosen)) return nullptr;
        const std::optional<Config> other = standin_config(model, config, vec);
        if (!other) return nullptr;
        // Started first: a quick stand-in compiles meanwhile, on another core.
        std::shared_future<void> job = compile_in_background(chosen);
        slot.standin = resolve_config(model, *other, vec);
        slot.pending = std::move(job);
        util::logger().debug("tileops: {}: compiling {{{}}} in the background, {{{}}} runs meanwhile", model.describe(),
                             tuning::config_text(config), tuning::config_text(*other));
        return &slot.standin;
    } catch (const std::exception& e) {
        // Whatever went wrong shows again, with its context, when the caller resolves the chosen
        // config in the foreground.
        util::logger().debug("tileops: {}: no stand-in ({})", model.describe(), e.what());
        return nullptr;
    }
}

std::optional<Config> RuntimeImpl::standin_config(const OpModel& model, const Config& config, int vec) {
    std::vector<Config> candidates = {model.heuristic(device_)};
    {
        std::lock_guard lock(background_mutex_);
        if (auto it = ran_configs_.find(op_kind(model)); it != ran_configs_.end())
            candidates.insert(candidates.end(), it->second.begin(), it->second.end());
    }
    for (const Config& candidate : candidates) {
        if (candidate == config || model.invalid_reason(candidate, device_)) continue;
        try {
            if (plan_at_hand(plan(model, candidate, vec))) return candidate;
        } catch (const std::exception&) {
            // Not plannable at this width: the next candidate.
        }
    }
    // None at hand: one that compiles much faster than the chosen config (then the only wait);
    // quick_config gives only valid configs.
    std::optional<Config> quick = model.quick_config(config, device_);
    if (quick && *quick == config) quick.reset();
    return quick;
}

bool RuntimeImpl::plan_at_hand(const LaunchPlan& plan, bool look_on_disk) {
    std::vector<LaunchPlan> plans = {plan};
    for (const SideKernel* side : {&plan.before, &plan.after})
        if (*side) plans.push_back(side_plan(plan, *side));
    for (const LaunchPlan& p : plans) {
        {
            std::lock_guard lock(kernels_mutex_);
            if (kernels_.count(p.template_file + '|' + p.name_expression)) continue;
        }
        if (!look_on_disk || !builder_.find(p.template_file, p.name_expression, device_.arch())) return false;
        (void)kernel(p);  // a disk or bundle hit: loads it without compiling
    }
    return true;
}

std::shared_future<void> RuntimeImpl::compile_in_background(const LaunchPlan& plan) {
    std::vector<std::pair<std::string, std::string>> kernels = {{plan.template_file, plan.name_expression}};
    for (const SideKernel* side : {&plan.before, &plan.after})
        if (*side) kernels.emplace_back(plan.template_file, side->name_expression);
    // Into the disk cache only: loading into the context happens on a run, on the caller's thread.
    std::shared_future<void> job = std::async(std::launch::async, [this, kernels] {
                                       for (const auto& [file, name] : kernels) builder_.get(file, name, device_.arch());
                                   }).share();
    background_compiles_.fetch_add(1);
    std::lock_guard lock(background_mutex_);
    background_jobs_.erase(std::remove_if(background_jobs_.begin(), background_jobs_.end(), finished),
                           background_jobs_.end());
    background_jobs_.push_back(job);
    return job;
}

void RuntimeImpl::remember_ran(const OpModel& model, const Config& config) {
    std::lock_guard lock(background_mutex_);
    std::deque<Config>& configs = ran_configs_[op_kind(model)];
    configs.erase(std::remove(configs.begin(), configs.end(), config), configs.end());
    configs.push_front(config);
    if (configs.size() > kRememberedConfigs) configs.pop_back();
}

std::string RuntimeImpl::background_note(const Op& op) {
    OpState& state = op.state();
    std::lock_guard lock(state.mutex);
    RuntimeEntry& entry = state.entry_locked(id_, &RuntimeImpl::is_live);
    for (const KernelSlot& slot : entry.slots)
        if (!slot.ready.load(std::memory_order_acquire) && slot.pending.valid())
            return fmt::format("; its kernel compiles in the background{}",
                               finished(slot.pending) ? " (done: the next run takes it)" : ", a stand-in config runs meanwhile");
    return "";
}

}  // namespace detail
