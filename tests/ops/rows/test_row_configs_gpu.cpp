// Every config of the row ops' search spaces that prefetches (persistent grids walking several
// row groups per block, with the next group's copies in flight) or holds long rows resident
// (registers and shared memory, the next row's loads issued as outputs are written), plus the
// heuristic's, against a
// double-precision reference: many more rows than resident blocks, rows split over clusters,
// narrow vectors (4- and 8-byte copies), padded strides, outputs poisoned before every launch.
#include <future>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/device_tensor.hpp"
#include "support/row_reference.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

enum class RowOpKind { rmsnorm, rmsnorm_residual, layernorm, softmax, log_softmax };

struct RowCase {
    RowOpKind kind;
    DType dtype;
    int64_t rows, cols;
};

std::string describe(const Config& config) {
    std::string text;
    for (const auto& [key, value] : config) text += fmt::format("{}={} ", key, value);
    return text;
}

// The configs under test: those of the search space that prefetch or hold rows resident, and the
// heuristic's.
std::vector<Config> persistent_configs(const Op& op, const DeviceInfo& device) {
    std::vector<Config> configs{op.model().heuristic(device)};
    for (const Config& config : op.model().search_space(device)) {
        const auto prefetch = config.find("prefetch");
        if ((prefetch != config.end() && prefetch->second == 1) || config.count("slots")) configs.push_back(config);
    }
    return configs;
}

// The split configs of the search space (rows too few and too long to fill the GPU otherwise)
// and the heuristic's, which must be one of them.
std::vector<Config> split_configs(const Op& op, const DeviceInfo& device) {
    const Config heuristic = op.model().heuristic(device);
    REQUIRE(heuristic.count("split"));
    std::vector<Config> configs{heuristic};
    for (const Config& config : op.model().search_space(device))
        if (config.count("split")) configs.push_back(config);
    return configs;
}

using ConfigChoice = std::vector<Config> (*)(const Op&, const DeviceInfo&);

void check_every_config(const RowCase& c, ConfigChoice choose = persistent_configs) {
    Runtime& runtime = shared_runtime();
    detail::RuntimeImpl& impl = runtime.impl();
    const int64_t stride = c.cols + 4;  // padded rows: the gaps must stay untouched
    const bool residual = c.kind == RowOpKind::rmsnorm_residual;
    std::unique_ptr<Op> op;
    switch (c.kind) {
        case RowOpKind::rmsnorm:
        case RowOpKind::rmsnorm_residual:
            op = std::make_unique<RmsNorm>(
                RmsNormProblem{c.rows, c.cols, c.dtype, {}, 1e-5f, residual, stride, stride, stride});
            break;
        case RowOpKind::layernorm:
            op = std::make_unique<LayerNorm>(LayerNormProblem{c.rows, c.cols, c.dtype, {}, 1e-5f, stride, stride});
            break;
        case RowOpKind::softmax:
        case RowOpKind::log_softmax:
            op = std::make_unique<Softmax>(
                SoftmaxProblem{c.rows, c.cols, c.dtype, {}, c.kind == RowOpKind::log_softmax, stride, stride});
            break;
    }
    const auto x = test::round_to(c.dtype, test::random_values(c.rows * c.cols, 7 + c.cols, -4.0, 4.0));
    const auto r = test::round_to(c.dtype, test::random_values(c.rows * c.cols, 8 + c.cols));
    const auto w = test::round_to(c.dtype, test::random_values(c.cols, 9, 0.5, 1.5));
    const auto b = test::round_to(c.dtype, test::random_values(c.cols, 10, -1.0, 1.0));
    DeviceMatrix dx(c.dtype, c.rows, c.cols, stride), dr(c.dtype, c.rows, c.cols, stride);
    DeviceMatrix dw(c.dtype, 1, c.cols), db(c.dtype, 1, c.cols);
    DeviceMatrix dy(c.dtype, c.rows, c.cols, stride), dsum(c.dtype, c.rows, c.cols, stride);
    dx.upload(x);
    dr.upload(r);
    dw.upload(w);
    db.upload(b);
    std::vector<double> ref, sum_ref;
    std::vector<TensorArg> inputs;
    std::vector<OutputArg> outputs{dy.data()};
    switch (c.kind) {
        case RowOpKind::rmsnorm:
        case RowOpKind::rmsnorm_residual:
            ref = test::rmsnorm_reference(x, residual ? r : std::vector<double>{}, w, c.rows, c.cols, 1e-5, &sum_ref);
            inputs = residual ? std::vector<TensorArg>{dx.data(), dr.data(), dw.data()}
                              : std::vector<TensorArg>{dx.data(), dw.data()};
            if (residual) outputs.push_back(dsum.data());
            break;
        case RowOpKind::layernorm:
            ref = test::layernorm_reference(x, w, b, c.rows, c.cols, 1e-5);
            inputs = {dx.data(), dw.data(), db.data()};
            break;
        case RowOpKind::softmax:
        case RowOpKind::log_softmax:
            ref = test::softmax_reference(x, c.rows, c.cols, c.kind == RowOpKind::log_softmax);
            inputs = {dx.data()};
            break;
    }
    ref = test::round_to(c.dtype, ref);
    const int vec = op->vector_width(Inputs(inputs.data(), inputs.size()), Outputs(outputs.data(), outputs.size()));

    // Compile every kernel at once (misses on different keys compile in parallel), then run each.
    const std::vector<Config> configs = test::this_shard(choose(*op, runtime.device()));
    std::vector<std::future<detail::ResolvedLaunch>> launches;
    for (const Config& config : configs)
        launches.push_back(std::async(std::launch::async, [&, config] { return impl.resolve_config(op->model(), config, vec); }));
    for (size_t i = 0; i < configs.size(); ++i) {
        INFO(op->model().describe() << " config " << describe(configs[i]) << "at vector width " << vec);
        const detail::ResolvedLaunch launch = launches[i].get();
        dy.poison();
        dsum.poison();
        op->launch_with(launch, Inputs(inputs.data(), inputs.size()), Outputs(outputs.data(), outputs.size()), nullptr);
        const double error = test::relative_error(dy.download(), ref);
        INFO("relative error " << error);
        CHECK(error <= test::tolerance(c.dtype));
        CHECK(dy.gaps_untouched());
        if (residual) {
            CHECK(test::relative_error(dsum.download(), test::round_to(c.dtype, sum_ref)) <= test::tolerance(c.dtype));
            CHECK(dsum.gaps_untouched());
            // Again with the sum written over the residual, as a transformer's residual stream is:
            // dsum holds the residual and receives the sum (it is poisoned again for each config).
            dsum.upload(r);
            dy.poison();
            const TensorArg in_place_inputs[] = {dx.data(), dsum.data(), dw.data()};
            OutputArg in_place_outputs[] = {dy.data(), dsum.data()};
            op->launch_with(launch, Inputs(in_place_inputs, 3), Outputs(in_place_outputs, 2), nullptr);
            CHECK(test::relative_error(dy.download(), ref) <= test::tolerance(c.dtype));
            CHECK(test::relative_error(dsum.download(), test::round_to(c.dtype, sum_ref)) <= test::tolerance(c.dtype));
        }
    }
}

}  // namespace

