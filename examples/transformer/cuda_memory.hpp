// Device memory, pinned host memory and status checks through the CUDA runtime API, as a serving
// program would use them (the library runs on the same primary context).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace transformer {

// Throws std::runtime_error naming `what` and the status when `status` is an error.
void check_cuda(cudaError_t status, const char* what);

// Owned device memory (cudaMalloc); zero bytes hold no allocation.
class DeviceMemory {
public:
    DeviceMemory() = default;
    explicit DeviceMemory(size_t bytes);
    DeviceMemory(DeviceMemory&& other) noexcept;
    DeviceMemory& operator=(DeviceMemory&& other) noexcept;
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    ~DeviceMemory();

    void* data() const noexcept { return data_; }
    template <typename T>
    T* as() const noexcept { return static_cast<T*>(data_); }
    size_t size() const noexcept { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// Owned page-locked host memory (cudaMallocHost): asynchronous copies read it in place.
class PinnedMemory {
public:
    PinnedMemory() = default;
    explicit PinnedMemory(size_t bytes);
    PinnedMemory(PinnedMemory&& other) noexcept;
    PinnedMemory& operator=(PinnedMemory&& other) noexcept;
    PinnedMemory(const PinnedMemory&) = delete;
    PinnedMemory& operator=(const PinnedMemory&) = delete;
    ~PinnedMemory();

    template <typename T>
    T* as() const noexcept { return static_cast<T*>(data_); }
    size_t size() const noexcept { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace transformer
