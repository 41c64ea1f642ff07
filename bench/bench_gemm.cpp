// Times tileops::Gemm against cuBLAS (cublasGemmEx, fp32 compute) in the same process, on the same
// buffers: square problems and the projections of Llama-3 8B/70B at decode and prefill batch sizes.
//
//   bench_gemm [--json out.json] [--repeats N] [--quick] [--large] [--dtype bf16|fp16] [--layout nt|nn]
//              [--only MxNxK[,MxNxK...]]
//
// Timing: bench_common's time_pair_ms (CUDA events, warm-up, median; ours and cuBLAS interleaved
// run by run; L2 flushed by a read before each timed run: small-M problems are bound by reading B,
// which must come from HBM).
// TFLOP/s counts 2 * M * N * K.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "util/host_dtype.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using cuda::DeviceBuffer;
using bench::cu;
using bench::time_pair_ms;

namespace {

void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("bench_gemm: {} failed: cuBLAS status {}", what, static_cast<int>(status)));
}

DeviceBuffer random_buffer(size_t count, DType dtype, uint64_t seed) {
    // Values in [-1, 1) as the dtype stores them; never zeros.
    std::vector<uint8_t> host(count * dtype_size(dtype));
    uint64_t state = 0x9e3779b97f4a7c15ULL ^ seed;
    for (size_t i = 0; i < count; ++i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = static_cast<float>((state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
        util::encode_value(dtype, f, &host[i * dtype_size(dtype)]);
    }
    DeviceBuffer buffer(host.size());
    buffer.upload(host.data(), host.size());
    return buffer;
}

struct Shape {
    std::string name;
    int64_t m, n, k;
};

}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gemm: %s\n", e.what());
        return 1;
    }
}

