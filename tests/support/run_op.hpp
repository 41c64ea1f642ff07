// Runs an op in a GPU test the way its correctness checks want: the runtime's choice, or one
// config of its search space, launched twice with the output poisoned before each launch, so that
// what a launch leaves behind (split-K counters, a workspace) cannot hide a wrong second result.
#pragma once

#include <optional>
#include <vector>

#include "support/device_tensor.hpp"
#include "tileops/op.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::test {

// With `config`: that config at the vector width run() would take for these operands, `out`
// poisoned before each launch (a failing check names the config); without: op.run() on the shared
// runtime, `out` as the caller left it (an in-place C, say).
void run_op(Op& op, const std::vector<TensorArg>& inputs, const OutputArg& output, DeviceMatrix& out,
            const std::optional<Config>& config);

}  // namespace tileops::test
