#include "cuda_memory.hpp"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace transformer {

void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw std::runtime_error(fmt::format("{}: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status)));
}

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check_cuda(cudaMalloc(&data_, bytes), fmt::format("cudaMalloc of {} bytes", bytes).c_str());
}
DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
}
DeviceMemory::~DeviceMemory() {
    if (data_ != nullptr) cudaFree(data_);
}

PinnedMemory::PinnedMemory(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check_cuda(cudaMallocHost(&data_, bytes), fmt::format("cudaMallocHost of {} bytes", bytes).c_str());
}
PinnedMemory::PinnedMemory(PinnedMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedMemory& PinnedMemory::operator=(PinnedMemory&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
}
PinnedMemory::~PinnedMemory() {
    if (data_ != nullptr) cudaFreeHost(data_);
}

}  // namespace transformer
