// Softmax and log-softmax of few long rows split over the grid (kernel_templates/rows/
// softmax_split.cuh): the heuristic's config and every split config of the search space against a
// double-precision reference, on aligned and ragged rows, with masked (-inf) entries, outputs
// poisoned before each launch.
#include <cmath>
#include <future>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/device_tensor.hpp"
#include "support/row_checks.hpp"
#include "support/row_reference.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

struct SplitCase {
    int64_t rows, cols, pad;
    size_t offset;  // elements x and y start past an aligned address
    DType dtype;
    bool log;
};

}  // namespace

TEST_CASE("Softmax of few long rows split over the grid (every split config)", "[gpu][softmax]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    const double neg_inf = -std::numeric_limits<double>::infinity();
    const SplitCase cases[] = {
        {1, 1048576, 0, 0, DType::bf16, false}, {1, 1000003, 0, 1, DType::fp32, true},
        {3, 262147, 5, 3, DType::bf16, false},  {2, 300001, 0, 0, DType::fp32, false},
        {2, 524288, 0, 0, DType::bf16, true},
    };
    for (const SplitCase& c : cases) {
        const int64_t stride = c.cols + c.pad;
        Softmax op({c.rows, c.cols, c.dtype, {}, c.log, stride, stride});
        const Config heuristic = op.model().heuristic(runtime.device());
        INFO(op.model().describe());
        REQUIRE(heuristic.count("split"));  // these problems are what the split kernels are for
        auto x = test::round_to(c.dtype, test::random_values(c.rows * c.cols, 101 + c.cols, -8.0, 8.0));
        // The last row's first half masked: whole chunks see nothing but -inf.
        for (int64_t j = 0; j < c.cols / 2; ++j) x[(c.rows - 1) * c.cols + j] = neg_inf;
        const size_t bytes = c.offset * dtype_size(c.dtype);
        DeviceMatrix dx(c.dtype, c.rows, c.cols, stride, bytes), dy(c.dtype, c.rows, c.cols, stride, bytes);
        dx.upload(x);
        const TensorArg inputs[] = {dx.data()};
        const OutputArg outputs[] = {dy.data()};
        const int width = op.vector_width(Inputs(inputs, 1), Outputs(outputs, 1));
        CHECK(detail::is_ragged_width(width) == (c.cols % 8 != 0 || c.offset != 0));
        const auto ref = test::round_to(c.dtype, test::softmax_reference(x, c.rows, c.cols, c.log));

        std::vector<Config> configs{heuristic};
        for (const Config& config : op.model().search_space(runtime.device()))
            if (config.count("split")) configs.push_back(config);
        std::vector<std::future<detail::ResolvedLaunch>> launches;
        for (const Config& config : configs)
            launches.push_back(std::async(std::launch::async, [&, config] { return impl.resolve_config(op.model(), config, width); }));
        for (size_t i = 0; i < configs.size(); ++i) {
            INFO("split " << configs[i].at("split") << " threads " << configs[i].at("threads_per_row"));
            const detail::ResolvedLaunch launch = launches[i].get();
            dy.poison();
            op.launch_with(launch, Inputs(inputs, 1), Outputs(outputs, 1), nullptr);
            const std::vector<double> y = dy.download();
            std::vector<double> kept, kept_ref;
            int64_t wrong_masked = 0;
            for (size_t k = 0; k < y.size(); ++k) {
                if (x[k] == neg_inf) {
                    wrong_masked += c.log ? y[k] != neg_inf : y[k] != 0.0;
                } else {
                    kept.push_back(y[k]);
                    kept_ref.push_back(ref[k]);
                }
            }
            CHECK(wrong_masked == 0);
            const double error = test::relative_error(kept, kept_ref);
            INFO("relative error " << error);
            CHECK(error <= test::tolerance(c.dtype));
            CHECK(dy.gaps_untouched());
        }
    }
}