TEST_CASE("Every prefetching or resident row-op config is correct on many rows",
          "[gpu][rmsnorm][layernorm][softmax][search_space]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();  // makes the device's context current for the allocations below
    // Rows well beyond the resident blocks, so each persistent block walks several groups; 4100
    // fp16 columns and 7 fp32 columns give 8- and 4-byte copies (odd lengths: the ragged kernels);
    // 65536 and 262144 split over clusters;
    // rows of 128 KB and more have resident configs (100003 fp32 columns: 4-byte copies, a chunk
    // that ends mid-CTA); the residual add on long rows, its sum also written over the residual.
    const RowCase cases[] = {
        {RowOpKind::rmsnorm_residual, DType::bf16, 3001, 1000}, {RowOpKind::rmsnorm, DType::fp32, 70, 262144},
        {RowOpKind::layernorm, DType::fp16, 997, 4100},         {RowOpKind::softmax, DType::bf16, 301, 65536},
        {RowOpKind::log_softmax, DType::fp32, 20001, 7},        {RowOpKind::layernorm, DType::bf16, 150, 65536},
        {RowOpKind::log_softmax, DType::bf16, 67, 262144},      {RowOpKind::layernorm, DType::fp32, 301, 100003},
        {RowOpKind::rmsnorm_residual, DType::bf16, 150, 131072}, {RowOpKind::rmsnorm_residual, DType::fp32, 67, 100003},
        // Ragged 16-bit rows in every resident config (odd length, so every row's head differs).
        {RowOpKind::layernorm, DType::bf16, 31, 100003},        {RowOpKind::softmax, DType::bf16, 33, 50257},
    };
    for (const RowCase& c : cases) check_every_config(c);
}

TEST_CASE("Every split config of the norms is correct on few long rows", "[gpu][rmsnorm][layernorm]") {
    TILEOPS_REQUIRE_GPU();
    shared_runtime();
    // One row of a million elements (what the split kernels are for), odd lengths (ragged rows:
    // the edges belong to the first chunk), the residual add with its sum, also over the residual.
    const RowCase cases[] = {
        {RowOpKind::rmsnorm, DType::bf16, 1, 1048576},         {RowOpKind::rmsnorm_residual, DType::fp32, 2, 300001},
        {RowOpKind::rmsnorm_residual, DType::bf16, 3, 262147}, {RowOpKind::layernorm, DType::bf16, 1, 1048576},
        {RowOpKind::layernorm, DType::fp32, 2, 1000003},
    };
    for (const RowCase& c : cases) check_every_config(c, split_configs);
}
