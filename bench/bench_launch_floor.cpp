// The floor under every other benchmark: what the timing harness (bench_common.hpp: L2 flushed by
// a read, CUDA events around one launch, median) measures for kernels that do nothing, or only
// read. A small problem's "% of copy bandwidth" is judged against these figures:
//
//   empty            one CTA that returns at once: the harness's fixed cost
//   empty_smem       one CTA per SM, each with ~200 KB of dynamic shared memory (what GEMM and
//                    decode kernels ask for), returning at once: the cost of the L1 / shared
//                    memory reconfiguration after the flush kernel, if any
//   read N MB        a streaming read of N MB (16-byte loads, four in flight per thread), with
//                    and without ~200 KB of shared memory per CTA
//
//   bench_launch_floor [--json out.json] [--repeats N]
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "jit/compiler.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using namespace tileops::bench;
using cuda::DeviceBuffer;

namespace {

constexpr const char* kSource = R"(
extern "C" __global__ void empty_kernel() {}

// Four independent 16-byte loads per thread and step; the xor is stored only if it equals a
// value it cannot take, so the loads stay.
extern "C" __global__ void read_kernel(const int4* data, unsigned long long n, int* sink) {
    extern __shared__ int reserved[];
    int acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const int4 a = __ldcs(data + i), b = __ldcs(data + i + stride), c = __ldcs(data + i + 2 * stride),
                   d = __ldcs(data + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const int4 a = __ldcs(data + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x7fffffff && sink != nullptr) { *sink = acc; reserved[0] = acc; }
}
)";

struct Kernels {
    cuda::Module module;
    CUfunction empty = nullptr, read = nullptr;
};

Kernels compile_kernels(const DeviceInfo& device) {
    jit::CompileRequest request;
    request.source = kSource;
    request.source_name = "launch_floor.cu";
    request.name_expressions = {"empty_kernel", "read_kernel"};
    request.arch = device.arch();
    const jit::CompileResult result = jit::compile(request);
    Kernels k{cuda::Module(result.cubin), nullptr, nullptr};
    k.empty = k.module.function(result.lowered_names.at("empty_kernel"));
    k.read = k.module.function(result.lowered_names.at("read_kernel"));
    return k;
}

void launch(CUfunction f, unsigned grid, unsigned block, unsigned smem, void** args) {
    TILEOPS_CU_CHECK(cu().cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, nullptr, args, nullptr));
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path;
    int repeats = 50;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else {
            fmt::print(stderr, "usage: bench_launch_floor [--json out.json] [--repeats N]\n");
            return 2;
        }
    }
    Runtime rt;
    const DeviceInfo& device = rt.device();
    tuning::KernelTimer timer(device, nullptr);
    const double copy_gbps = measure_copy_bandwidth(timer, 10);
    print_device(device, copy_gbps);
    Kernels k = compile_kernels(device);

    const unsigned big_smem = 200 * 1024;
    for (CUfunction f : {k.empty, k.read})
        TILEOPS_CU_CHECK(cu().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, big_smem));
    const unsigned sms = static_cast<unsigned>(device.sm_count);

    nlohmann::json rows = nlohmann::json::array();
    auto record = [&](const std::string& name, double bytes, double us) {
        const double gbps = bytes > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0;
        fmt::print("| {:<28} | {:>9.1f} | {:>8.2f} | {:>7.0f} | {:>6.1f}% |\n", name, bytes / 1e6, us, gbps,
                   bytes > 0 ? 100.0 * gbps / copy_gbps : 0.0);
        rows.push_back({{"name", name}, {"bytes", bytes}, {"us", us}, {"gbps", gbps}});
    };
    fmt::print("| kernel | MB | us | GB/s | % copy |\n|---|---:|---:|---:|---:|\n");
    record("empty, 1 CTA", 0, 1e3 * time_ms([&] { launch(k.empty, 1, 32, 0, nullptr); }, timer, repeats));
    record("empty, 1 CTA/SM, 200 KB smem", 0,
           1e3 * time_ms([&] { launch(k.empty, sms, 128, big_smem, nullptr); }, timer, repeats));
    record("two empty launches", 0, 1e3 * time_ms([&] {
               launch(k.empty, 1, 32, 0, nullptr);
               launch(k.empty, 1, 32, 0, nullptr);
           }, timer, repeats));
    for (size_t mb : {1, 4, 8, 17, 34, 67, 134, 268, 537}) {
        const size_t bytes = mb * 1000 * 1000 / 64 * 64;
        DeviceBuffer data = random_buffer(bytes, DType::fp32, mb, size_t{1} << 20);
        CUdeviceptr ptr = data.get();
        unsigned long long n = bytes / 16;
        void* sink = nullptr;
        void* args[] = {&ptr, &n, &sink};
        record(fmt::format("read {} MB, 4 CTAs/SM", mb), static_cast<double>(bytes),
               1e3 * time_ms([&] { launch(k.read, 4 * sms, 512, 0, args); }, timer, repeats));
        record(fmt::format("read {} MB, 1 CTA/SM, 200 KB", mb), static_cast<double>(bytes),
               1e3 * time_ms([&] { launch(k.read, sms, 1024, big_smem, args); }, timer, repeats));
    }
    if (!json_path.empty()) {
        nlohmann::json doc{{"device", device.name}, {"copy_gbps", copy_gbps}, {"rows", rows}};
        std::ofstream(json_path) << doc.dump(2) << "\n";
    }
    return 0;
}
