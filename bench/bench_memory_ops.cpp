// Times the memory-bound ops on the GPU: achieved bandwidth against the device's measured
// copy bandwidth, and the host cost of Op::run on a cache hit against a raw cuLaunchKernel.
//
//   bench_memory_ops [--json out.json] [--repeats N] [--quick] [--ops a,b,...] [--shapes RxC,...]
//                    [--dtypes bf16,fp16,fp32] [--launch-only]
//
// Timing: CUDA events around each launch, L2 flushed before each (so inputs come from HBM),
// warm-up first, median of the repeats. Bytes are the fewest the op must move: each input read
// once, each output written once.
#include <algorithm>
#include <array>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "runtime/op_state.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using namespace tileops::bench;
using cuda::DeviceBuffer;

namespace {

struct Case {
    std::string op;
    int64_t rows, cols;
    DType dtype;
};

struct Result {
    Case c;
    double ms = 0, gbps = 0, fraction_of_copy = 0;
    double bytes = 0;
};

Result run_case(Runtime& rt, const Case& c, tuning::KernelTimer& timer, int repeats) {
    const size_t element = dtype_size(c.dtype);
    const size_t matrix = static_cast<size_t>(c.rows * c.cols) * element;
    const size_t row = static_cast<size_t>(c.cols) * element;
    DeviceBuffer x = random_buffer(matrix, c.dtype), y(matrix);
    Result result{c};
    std::function<void()> fn;
    std::unique_ptr<Op> keep;
    DeviceBuffer w = random_buffer(row, c.dtype), b = random_buffer(row, c.dtype), r, sum, x2;
    if (c.op == "rmsnorm") {
        auto op = std::make_unique<RmsNorm>(RmsNormProblem{c.rows, c.cols, c.dtype});
        fn = [&, p = op.get()] { p->run(rt, {x.data(), w.data()}, {y.data()}); };
        result.bytes = 2.0 * matrix + row;
        keep = std::move(op);
    } else if (c.op == "rmsnorm_residual") {
        r = random_buffer(matrix, c.dtype);
        auto op = std::make_unique<RmsNorm>(RmsNormProblem{c.rows, c.cols, c.dtype, {}, 1e-6f, true});
        fn = [&, p = op.get()] { p->run(rt, {x.data(), r.data(), w.data()}, {y.data(), r.data()}); };
        result.bytes = 4.0 * matrix + row;
        keep = std::move(op);
    } else if (c.op == "layernorm") {
        auto op = std::make_unique<LayerNorm>(LayerNormProblem{c.rows, c.cols, c.dtype});
        fn = [&, p = op.get()] { p->run(rt, {x.data(), w.data(), b.data()}, {y.data()}); };
        result.bytes = 2.0 * matrix + 2.0 * row;
        keep = std::move(op);
    } else if (c.op == "softmax" || c.op == "log_softmax") {
        auto op = std::make_unique<Softmax>(SoftmaxProblem{c.rows, c.cols, c.dtype, {}, c.op == "log_softmax"});
        fn = [&, p = op.get()] { p->run(rt, {x.data()}, {y.data()}); };
        result.bytes = 2.0 * matrix;
        keep = std::move(op);
    } else {
        ElementwiseOp kind = c.op == "gelu" ? ElementwiseOp::gelu
                             : c.op == "gelu_tanh" ? ElementwiseOp::gelu_tanh
                             : c.op == "silu" ? ElementwiseOp::silu
                             : c.op == "silu_mul" ? ElementwiseOp::silu_mul
                             : c.op == "add" ? ElementwiseOp::add
                                             : ElementwiseOp::mul;
        auto op = std::make_unique<Elementwise>(ElementwiseProblem{kind, c.rows, c.cols, c.dtype});
        if (is_binary(kind)) {
            x2 = random_buffer(matrix, c.dtype);
            fn = [&, p = op.get()] { p->run(rt, {x.data(), x2.data()}, {y.data()}); };
            result.bytes = 3.0 * matrix;
        } else {
            fn = [&, p = op.get()] { p->run(rt, {x.data()}, {y.data()}); };
            result.bytes = 2.0 * matrix;
        }
        keep = std::move(op);
    }
    result.ms = time_ms(fn, timer, repeats);
    result.gbps = result.bytes / (result.ms * 1e-3) / 1e9;
    return result;
}

}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_memory_ops: %s\n", e.what());
        return 1;
    }
}

