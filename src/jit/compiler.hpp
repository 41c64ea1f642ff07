// NVRTC: compiles a rendered translation unit to a cubin for a given arch, with or without a GPU.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tileops::jit {

struct CompileRequest {
    std::string source;       // the translation unit (includes templates and instantiates nothing itself)
    std::string source_name;  // shown in diagnostics, e.g. "rmsnorm.cu"
    std::vector<std::pair<std::string, std::string>> headers;  // in-memory headers: (include name, content)
    std::vector<std::string> name_expressions;                 // kernels to instantiate, e.g. "tileops::k<1, 2>"
    std::string arch;                                          // "sm_80", "sm_90a", ...
    // Options beyond base_compile_options. The kernel cache's key holds only the base options and
    // KernelBuilder never sets these: a caller that caches what it compiles with them must key them.
    std::vector<std::string> extra_options;
};

struct CompileResult {
    std::string cubin;
    std::map<std::string, std::string> lowered_names;  // name expression -> mangled symbol
    std::string log;                                   // warnings, if any
    double milliseconds = 0;
};

// The options every compilation gets (besides include paths, which are not part of cache keys:
// the cache key holds content only, so a cache is valid on another machine with the same NVRTC).
std::vector<std::string> base_compile_options(const std::string& arch);

// Compiles; thread-safe (each call owns its NVRTC program), so candidates compile in parallel.
// Throws CompileError carrying the NVRTC log and the options when compilation fails.
CompileResult compile(const CompileRequest& request);

// "13.0" — part of every cache key and tuning entry.
std::string nvrtc_version();

// Include directories holding the CUDA headers the templates need (cuda_fp16.h, ...). Searched in
// CUDA_HOME, CUDA_PATH, the toolkit the library was built with, /usr/local/cuda. Throws
// Unsupported listing every place it looked when none has them.
const std::vector<std::string>& cuda_include_dirs();

// Throws Unsupported when `arch` is not something NVRTC accepts (lists what it accepts).
void check_arch_supported(const std::string& arch);

}  // namespace tileops::jit
