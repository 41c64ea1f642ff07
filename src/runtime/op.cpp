#include "tileops/op.hpp"

#include <fmt/format.h>

#include "core/op_model.hpp"
#include "cuda/driver.hpp"
#include "runtime/op_state.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/error.hpp"

namespace tileops {

Op::Op() : state_(std::make_unique<detail::OpState>()) {}

Op::~Op() = default;
Op::Op(Op&&) noexcept = default;
Op& Op::operator=(Op&&) noexcept = default;

const detail::OpModel& Op::model() const {
    if (!model_) throw InvalidArgument("tileops: this op object was moved from; use the one it was moved to");
    return *model_;
}

std::string Op::describe() const { return model().describe(); }

int Op::vector_width(Inputs inputs, Outputs outputs) const { return model().vector_width(inputs, outputs); }

void Op::launch_with(const detail::ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    model().launch(launch, inputs, outputs, stream);
}

void Op::run(Runtime& runtime, Inputs inputs, Outputs outputs, CUstream stream) {
    const int vec = vector_width(inputs, outputs);
    detail::RuntimeImpl& impl = runtime.impl();
    impl.make_current();
    launch_with(impl.resolved_launch(*this, vec, stream), inputs, outputs, stream);
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
        kernel.pending = {};
        kernel.standin = ResolvedLaunch{};
    }
    reusable->choice.reset();
    reusable->runtime_id.store(id, std::memory_order_release);
    return *reusable;
}

}  // namespace detail
}  // namespace tileops