int run(int argc, char** argv) {
    std::string json_path;
    int repeats = 30;
    bool quick = false;
    bool launch_only = false;  // only the host cost of a launch
    std::vector<std::string> only_ops;  // --ops: a subset of the ops, by name
    std::string only_shapes;  // --shapes: "ROWSxCOLS,..." (any shape, not only the issue's)
    std::vector<std::string> only_dtypes;  // --dtypes: bf16, fp16, fp32 (default bf16 and fp32)
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else if (arg == "--quick") quick = true;
        else if (arg == "--launch-only") launch_only = true;
        else if (arg == "--ops" && i + 1 < argc) only_ops = split_list(argv[++i]);
        else if (arg == "--shapes" && i + 1 < argc) only_shapes = argv[++i];
        else if (arg == "--dtypes" && i + 1 < argc) only_dtypes = split_list(argv[++i]);
        else {
            fmt::print(stderr,
                       "usage: bench_memory_ops [--json out.json] [--repeats N] [--quick] [--ops a,b,...] "
                       "[--shapes RxC,...] [--dtypes bf16,fp16,fp32] [--launch-only]\n");
            return 2;
        }
    }
    std::vector<std::array<int64_t, 2>> shapes = {{16384, 1024}, {16384, 4096}, {4096, 16384},
                                                  {1024, 65536}, {256, 262144}, {65536, 4096}};
    if (!only_shapes.empty()) {
        shapes.clear();
        for (const std::vector<int64_t>& dims : parse_shape_list(only_shapes, 2, "--shapes")) shapes.push_back({dims[0], dims[1]});
    }
    std::vector<DType> dtypes = {DType::bf16, DType::fp32};
    if (!only_dtypes.empty()) {
        dtypes.clear();
        for (const std::string& name : only_dtypes) {
            const DType dtype = parse_dtype(name);
            if (dtype != DType::bf16 && dtype != DType::fp16 && dtype != DType::fp32)
                throw std::invalid_argument(fmt::format("--dtypes: '{}' is not a float type (bf16, fp16, fp32)", name));
            dtypes.push_back(dtype);
        }
    }
    std::vector<std::string> ops = {"rmsnorm", "rmsnorm_residual", "layernorm", "softmax", "log_softmax",
                                    "gelu", "gelu_tanh", "silu", "silu_mul", "add", "mul"};
    if (quick) ops = {"rmsnorm", "softmax", "silu_mul"};
    if (!only_ops.empty()) {
        for (const std::string& name : only_ops)
            if (std::find(ops.begin(), ops.end(), name) == ops.end())
                throw std::invalid_argument(fmt::format("--ops: unknown op '{}'", name));
        ops = only_ops;
    }
    if (launch_only) ops.clear();

    // Arguments are checked above, before the device is touched and the copy bandwidth measured.
    Runtime rt;
    const DeviceInfo& device = rt.device();
    tuning::KernelTimer timer(device);
    const double copy_gbps = measure_copy_bandwidth(timer, repeats);
    print_device(device, copy_gbps);

    nlohmann::json json;
    json["device"] = device.name;
    json["arch"] = device.arch();
    json["copy_gbps"] = copy_gbps;
    fmt::print("{:<18} {:>14} {:>5} {:>10} {:>9} {:>7}\n", "op", "shape", "dtype", "time us", "GB/s", "% copy");
    for (const std::string& op : ops)
        for (DType dtype : dtypes)
            for (const auto& s : shapes) {
                Result r = run_case(rt, {op, s[0], s[1], dtype}, timer, repeats);
                TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
                r.fraction_of_copy = r.gbps / copy_gbps;
                fmt::print("{:<18} {:>14} {:>5} {:>10.1f} {:>9.0f} {:>6.1f}%\n", op, fmt::format("{}x{}", s[0], s[1]),
                           dtype_name(dtype), r.ms * 1e3, r.gbps, 100 * r.fraction_of_copy);
                json["ops"].push_back({{"op", op}, {"rows", s[0]}, {"cols", s[1]}, {"dtype", dtype_name(dtype)},
                                       {"median_us", r.ms * 1e3}, {"bytes", r.bytes}, {"gbps", r.gbps},
                                       {"fraction_of_copy", r.fraction_of_copy}});
            }

    // Host cost of a cache hit: Op::run against cuLaunchKernel of the very same kernel.
    DeviceBuffer a = random_buffer(64 * 2, DType::bf16), y(64 * 2);
    Elementwise tiny({ElementwiseOp::silu, 1, 64, DType::bf16});
    tiny.run(rt, {a.data()}, {y.data()});
    TILEOPS_CU_CHECK(cu().cuCtxSynchronize());
    const detail::ResolvedLaunch& launch = rt.impl().resolved_launch(tiny, 8);
    const void* a_ptr = a.data();
    void* y_ptr = y.data();
    long long stride = 64, rows = 1, cols = 64;
    const void* null_b = nullptr;
    void* args[] = {&a_ptr, &stride, &null_b, &stride, &y_ptr, &stride, &rows, &cols};
    const int calls = 20000;
    double raw_us = host_us_per_call(
        [&] {
            TILEOPS_CU_CHECK(cu().cuLaunchKernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2],
                                                 launch.block[0], launch.block[1], launch.block[2], 0, nullptr, args,
                                                 nullptr));
        },
        calls);
    double run_us = host_us_per_call([&] { tiny.run(rt, {a.data()}, {y.data()}); }, calls);
    fmt::print("host cost per call: raw cuLaunchKernel {:.2f} us, Op::run {:.2f} us, overhead {:.2f} us\n", raw_us,
               run_us, run_us - raw_us);
    json["launch"] = {{"raw_cuLaunchKernel_us", raw_us}, {"op_run_us", run_us}, {"overhead_us", run_us - raw_us}};
    if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << '\n';
    return 0;
}
