#include "tileops/runtime.hpp"

#include <algorithm>
#include <exception>
#include <limits>
#include <mutex>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cuda/driver.hpp"
#include "jit/compile_order.hpp"
#include "jit/compiler.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/error.hpp"
#include "tileops/op.hpp"
#include "tuning/op_config.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"

namespace tileops {
namespace detail {
namespace {

std::atomic<uint64_t> next_runtime_id{1};

// The ids of the runtimes that exist (a set for the slow paths only).
std::mutex live_runtimes_mutex;
std::unordered_set<uint64_t>& live_runtimes() {
    static std::unordered_set<uint64_t> ids;
    return ids;
}

std::filesystem::path cache_directory(const RuntimeOptions& options) {
    if (!options.cache_dir.empty()) return options.cache_dir;
    return jit::DiskCache::default_directory();
}

uint64_t cache_max_bytes(const RuntimeOptions& options) {
    // 0: TILEOPS_CACHE_MAX_MB, else the cache's default bound.
    if (options.cache_max_mb > (std::numeric_limits<uint64_t>::max() >> 20))
        throw InvalidArgument(fmt::format("tileops: RuntimeOptions::cache_max_mb = {} is larger than a byte count can hold",
                                          options.cache_max_mb));
    return options.cache_max_mb != 0 ? options.cache_max_mb << 20 : jit::DiskCache::default_max_bytes();
}

// RuntimeOptions::bundle, else TILEOPS_BUNDLE: opened (FileError when it is not a sound bundle:
// it was asked for by name), or null.
std::shared_ptr<const jit::Bundle> open_bundle(const RuntimeOptions& options, const DeviceInfo& device) {
    const std::optional<std::string> path = options.bundle.empty() ? util::env("TILEOPS_BUNDLE") : options.bundle;
    if (!path) return nullptr;
    auto bundle = std::make_shared<const jit::Bundle>(*path);
    const std::vector<std::string>& archs = bundle->archs();
    if (std::find(archs.begin(), archs.end(), device.arch()) == archs.end())
        util::logger().warn("tileops: bundle {} holds kernels for {}, not for this GPU's {}", *path,
                            fmt::format("{}", fmt::join(archs, ", ")), device.arch());
    return bundle;
}

tuning::ResolverOptions resolver_options(const RuntimeOptions& options, const DeviceInfo& device,
                                         const jit::Bundle* bundle) {
    tuning::ResolverOptions resolver;
    resolver.arch = device.arch();
    resolver.gpu_name = device.name;
    resolver.nvrtc_version = jit::nvrtc_version();
    resolver.user_dbs = options.tuning_dbs;
    if (bundle != nullptr)
        for (auto& [name, text] : bundle->databases())
            resolver.bundled_dbs.emplace_back(fmt::format("{}:{}", bundle->path().string(), name), std::move(text));
    return resolver;
}

// RuntimeOptions::background_compile, else TILEOPS_BACKGROUND_COMPILE (0 or 1).
bool background_compile(const RuntimeOptions& options) {
    return options.background_compile || util::env_switch("TILEOPS_BACKGROUND_COMPILE");
}


}  // namespace

LaunchPlan side_plan(const LaunchPlan& plan, const SideKernel& side) {
    LaunchPlan side_kernel = plan;
    side_kernel.name_expression = side.name_expression;
    side_kernel.before = side_kernel.after = SideKernel{};
    return side_kernel;
}

RuntimeImpl::RuntimeImpl(const RuntimeOptions& options)
    : id_(next_runtime_id.fetch_add(1)),
      device_(cuda::query_device(options.device)),
      context_(options.device),
      bundle_(open_bundle(options, device_)),
      builder_(cache_directory(options), cache_max_bytes(options),
               jit::jit_policy(cache_directory(options), options.allow_compile)),
      resolver_(resolver_options(options, device_, bundle_.get())),
      background_compile_(background_compile(options)) {
    if (bundle_ != nullptr) builder_.serve_from(bundle_);
    jit::check_arch_supported(device_.arch());
    // Like the CUDA runtime, a new runtime makes its device's primary context current on the
    // constructing thread; run() makes it current on any other thread that uses it.
    make_current();
    {
        std::lock_guard lock(live_runtimes_mutex);
        live_runtimes().insert(id_);
    }
    util::logger().debug("tileops: runtime on device {} ({}, {}, {} SMs), kernel cache {}", device_.ordinal, device_.name,
                            device_.arch(), device_.sm_count, builder_.cache().directory().string());
}

RuntimeStats RuntimeImpl::stats() const {
    RuntimeStats stats;
    stats.kernels_compiled = builder_.compiled_count();
    stats.disk_cache_hits = builder_.disk_hit_count();
    stats.bundle_hits = builder_.bundle_hit_count();
    stats.memory_cache_hits = memory_hits_.load();
    stats.background_compiles = background_compiles_.load();
    stats.standin_runs = standin_runs_.load();
    return stats;
}

const LoadedKernel& RuntimeImpl::kernel(const LaunchPlan& plan) {
    const std::string key = plan.template_file + '|' + plan.name_expression;
    {
        std::lock_guard lock(kernels_mutex_);
        auto it = kernels_.find(key);
        if (it != kernels_.end()) {
            memory_hits_.fetch_add(1);
            return *it->second;
        }
    }
    const LoadedKernel* loaded = loading_.get_or_compute(key, [&]() -> const LoadedKernel* {
        {
            // Another thread may have finished loading it since we looked.
            std::lock_guard lock(kernels_mutex_);
            if (auto it = kernels_.find(key); it != kernels_.end()) return it->second.get();
        }
        jit::KernelBinary binary = builder_.get(plan.template_file, plan.name_expression, device_.arch());
        make_current();
        auto kernel = std::make_unique<LoadedKernel>();
        kernel->module = cuda::Module(binary.cubin);
        kernel->function = kernel->module.function(binary.lowered_name);
        std::lock_guard lock(kernels_mutex_);
        auto [it, inserted] = kernels_.emplace(key, std::move(kernel));
        return it->second.get();
    });
    return *loaded;
}

RuntimeImpl::~RuntimeImpl() {
    {
        std::lock_guard lock(live_runtimes_mutex);
        live_runtimes().erase(id_);
    }
    // Background compiles use the builder: they end before it goes.
    std::lock_guard lock(background_mutex_);
    for (const std::shared_future<void>& job : background_jobs_) job.wait();
}

bool RuntimeImpl::is_live(uint64_t id) {
    std::lock_guard lock(live_runtimes_mutex);
    return live_runtimes().count(id) > 0;
}

const tuning::ConfigChoice& RuntimeImpl::choice_locked(const Op& op, RuntimeEntry& entry) {
    if (!entry.choice) entry.choice = tuning::choose_config(resolver_, op.model(), device_);
    return *entry.choice;
}

const tuning::ConfigChoice& RuntimeImpl::choice(const Op& op) {
    OpState& state = op.state();
    std::lock_guard lock(state.mutex);
    return choice_locked(op, state.entry_locked(id_, &RuntimeImpl::is_live));
}

void RuntimeImpl::check_supported(const OpModel& model) const {
    if (auto reason = model.unsupported_reason(device_))
        throw Unsupported(fmt::format("tileops::{}: not supported on {}: {}", model.op_name(), device_.arch(), *reason));
}

LaunchPlan RuntimeImpl::plan(const OpModel& model, const Config& config, int vec) const {
    check_supported(model);  // before any kernel of it is compiled for this device
    // Every config names its widest vector width "vec"; pointers may ask for a wider one than the
    // config allows, never the reverse (a ragged launch likewise, at the config's width).
    if (auto it = config.find("vec"); it != config.end() && width_vector(vec) > it->second) {
        const int widest = static_cast<int>(it->second);
        vec = is_ragged_width(vec) && widest > 1 ? ragged_width(widest) : widest;
    }
    return model.plan(config, vec, device_);
}

std::vector<LaunchPlan> RuntimeImpl::plans(const OpModel& model, const Config& config,
                                           const std::vector<int>& widths) const {
    std::vector<LaunchPlan> plans;
    for (int vec : widths) {
        try {
            LaunchPlan launch_plan = plan(model, config, vec);
            for (const SideKernel* side : {&launch_plan.before, &launch_plan.after})
                if (*side) plans.push_back(side_plan(launch_plan, *side));
            plans.push_back(std::move(launch_plan));
        } catch (const std::exception&) {
            // An unusable config: resolving that width reports it.
        }
    }
    return plans;
}

void RuntimeImpl::load_kernels(const std::vector<LaunchPlan>& all_plans) {
    // Each kernel once: ops that share one would otherwise hold a thread waiting on its compile.
    std::vector<const LaunchPlan*> plans;
    std::unordered_set<std::string> seen;
    for (const LaunchPlan& plan : all_plans)
        if (seen.insert(plan.template_file + '|' + plan.name_expression).second) plans.push_back(&plan);
    std::vector<std::exception_ptr> failures(plans.size());
    jit::for_each_costliest_first(
        plans.size(), 0, [&](size_t i) { return jit::KernelRef{plans[i]->template_file, plans[i]->name_expression}; },
        [&](size_t i) {
            try {
                kernel(*plans[i]);
            } catch (...) {
                failures[i] = std::current_exception();
            }
        });
    for (const std::exception_ptr& failure : failures)
        if (failure) std::rethrow_exception(failure);
}

ResolvedLaunch RuntimeImpl::resolve_config(const OpModel& model, const Config& config, int vec) {
    check_supported(model);
    if (auto reason = model.invalid_reason(config, device_))
        throw InvalidArgument(fmt::format("tileops::{}: config invalid on {}: {}", model.op_name(), device_.arch(), *reason));
    const LaunchPlan plan = this->plan(model, config, vec);
    const LoadedKernel& loaded = kernel(plan);
    ResolvedLaunch launch;
    launch.function = loaded.function;
    for (int i = 0; i < 3; ++i) {
        launch.grid[i] = plan.grid[i];
        launch.block[i] = plan.block[i];
    }
    launch.cluster = plan.cluster;
    launch.shared_bytes = plan.shared_bytes;
    if (const size_t bytes = model.workspace_bytes(config, vec); bytes > 0) {
        make_current();
        launch.workspace = std::make_shared<Workspace>(device_.ordinal, bytes);
        launch.workspace->buffer.fill_bytes(0);
        // The caller's stream may not synchronize with the legacy stream the memset ran on.
        TILEOPS_CU_CHECK(cuda::driver().cuCtxSynchronize());
    }
    launch.details = plan.details;
    for (auto [side, resolved] : {std::pair{&plan.before, &launch.before}, {&plan.after, &launch.after}}) {
        if (!*side) continue;
        resolved->function = kernel(side_plan(plan, *side)).function;
        for (int i = 0; i < 3; ++i) {
            resolved->grid[i] = side->grid[i];
            resolved->block[i] = side->block[i];
        }
    }
    if (plan.cluster > 8)  // clusters of more than 8 CTAs are "non-portable" and need an opt-in
        TILEOPS_CU_CHECK(cuda::driver().cuFuncSetAttribute(launch.function,
                                                              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    // Dynamic shared memory past 48 KB needs an opt-in, and so does a smaller amount when the
    // kernel's static shared memory takes the total past 48 KB: opt in to whatever is asked.
    if (plan.shared_bytes > 0)
        TILEOPS_CU_CHECK(cuda::driver().cuFuncSetAttribute(
            launch.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(plan.shared_bytes)));
    if (plan.persistent) launch.grid[0] = resident_grid(model, launch);
    return launch;
}

// How many blocks of a persistent launch can be resident at once (at most its planned grid).
// Clusters are placed within one GPC, and GPCs differ in how many SMs they have enabled: on a
// 132-SM H100, fewer than 66 clusters of two may fit, so the count comes from the driver.
unsigned RuntimeImpl::resident_grid(const OpModel& model, const ResolvedLaunch& launch) {
    const cuda::DriverApi& api = cuda::driver();
    make_current();  // the occupancy queries need the device's context on this thread
    unsigned resident = 0;
    if (launch.cluster > 1) {
        ClusterLaunchConfig cluster(launch, nullptr);
        int clusters = 0;
        TILEOPS_CU_CHECK(api.cuOccupancyMaxActiveClusters(&clusters, launch.function, &cluster.config));
        resident = static_cast<unsigned>(std::max(clusters, 0)) * launch.cluster;
    } else {
        int per_sm = 0;
        TILEOPS_CU_CHECK(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, launch.function, static_cast<int>(launch.block[0] * launch.block[1] * launch.block[2]),
            launch.shared_bytes));
        resident = static_cast<unsigned>(std::max(per_sm, 0)) * static_cast<unsigned>(device_.sm_count);
    }
    if (resident == 0)
        throw Unsupported(fmt::format("tileops::{}: no block of {} threads{} with {} bytes of shared memory fits on {}",
                                      model.op_name(), launch.block[0],
                                      launch.cluster > 1 ? fmt::format(" in clusters of {}", launch.cluster) : "",
                                      launch.shared_bytes, device_.name));
    if (resident < launch.grid[0])
        util::logger().debug("tileops: {}: persistent grid of {} blocks cut to the {} that can be resident", model.op_name(),
                                launch.grid[0], resident);
    return std::min(launch.grid[0], resident);
}

const ResolvedLaunch& RuntimeImpl::resolve(const Op& op, int vec, CUstream stream) {
    OpState& state = op.state();
    std::lock_guard lock(state.mutex);
    RuntimeEntry& entry = state.entry_locked(id_, &RuntimeImpl::is_live);
    KernelSlot& slot = entry.slots[static_cast<size_t>(vector_slot(vec))];
    if (slot.ready.load(std::memory_order_acquire)) return slot.launch;
    const tuning::ConfigChoice& chosen = choice_locked(op, entry);
    if (background_compile_ && !cuda::stream_is_capturing(stream))
        if (const ResolvedLaunch* standin = standin_launch(op.model(), chosen.config, vec, slot)) {
            standin_runs_.fetch_add(1);
            return *standin;
        }
    // Compiles what is missing (a background compile of the same kernel in flight is joined).
    slot.launch = resolve_config(op.model(), chosen.config, vec);
    if (background_compile_) remember_ran(op.model(), chosen.config);
    slot.ready.store(true, std::memory_order_release);
    return slot.launch;
}

}  // namespace detail

Runtime::Runtime() : Runtime(RuntimeOptions{}) {}

Runtime::Runtime(const RuntimeOptions& options) {
    util::configure_logging();
    impl_ = std::make_unique<detail::RuntimeImpl>(options);
}

Runtime::~Runtime() = default;

const DeviceInfo& Runtime::device() const { return impl_->device(); }

RuntimeStats Runtime::stats() const { return impl_->stats(); }

std::string Runtime::explain(const Op& op) {
    const tuning::ConfigChoice& choice = impl_->choice(op);
    const std::string config = tuning::config_text(choice.config);
    return fmt::format("{} on {} ({}): config {{{}}} from {}{}{}{}", op.describe(), impl_->device().name,
                       impl_->device().arch(), config, tuning::to_string(choice.source),
                       choice.origin.empty() ? "" : " " + choice.origin,
                       choice.explanation.empty() ? "" : "; " + choice.explanation, impl_->background_note(op));
}

void Runtime::prepare(const Op& op) { prepare(std::vector<const Op*>{&op}); }

void Runtime::prepare(const std::vector<const Op*>& ops) {
    for (const Op* op : ops)
        if (op == nullptr) throw InvalidArgument("tileops: Runtime::prepare: a null op");
    // Every op's kernels first, compiled together (an op whose config cannot be chosen throws
    // here, before any compile work); kernel() compiles each distinct kernel once, so ops that
    // share kernels cost nothing extra.
    std::vector<detail::LaunchPlan> plans;
    std::vector<std::vector<int>> widths;
    for (const Op* op : ops) {
        const tuning::ConfigChoice& choice = impl_->choice(*op);
        widths.push_back(op->model().vector_widths(choice.config));
        for (detail::LaunchPlan& plan : impl_->plans(op->model(), choice.config, widths.back())) plans.push_back(std::move(plan));
    }
    impl_->load_kernels(plans);
    for (size_t i = 0; i < ops.size(); ++i)
        for (int vec : widths[i]) impl_->resolved_launch(*ops[i], vec);
}

}  // namespace tileops
