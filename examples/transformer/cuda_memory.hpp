// Device memory, pinned host memory and status checks through the CUDA runtime API, as a serving
// program would use them (the library runs on the same primary context).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

namespace transformer {

// Throws std::runtime_error naming `what` and the status when `status` is an error.
void check_cuda(cudaError_t status, const char* what);

// Memory owned by the object, from the allocator Alloc (freed by Free); zero bytes hold none.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaMemory {
public:
    CudaMemory() = default;
    explicit CudaMemory(size_t bytes) : bytes_(bytes) {
        if (bytes > 0) check_cuda(Alloc(&data_, bytes), ("allocating " + std::to_string(bytes) + " bytes").c_str());
    }
    CudaMemory(CudaMemory&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    CudaMemory& operator=(CudaMemory&& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(bytes_, other.bytes_);
        return *this;
    }
    CudaMemory(const CudaMemory&) = delete;
    CudaMemory& operator=(const CudaMemory&) = delete;
    ~CudaMemory() {
        if (data_ != nullptr) Free(data_);
    }

    void* data() const noexcept { return data_; }
    template <typename T>
    T* as() const noexcept { return static_cast<T*>(data_); }
    size_t size() const noexcept { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

namespace detail {
inline cudaError_t device_alloc(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
inline cudaError_t pinned_alloc(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
}  // namespace detail

// Device memory (cudaMalloc).
using DeviceMemory = CudaMemory<detail::device_alloc, cudaFree>;
// Page-locked host memory (cudaMallocHost): asynchronous copies read it in place.
using PinnedMemory = CudaMemory<detail::pinned_alloc, cudaFreeHost>;

}  // namespace transformer
