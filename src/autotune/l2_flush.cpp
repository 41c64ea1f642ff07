#include "autotune/l2_flush.hpp"

#include "cuda/driver.hpp"
#include "jit/compiler.hpp"

namespace tileops::tuning {
namespace {

// Reads 16 bytes per step and writes nothing (the sum is stored only if it equals a value it
// cannot take, so the loads are not optimized away).
constexpr const char* kFlushSource = R"(
extern "C" __global__ void read_to_flush_l2(const int4* data, unsigned long long n, int* sink) {
    int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const int4 v = data[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff && sink != nullptr) *sink = acc;
}
)";

}  // namespace

L2Flusher::L2Flusher(const std::string& arch) {
    jit::CompileRequest request;
    request.source = kFlushSource;
    request.source_name = "read_to_flush_l2.cu";
    request.name_expressions = {"read_to_flush_l2"};
    request.arch = arch;
    const jit::CompileResult result = jit::compile(request);
    module_ = cuda::Module(result.cubin);
    function_ = module_.function(result.lowered_names.at("read_to_flush_l2"));
}

void L2Flusher::flush(const cuda::DeviceBuffer& buffer, CUstream stream) const {
    CUdeviceptr data = buffer.get();
    unsigned long long n = buffer.size() / 16;
    void* sink = nullptr;
    void* args[] = {&data, &n, &sink};
    TILEOPS_CU_CHECK(cuda::driver().cuLaunchKernel(function_, 1024, 1, 1, 512, 1, 1, 0, stream, args, nullptr));
}

}  // namespace tileops::tuning
