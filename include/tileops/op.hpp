// The base of every op: a handle on its validated problem (held by the op's model, one per family
// in src/ops/) plus the kernels it resolved, per runtime.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "tileops/export.hpp"
#include "tileops/runtime.hpp"
#include "tileops/tensor.hpp"

namespace tileops {

namespace detail {
class OpModel;
struct OpState;
struct ResolvedLaunch;
}  // namespace detail

class TILEOPS_EXPORT Op {
public:
    virtual ~Op();
    Op(Op&&) noexcept;
    Op& operator=(Op&&) noexcept;
    Op(const Op&) = delete;
    Op& operator=(const Op&) = delete;

    // Runs the op on `stream` (the legacy default stream when null). The first call on a runtime
    // picks the config and compiles or loads the kernel; later calls are a lookup and a launch:
    // no heap allocation, no lock, no logging, safe inside CUDA graph capture. Operand lists are
    // documented by each op. Throws InvalidArgument for bad operands, before any launch.
    void run(Runtime& runtime, Inputs inputs, Outputs outputs, CUstream stream = nullptr);

    // The checks run() does on its operands (counts, null and misaligned pointers, views),
    // without a GPU. Throws InvalidArgument naming the argument.
    void check(Inputs inputs, Outputs outputs) const { (void)vector_width(inputs, outputs); }

    // e.g. "rmsnorm 8192x4096 bf16".
    std::string describe() const;

    // For the autotuner and benchmarks. vector_width() checks the operands and returns the widest
    // vector width their shape and alignment allow; launch_with() launches an explicitly
    // resolved kernel on operands that passed vector_width().
    int vector_width(Inputs inputs, Outputs outputs) const;
    void launch_with(const detail::ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const;

    // Throws InvalidArgument on an op that was moved from (as do run, check and describe).
    const detail::OpModel& model() const;
    detail::OpState& state() const noexcept { return *state_; }

protected:
    // An op derived from this one creates its model (which holds the normalized problem) in its
    // constructor and hands it over with adopt(), which returns the model's problem.
    Op();
    template <class Model>
    const auto* adopt(std::shared_ptr<const Model> model) noexcept {
        const auto* problem = &model->problem();
        model_ = std::move(model);
        return problem;
    }

    std::shared_ptr<const detail::OpModel> model_;
    std::unique_ptr<detail::OpState> state_;
};

}  // namespace tileops
