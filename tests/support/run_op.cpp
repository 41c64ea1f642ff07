#include "support/run_op.hpp"

#include <catch2/catch_test_macros.hpp>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/test_support.hpp"
#include "tuning/op_config.hpp"

namespace tileops::test {

void run_op(Op& op, const std::vector<TensorArg>& inputs, const OutputArg& output, DeviceMatrix& out,
            const std::optional<Config>& config) {
    Runtime& runtime = shared_runtime();
    const Inputs in(inputs.data(), inputs.size());
    const Outputs outs(&output, 1);
    if (!config) {
        op.run(runtime, in, outs);
        return;
    }
    UNSCOPED_INFO("config " << tuning::config_text(*config));
    const int width = op.model().vector_width(in, outs);
    const detail::ResolvedLaunch launch = runtime.impl().resolve_config(op.model(), *config, width);
    for (int repeat = 0; repeat < 2; ++repeat) {
        out.poison();
        op.launch_with(launch, in, outs, nullptr);
    }
}

}  // namespace tileops::test
