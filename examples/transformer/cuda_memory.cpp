#include "cuda_memory.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace transformer {

void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw std::runtime_error(fmt::format("{}: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status)));
}

}  // namespace transformer
