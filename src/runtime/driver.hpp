// The CUDA driver API, opened at run time.
//
// libcuda is loaded with dlopen instead of being linked, so that the library (and tileops-tune
// warm, and the CPU tests) load and compile kernels on machines that have the CUDA toolkit but no
// GPU driver. Every entry point is resolved once through cuGetProcAddress, which hands out the
// version of each function that matches the headers we were built with.
#pragma once

#include <cuda.h>

#include <string>

namespace tileops::runtime {

#define TILEOPS_DRIVER_FUNCTIONS(X) \
    X(cuInit)                       \
    X(cuDriverGetVersion)           \
    X(cuGetErrorName)               \
    X(cuGetErrorString)             \
    X(cuDeviceGetCount)             \
    X(cuDeviceGet)                  \
    X(cuDeviceGetName)              \
    X(cuDeviceGetAttribute)         \
    X(cuDeviceTotalMem)             \
    X(cuDevicePrimaryCtxRetain)     \
    X(cuDevicePrimaryCtxRelease)    \
    X(cuCtxSetCurrent)              \
    X(cuCtxGetCurrent)              \
    X(cuCtxSynchronize)             \
    X(cuModuleLoadData)             \
    X(cuModuleUnload)               \
    X(cuModuleGetFunction)          \
    X(cuFuncSetAttribute)           \
    X(cuFuncGetAttribute)           \
    X(cuLaunchKernel)               \
    X(cuLaunchKernelEx)             \
    X(cuMemAlloc)                   \
    X(cuMemFree)                    \
    X(cuMemcpyHtoD)                 \
    X(cuMemcpyDtoH)                 \
    X(cuMemcpyDtoDAsync)            \
    X(cuMemsetD8)                   \
    X(cuMemsetD8Async)              \
    X(cuMemGetAddressRange)         \
    X(cuPointerGetAttribute)        \
    X(cuStreamCreate)               \
    X(cuStreamDestroy)              \
    X(cuStreamSynchronize)          \
    X(cuEventCreate)                \
    X(cuEventDestroy)               \
    X(cuEventRecord)                \
    X(cuEventSynchronize)           \
    X(cuEventElapsedTime)           \
    X(cuStreamBeginCapture)         \
    X(cuStreamEndCapture)           \
    X(cuGraphInstantiateWithFlags)         \
    X(cuGraphLaunch)                \
    X(cuGraphDestroy)               \
    X(cuGraphExecDestroy)

// Function pointers of the driver API. Obtain with driver(); members are named like the API.
struct DriverApi {
#define TILEOPS_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
    TILEOPS_DRIVER_FUNCTIONS(TILEOPS_DECLARE_POINTER)
#undef TILEOPS_DECLARE_POINTER
};

// Loads libcuda and calls cuInit once. Throws Unsupported when no driver or no device is present,
// naming the library it looked for and the status.
const DriverApi& driver();

// True when a driver is installed and at least one device is visible. Never throws.
bool driver_available() noexcept;

// "CUDA_ERROR_OUT_OF_MEMORY" for a status; works without a driver too (then the number).
std::string driver_status_name(CUresult status);

// Throws DriverError with the call text, the status name and string, and file:line.
[[noreturn]] void throw_driver_error(CUresult status, const char* call, const char* file, int line);

}  // namespace tileops::runtime

// Checks a driver call: TILEOPS_CU_CHECK(driver().cuMemAlloc(&ptr, bytes));
#define TILEOPS_CU_CHECK(call)                                                                  \
    do {                                                                                        \
        CUresult tileops_status_ = (call);                                                      \
        if (tileops_status_ != CUDA_SUCCESS)                                                    \
            ::tileops::runtime::throw_driver_error(tileops_status_, #call, __FILE__, __LINE__); \
    } while (0)
