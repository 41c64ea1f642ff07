#include "jit/compiler.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/error.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"

namespace tileops::jit {
namespace fs = std::filesystem;

namespace {

#define TILEOPS_NVRTC_CHECK(call)                                                                      \
    do {                                                                                               \
        nvrtcResult tileops_result_ = (call);                                                          \
        if (tileops_result_ != NVRTC_SUCCESS)                                                          \
            throw CompileError(fmt::format("tileops: {} failed with {} at {}:{}", #call,              \
                                           nvrtcGetErrorString(tileops_result_), __FILE__, __LINE__), \
                               "");                                                                    \
    } while (0)

struct ProgramDeleter {
    void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using ProgramHandle = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string program_log(nvrtcProgram program) {
    size_t size = 0;
    if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    log.resize(size - 1);
    return log;
}

std::vector<std::string> search_include_dirs() {
    std::vector<std::string> roots;
    for (const char* variable : {"CUDA_HOME", "CUDA_PATH"})
        if (auto value = util::env(variable)) roots.push_back(*value);
#ifdef TILEOPS_BUILD_CUDA_HOME
    roots.emplace_back(TILEOPS_BUILD_CUDA_HOME);
#endif
    roots.emplace_back("/usr/local/cuda");
    std::vector<std::string> searched;
    for (const std::string& root : roots) {
        // Some toolkits keep headers under targets/<triple>/include; include/ is usually a link.
        for (const fs::path& include : {fs::path(root) / "include", fs::path(root) / "targets/x86_64-linux/include",
                                       fs::path(root) / "targets/sbsa-linux/include"}) {
            searched.push_back(include.string());
            std::error_code ec;
            if (fs::exists(include / "cuda_fp16.h", ec)) {
                std::vector<std::string> dirs{include.string()};
                if (fs::exists(include / "cccl", ec)) dirs.push_back((include / "cccl").string());
                util::logger().debug("tileops: CUDA headers found in {}", include.string());
                return dirs;
            }
        }
    }
    throw Unsupported(fmt::format("tileops: the CUDA headers (cuda_fp16.h) were not found; searched {}. "
                                  "Set CUDA_HOME to the CUDA toolkit.",
                                  fmt::join(searched, ", ")));
}

}  // namespace

const std::vector<std::string>& cuda_include_dirs() {
    static const std::vector<std::string> dirs = search_include_dirs();
    return dirs;
}

std::string nvrtc_version() {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    return fmt::format("{}.{}", major, minor);
}

void check_arch_supported(const std::string& arch) {
    int count = 0;
    TILEOPS_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&count));
    std::vector<int> archs(static_cast<size_t>(count));
    TILEOPS_NVRTC_CHECK(nvrtcGetSupportedArchs(archs.data()));
    std::string digits = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : "";
    while (!digits.empty() && !std::isdigit(static_cast<unsigned char>(digits.back()))) digits.pop_back();
    int number = 0;
    try {
        number = digits.empty() ? -1 : std::stoi(digits);
    } catch (...) {
        number = -1;
    }
    if (std::find(archs.begin(), archs.end(), number) == archs.end())
        throw Unsupported(fmt::format("tileops: arch '{}' is not supported by NVRTC {} (supported: sm_{})", arch,
                                      nvrtc_version(), fmt::join(archs, ", sm_")));
}

std::vector<std::string> base_compile_options(const std::string& arch) {
    std::vector<std::string> options = {"--std=c++17", "--gpu-architecture=" + arch, "--device-as-default-execution-space",
                                        "-DNDEBUG"};
    // Source lines for compute-sanitizer and ncu reports. Part of the options, so of the cache key.
    if (util::env_switch("TILEOPS_KERNEL_LINEINFO")) options.push_back("-lineinfo");
    return options;
}

CompileResult compile(const CompileRequest& request) {
    auto start = std::chrono::steady_clock::now();
    std::vector<const char*> header_sources, header_names;
    for (const auto& [name, content] : request.headers) {
        header_names.push_back(name.c_str());
        header_sources.push_back(content.c_str());
    }
    nvrtcProgram raw = nullptr;
    TILEOPS_NVRTC_CHECK(nvrtcCreateProgram(&raw, request.source.c_str(), request.source_name.c_str(),
                                           static_cast<int>(header_sources.size()), header_sources.data(),
                                           header_names.data()));
    ProgramHandle program(raw);
    for (const std::string& expression : request.name_expressions)
        TILEOPS_NVRTC_CHECK(nvrtcAddNameExpression(raw, expression.c_str()));

    std::vector<std::string> options = base_compile_options(request.arch);
    options.insert(options.end(), request.extra_options.begin(), request.extra_options.end());
    for (const std::string& dir : cuda_include_dirs()) options.push_back("-I" + dir);
    std::vector<const char*> option_pointers;
    for (const std::string& option : options) option_pointers.push_back(option.c_str());

    nvrtcResult result = nvrtcCompileProgram(raw, static_cast<int>(option_pointers.size()), option_pointers.data());
    std::string log = program_log(raw);
    if (result != NVRTC_SUCCESS) {
        throw CompileError(fmt::format("tileops: NVRTC failed to compile {} for {} ({}) with options [{}]; "
                                       "kernels: {}\n{}",
                                       request.source_name, request.arch, nvrtcGetErrorString(result),
                                       fmt::join(options, " "), fmt::join(request.name_expressions, ", "), log),
                           log);
    }
    CompileResult compiled;
    compiled.log = std::move(log);
    for (const std::string& expression : request.name_expressions) {
        const char* lowered = nullptr;
        TILEOPS_NVRTC_CHECK(nvrtcGetLoweredName(raw, expression.c_str(), &lowered));
        compiled.lowered_names[expression] = lowered;
    }
    size_t size = 0;
    TILEOPS_NVRTC_CHECK(nvrtcGetCUBINSize(raw, &size));
    compiled.cubin.resize(size);
    TILEOPS_NVRTC_CHECK(nvrtcGetCUBIN(raw, compiled.cubin.data()));
    compiled.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return compiled;
}

}  // namespace tileops::jit
