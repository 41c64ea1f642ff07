#include "cuda/device.hpp"

#include <fmt/format.h>

#include "cuda/driver.hpp"
#include "tileops/error.hpp"

namespace tileops::cuda {

int device_count() noexcept {
    if (!driver_available()) return 0;
    int count = 0;
    if (driver().cuDeviceGetCount(&count) != CUDA_SUCCESS) return 0;
    return count;
}

bool stream_is_capturing(CUstream stream) noexcept {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return driver().cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

DeviceProperties query_device(int ordinal) {
    const DriverApi& cu = driver();
    int count = 0;
    TILEOPS_CU_CHECK(cu.cuDeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count)
        throw InvalidArgument(fmt::format("tileops: device {} does not exist ({} device(s) visible)", ordinal, count));
    CUdevice device = 0;
    TILEOPS_CU_CHECK(cu.cuDeviceGet(&device, ordinal));
    DeviceProperties props;
    props.ordinal = ordinal;
    char name[256] = {};
    TILEOPS_CU_CHECK(cu.cuDeviceGetName(name, sizeof(name) - 1, device));
    props.name = name;
    auto attribute = [&](CUdevice_attribute which) {
        int value = 0;
        TILEOPS_CU_CHECK(cu.cuDeviceGetAttribute(&value, which, device));
        return value;
    };
    props.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    props.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    props.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    props.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    props.max_shared_memory_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    props.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    TILEOPS_CU_CHECK(cu.cuDeviceTotalMem(&props.total_memory, device));
    TILEOPS_CU_CHECK(cu.cuDriverGetVersion(&props.driver_version));
    return props;
}

PrimaryContext::PrimaryContext(int ordinal) {
    const DriverApi& cu = driver();
    TILEOPS_CU_CHECK(cu.cuDeviceGet(&device_, ordinal));
    TILEOPS_CU_CHECK(cu.cuDevicePrimaryCtxRetain(&context_, device_));
}

PrimaryContext::PrimaryContext(PrimaryContext&& other) noexcept : device_(other.device_), context_(other.context_) {
    other.context_ = nullptr;
}

PrimaryContext::~PrimaryContext() {
    if (context_ != nullptr) driver().cuDevicePrimaryCtxRelease(device_);
}

void PrimaryContext::make_current() const {
    const DriverApi& cu = driver();
    CUcontext current = nullptr;
    TILEOPS_CU_CHECK(cu.cuCtxGetCurrent(&current));
    if (current != context_) TILEOPS_CU_CHECK(cu.cuCtxSetCurrent(context_));
}

Module::Module(const std::string& cubin) { TILEOPS_CU_CHECK(driver().cuModuleLoadData(&module_, cubin.data())); }

Module::Module(Module&& other) noexcept : module_(other.module_) { other.module_ = nullptr; }

Module& Module::operator=(Module&& other) noexcept {
    if (this != &other) {
        if (module_ != nullptr) driver().cuModuleUnload(module_);
        module_ = other.module_;
        other.module_ = nullptr;
    }
    return *this;
}

Module::~Module() {
    if (module_ != nullptr) driver().cuModuleUnload(module_);
}

CUfunction Module::function(const std::string& lowered_name) const {
    CUfunction fn = nullptr;
    CUresult status = driver().cuModuleGetFunction(&fn, module_, lowered_name.c_str());
    if (status != CUDA_SUCCESS)
        throw_driver_error(status, ("cuModuleGetFunction(" + lowered_name + ")").c_str(), __FILE__, __LINE__);
    return fn;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) TILEOPS_CU_CHECK(driver().cuMemAlloc(&ptr_, bytes));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = 0;
    other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_ != 0) driver().cuMemFree(ptr_);
        ptr_ = other.ptr_;
        bytes_ = other.bytes_;
        other.ptr_ = 0;
        other.bytes_ = 0;
    }
    return *this;
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_ != 0) driver().cuMemFree(ptr_);
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
    if (offset > bytes_ || bytes > bytes_ - offset)  // (offset + bytes could wrap around)
        throw InvalidArgument("tileops: DeviceBuffer::upload past the end of the buffer");
    TILEOPS_CU_CHECK(driver().cuMemcpyHtoD(ptr_ + offset, host, bytes));
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
    if (offset > bytes_ || bytes > bytes_ - offset)  // (offset + bytes could wrap around)
        throw InvalidArgument("tileops: DeviceBuffer::download past the end of the buffer");
    TILEOPS_CU_CHECK(driver().cuMemcpyDtoH(host, ptr_ + offset, bytes));
}

void DeviceBuffer::fill_bytes(unsigned char value) { TILEOPS_CU_CHECK(driver().cuMemsetD8(ptr_, value, bytes_)); }

}  // namespace tileops::cuda
