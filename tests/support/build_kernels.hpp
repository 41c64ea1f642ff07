// Builds many kernels for the device of a runtime at once, for GPU tests that run many configs:
// compiled one after another they take minutes.
#pragma once

#include <vector>

#include "core/op_model.hpp"
#include "tileops/runtime.hpp"

namespace tileops::test {

// Builds every kernel of `plans` into the runtime's kernel cache, on all cores; CHECKs that each
// compiled.
void build_kernels(Runtime& runtime, const std::vector<detail::LaunchPlan>& plans);

}  // namespace tileops::test
