#include "cuda/driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

#include "tileops/error.hpp"
#include "util/log.hpp"

namespace tileops::cuda {
namespace {

struct LoadedDriver {
    DriverApi api;
    std::string failure;  // empty when the driver loaded and cuInit succeeded
};

LoadedDriver load_driver() {
    LoadedDriver loaded;
    void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
        loaded.failure = fmt::format("the CUDA driver library libcuda.so.1 could not be loaded ({}); "
                                     "is an NVIDIA driver installed?", ::dlerror());
        return loaded;
    }
    using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto get_proc = reinterpret_cast<GetProcAddress>(::dlsym(library, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) {
        loaded.failure = "libcuda.so.1 has no cuGetProcAddress_v2: the driver is older than CUDA 12.0";
        return loaded;
    }
    DriverApi& api = loaded.api;
#define TILEOPS_RESOLVE(name, version)                                                                 \
    {                                                                                           \
        void* fn = nullptr;                                                                     \
        CUdriverProcAddressQueryResult found{};                                                 \
        if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || \
            fn == nullptr) {                                                                    \
            loaded.failure = fmt::format("the CUDA driver lacks {} (driver too old for CUDA {}.{})", #name, \
                                         CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10);      \
            return loaded;                                                                      \
        }                                                                                       \
        api.name = reinterpret_cast<decltype(api.name)>(fn);                                    \
    }
    TILEOPS_DRIVER_FUNCTIONS(TILEOPS_RESOLVE)
#undef TILEOPS_RESOLVE
    CUresult status = api.cuInit(0);
    if (status != CUDA_SUCCESS) {
        const char* name = nullptr;
        api.cuGetErrorName(status, &name);
        loaded.failure = fmt::format("cuInit failed with {}: no usable GPU", name ? name : "unknown status");
        return loaded;
    }
    int count = 0;
    if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        loaded.failure = "the CUDA driver reports no devices";
        return loaded;
    }
    int version = 0;
    api.cuDriverGetVersion(&version);
    util::logger().debug("tileops: CUDA driver {}.{} loaded, {} device(s)", version / 1000, (version % 1000) / 10, count);
    return loaded;
}

const LoadedDriver& loaded_driver() {
    static const LoadedDriver loaded = load_driver();
    return loaded;
}

}  // namespace

const DriverApi& driver() {
    const LoadedDriver& loaded = loaded_driver();
    if (!loaded.failure.empty()) throw Unsupported("tileops: " + loaded.failure);
    return loaded.api;
}

bool driver_available() noexcept {
    try {
        return loaded_driver().failure.empty();
    } catch (...) {
        return false;
    }
}

std::string driver_status_name(CUresult status) {
    const LoadedDriver& loaded = loaded_driver();
    const char* name = nullptr;
    if (loaded.api.cuGetErrorName != nullptr && loaded.api.cuGetErrorName(status, &name) == CUDA_SUCCESS && name)
        return name;
    return fmt::format("CUresult {}", static_cast<int>(status));
}

void throw_driver_error(CUresult status, const char* call, const char* file, int line) {
    const LoadedDriver& loaded = loaded_driver();
    std::string name = driver_status_name(status);
    const char* text = nullptr;
    if (loaded.api.cuGetErrorString != nullptr) loaded.api.cuGetErrorString(status, &text);
    throw DriverError(static_cast<int>(status), name,
                      fmt::format("tileops: {} failed with {} ({}) at {}:{}", call, name, text ? text : "no description",
                                  file, line));
}

}  // namespace tileops::cuda
