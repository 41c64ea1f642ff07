#include "tileops/op.hpp"

#include <fmt/format.h>

#include "ops/op_model.hpp"
#include "ops/op_state.hpp"
#include "runtime/driver.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/error.hpp"

namespace tileops {

Op::Op(std::shared_ptr<const detail::OpModel> model)
    : model_(std::move(model)), state_(std::make_unique<detail::OpState>()) {}

Op::~Op() = default;
Op::Op(Op&&) noexcept = default;
Op& Op::operator=(Op&&) noexcept = default;

std::string Op::describe() const { return model_->describe(); }

void Op::run(Runtime& runtime, Inputs inputs, Outputs outputs, CUstream stream) {
    const int vec = vector_width(inputs, outputs);
    detail::RuntimeImpl& impl = runtime.impl();
    impl.make_current();
    launch_with(impl.resolved_launch(*this, vec), inputs, outputs, stream);
}

namespace detail {

RuntimeEntry& OpState::entry_locked(uint64_t id, bool (*is_live)(uint64_t)) {
    RuntimeEntry* reusable = nullptr;
    for (RuntimeEntry& entry : runtimes) {
        const uint64_t owner = entry.runtime_id.load(std::memory_order_relaxed);
        if (owner == id) return entry;
        if (owner == 0) {  // a fresh entry: its slots are empty
            entry.runtime_id.store(id, std::memory_order_release);
            return entry;
        }
        if (reusable == nullptr && !is_live(owner)) reusable = &entry;
    }
    if (reusable == nullptr)
        throw Unsupported(fmt::format("tileops: an op object serves at most {} runtimes at a time; use one op object "
                                      "per runtime beyond that",
                                      kMaxRuntimesPerOp));
    // No thread reads this entry: its runtime is gone. Reset it, then publish the new owner.
    for (KernelSlot& kernel : reusable->slots) {
        kernel.ready.store(false, std::memory_order_relaxed);
        kernel.launch = ResolvedLaunch{};
    }
    reusable->choice.reset();
    reusable->runtime_id.store(id, std::memory_order_release);
    return *reusable;
}

void launch(const ResolvedLaunch& launch, void** args, CUstream stream, const Op& op) {
    const runtime::DriverApi& cu = runtime::driver();
    CUresult status;
    if (launch.cluster <= 1) {
        status = cu.cuLaunchKernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
                                   launch.block[1], launch.block[2], launch.shared_bytes, stream, args, nullptr);
    } else {
        CUlaunchAttribute attribute{};
        attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attribute.value.clusterDim.x = launch.cluster;
        attribute.value.clusterDim.y = 1;
        attribute.value.clusterDim.z = 1;
        CUlaunchConfig config{};
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
        status = cu.cuLaunchKernelEx(&config, launch.function, args, nullptr);
    }
    if (status == CUDA_SUCCESS && launch.follow_up != nullptr)
        status = cu.cuLaunchKernel(launch.follow_up, launch.follow_up_grid[0], launch.follow_up_grid[1],
                                   launch.follow_up_grid[2], launch.follow_up_block[0], launch.follow_up_block[1],
                                   launch.follow_up_block[2], 0, stream, args, nullptr);
    if (status != CUDA_SUCCESS)
        runtime::throw_driver_error(status, fmt::format("launching {}", op.describe()).c_str(), __FILE__, __LINE__);
}

}  // namespace detail
}  // namespace tileops
