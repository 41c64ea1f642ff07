// The CUDA driver API, opened at run time.
//
// libcuda is loaded with dlopen instead of being linked, so that the library (and tileops-tune
// warm, and the CPU tests) load and compile kernels on machines that have the CUDA toolkit but no
// GPU driver. Every entry point is resolved once through cuGetProcAddress, which hands out the
// version of each function that matches the headers we were built with.
#pragma once

#include <cuda.h>

#include <string>

namespace tileops::cuda {

// Each entry names the API version whose signature the header declares: cuGetProcAddress hands
// out the newest version at or below it, and a newer one may take other arguments (at 13000
// cuCtxSynchronize takes a context).
#define TILEOPS_DRIVER_FUNCTIONS(X) \
    X(cuInit, CUDA_VERSION)                       \
    X(cuDriverGetVersion, CUDA_VERSION)           \
    X(cuGetErrorName, CUDA_VERSION)               \
    X(cuGetErrorString, CUDA_VERSION)             \
    X(cuDeviceGetCount, CUDA_VERSION)             \
    X(cuDeviceGet, CUDA_VERSION)                  \
    X(cuDeviceGetName, CUDA_VERSION)              \
    X(cuDeviceGetAttribute, CUDA_VERSION)         \
    X(cuDeviceTotalMem, CUDA_VERSION)             \
    X(cuDevicePrimaryCtxRetain, CUDA_VERSION)     \
    X(cuDevicePrimaryCtxRelease, CUDA_VERSION)    \
    X(cuCtxSetCurrent, CUDA_VERSION)              \
    X(cuCtxGetCurrent, CUDA_VERSION)              \
    X(cuCtxGetDevice, 2000)               \
    X(cuCtxSynchronize, 2000)             \
    X(cuModuleLoadData, CUDA_VERSION)             \
    X(cuModuleUnload, CUDA_VERSION)               \
    X(cuModuleGetFunction, CUDA_VERSION)          \
    X(cuFuncSetAttribute, CUDA_VERSION)           \
    X(cuFuncGetAttribute, CUDA_VERSION)           \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUDA_VERSION)           \
    X(cuOccupancyMaxActiveClusters, CUDA_VERSION) \
    X(cuLaunchKernel, CUDA_VERSION)               \
    X(cuLaunchKernelEx, CUDA_VERSION)             \
    X(cuTensorMapEncodeTiled, CUDA_VERSION)       \
    X(cuMemAlloc, CUDA_VERSION)                   \
    X(cuMemFree, CUDA_VERSION)                    \
    X(cuMemcpyHtoD, CUDA_VERSION)                 \
    X(cuMemcpyDtoH, CUDA_VERSION)                 \
    X(cuMemcpyDtoDAsync, CUDA_VERSION)            \
    X(cuMemsetD8, CUDA_VERSION)                   \
    X(cuMemsetD8Async, CUDA_VERSION)              \
    X(cuMemGetAddressRange, CUDA_VERSION)         \
    X(cuPointerGetAttribute, CUDA_VERSION)        \
    X(cuStreamCreate, CUDA_VERSION)               \
    X(cuStreamDestroy, CUDA_VERSION)              \
    X(cuStreamSynchronize, CUDA_VERSION)          \
    X(cuStreamIsCapturing, CUDA_VERSION)          \
    X(cuEventCreate, CUDA_VERSION)                \
    X(cuEventDestroy, CUDA_VERSION)               \
    X(cuEventRecord, CUDA_VERSION)                \
    X(cuEventSynchronize, CUDA_VERSION)           \
    X(cuEventElapsedTime, CUDA_VERSION)           \
    X(cuStreamBeginCapture, CUDA_VERSION)         \
    X(cuStreamEndCapture, CUDA_VERSION)           \
    X(cuGraphInstantiateWithFlags, CUDA_VERSION)         \
    X(cuGraphLaunch, CUDA_VERSION)                \
    X(cuGraphDestroy, CUDA_VERSION)               \
    X(cuGraphExecDestroy, CUDA_VERSION)

// Function pointers of the driver API. Obtain with driver(); members are named like the API.
struct DriverApi {
#define TILEOPS_DECLARE_POINTER(name, version) decltype(&::name) name = nullptr;
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

}  // namespace tileops::cuda

// Checks a driver call: TILEOPS_CU_CHECK(driver().cuMemAlloc(&ptr, bytes));
#define TILEOPS_CU_CHECK(call)                                                                  \
    do {                                                                                        \
        CUresult tileops_status_ = (call);                                                      \
        if (tileops_status_ != CUDA_SUCCESS)                                                    \
            ::tileops::cuda::throw_driver_error(tileops_status_, #call, __FILE__, __LINE__); \
    } while (0)