int run(int argc, char** argv) {
    std::string json_path;
    int repeats = 20;
    bool quick = false, large = false;
    std::string only;  // MxNxK: that shape alone (profiling)
    DType dtype = DType::bf16;
    GemmLayout layout = GemmLayout::nt;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
        else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else if (arg == "--quick") quick = true;
        else if (arg == "--large") large = true;
        else if (arg == "--only" && i + 1 < argc) only = argv[++i];
        else if (arg == "--dtype" && i + 1 < argc) dtype = parse_dtype(argv[++i]);
        else if (arg == "--layout" && i + 1 < argc) layout = std::string(argv[++i]) == "nn" ? GemmLayout::nn : GemmLayout::nt;
        else {
            fmt::print(stderr, "usage: bench_gemm [--json out.json] [--repeats N] [--quick] [--large] [--dtype bf16|fp16] "
                               "[--layout nt|nn] [--only MxNxK[,MxNxK...]]\n");
            return 2;
        }
    }
    std::vector<Shape> shapes;
    std::vector<int64_t> squares = {1024, 2048, 4096, 8192};
    if (large) squares.push_back(16384);
    for (int64_t s : squares) shapes.push_back({"square", s, s, s});
    // Llama-3 projections (N, K): 8B qkv, o, gate+up, down; 70B qkv, o, gate+up, down.
    const struct {
        const char* name;
        int64_t n, k;
    } projections[] = {{"8b.qkv", 6144, 4096},   {"8b.o", 4096, 4096},    {"8b.gate_up", 28672, 4096}, {"8b.down", 4096, 14336},
                       {"70b.qkv", 10240, 8192}, {"70b.o", 8192, 8192},   {"70b.up", 28672, 8192},     {"70b.down", 8192, 28672}};
    std::vector<int64_t> ms = {1, 16, 64, 128, 512, 2048, 8192};
    if (quick) ms = {1, 16, 128, 2048};
    for (const auto& proj : projections) {
        if (quick && std::string(proj.name).rfind("70b", 0) == 0 && std::string(proj.name) != "70b.qkv") continue;
        for (int64_t m : ms) shapes.push_back({proj.name, m, proj.n, proj.k});
    }

    if (!only.empty()) {
        // MxNxK[,MxNxK...]: those shapes alone (profiling, A/Bs)
        shapes.clear();
        try {
            for (const std::vector<int64_t>& dims : bench::parse_shape_list(only, 3, "--only"))
                shapes.push_back({"only", dims[0], dims[1], dims[2]});
        } catch (const std::invalid_argument&) {
            fmt::print(stderr, "--only wants MxNxK[,MxNxK...], got {}\n", only);
            return 2;
        }
    }
    // Arguments are checked above, before the device is touched.
    Runtime rt;
    const DeviceInfo& device = rt.device();
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    check_cublas(cublasSetStream(handle, nullptr), "cublasSetStream");
    fmt::print("device: {} ({}), {} SMs; {} {}, D = A * {}\n", device.name, device.arch(), device.sm_count,
               dtype_name(dtype), gemm_layout_name(layout), layout == GemmLayout::nt ? "B^T (B is N x K)" : "B (K x N)");

    tuning::KernelTimer timer(device);
    nlohmann::json json;
    json["device"] = device.name;
    json["arch"] = device.arch();
    json["dtype"] = dtype_name(dtype);
    json["layout"] = gemm_layout_name(layout);
    fmt::print("{:<11} {:>6} {:>6} {:>6} {:>11} {:>9} {:>11} {:>9} {:>7}  {}\n", "shape", "M", "N", "K", "tileops us",
               "TFLOP/s", "cuBLAS us", "TFLOP/s", "ratio", "config");
    const cudaDataType_t cuda_type = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    for (const Shape& s : shapes) {
        DeviceBuffer a = random_buffer(static_cast<size_t>(s.m * s.k), dtype, 1);
        DeviceBuffer b = random_buffer(static_cast<size_t>(s.n * s.k), dtype, 2);
        DeviceBuffer d(static_cast<size_t>(s.m * s.n) * dtype_size(dtype));
        GemmProblem problem;
        problem.m = s.m, problem.n = s.n, problem.k = s.k, problem.dtype = dtype, problem.layout = layout;
        Gemm op(problem);
        // cuBLAS is column-major: D^T (N x M) = op(B)^T (N x K) * A^T (K x M), every matrix as stored.
        const float alpha = 1.0f, beta = 0.0f;
        const bool nt = layout == GemmLayout::nt;
        // The two sides' runs interleaved: timed one after the other, the first of a shape ran on a
        // GPU left idle by the host's input fill and the second in its wake.
        const auto [ours, theirs] = time_pair_ms(
            [&] { op.run(rt, {a.data(), b.data()}, {d.data()}); },
            [&] {
                check_cublas(cublasGemmEx(handle, nt ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.n),
                                          static_cast<int>(s.m), static_cast<int>(s.k), &alpha, b.data(), cuda_type,
                                          static_cast<int>(nt ? s.k : s.n), a.data(), cuda_type, static_cast<int>(s.k),
                                          &beta, d.data(), cuda_type, static_cast<int>(s.n), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT),
                             "cublasGemmEx");
            },
            timer, repeats);
        const double flop = 2.0 * static_cast<double>(s.m) * s.n * s.k;
        const double ours_tflops = flop / (ours * 1e-3) / 1e12, theirs_tflops = flop / (theirs * 1e-3) / 1e12;
        std::string config = rt.explain(op);
        const auto brace = config.find('{');
        config = brace == std::string::npos ? config : config.substr(brace, config.find('}') - brace + 1);
        fmt::print("{:<11} {:>6} {:>6} {:>6} {:>11.1f} {:>9.1f} {:>11.1f} {:>9.1f} {:>7.2f}  {}\n", s.name, s.m, s.n, s.k,
                   ours * 1e3, ours_tflops, theirs * 1e3, theirs_tflops, theirs / ours, config);
        json["results"].push_back({{"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"tileops_us", ours * 1e3},
                                   {"tileops_tflops", ours_tflops}, {"cublas_us", theirs * 1e3},
                                   {"cublas_tflops", theirs_tflops}, {"ratio_to_cublas", theirs / ours},
                                   {"config", config}});
        if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << '\n';
    }
    cublasDestroy(handle);
    return 0;
}
