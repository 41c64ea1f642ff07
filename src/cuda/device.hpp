// Devices, their primary contexts and move-only RAII handles for driver objects.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

#include "tileops/device_info.hpp"

namespace tileops::cuda {

using DeviceProperties = DeviceInfo;

// Number of visible devices; 0 when no driver or device is present (never throws).
int device_count() noexcept;

// Whether work enqueued on `stream` would be recorded into a graph (a stream under capture, or
// the legacy stream while another stream captures in global mode); true when the driver cannot
// tell.
bool stream_is_capturing(CUstream stream) noexcept;

DeviceProperties query_device(int ordinal);

// Retains a device's primary context for its lifetime (shared with the CUDA runtime API, so
// pointers from cudaMalloc and streams from cudaStreamCreate work with it).
class PrimaryContext {
public:
    explicit PrimaryContext(int ordinal);
    PrimaryContext(PrimaryContext&& other) noexcept;
    PrimaryContext& operator=(PrimaryContext&&) = delete;
    PrimaryContext(const PrimaryContext&) = delete;
    PrimaryContext& operator=(const PrimaryContext&) = delete;
    ~PrimaryContext();

    CUcontext get() const noexcept { return context_; }
    // Makes this context current on the calling thread (cheap when it already is).
    void make_current() const;

private:
    CUdevice device_ = 0;
    CUcontext context_ = nullptr;
};

// A loaded module; unloaded on destruction.
class Module {
public:
    Module() = default;
    explicit Module(const std::string& cubin);
    Module(Module&& other) noexcept;
    Module& operator=(Module&& other) noexcept;
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;
    ~Module();

    CUmodule get() const noexcept { return module_; }
    CUfunction function(const std::string& lowered_name) const;

private:
    CUmodule module_ = nullptr;
};

// Device memory owned by the object (for tests, benchmarks and the autotuner; ops never allocate).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer();

    CUdeviceptr get() const noexcept { return ptr_; }
    void* data() const noexcept { return reinterpret_cast<void*>(ptr_); }
    size_t size() const noexcept { return bytes_; }

    void upload(const void* host, size_t bytes, size_t offset = 0);
    void download(void* host, size_t bytes, size_t offset = 0) const;
    void fill_bytes(unsigned char value);

private:
    CUdeviceptr ptr_ = 0;
    size_t bytes_ = 0;
};

}  // namespace tileops::cuda
