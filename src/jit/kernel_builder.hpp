// "Build a kernel", kept apart from "find a kernel": turns (template, name expression, arch) into
// a cubin through the disk cache, compiling with NVRTC on a miss. Needs no GPU, so tileops-tune
// warm can fill a cache for a fleet on a CPU-only machine.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

#include <memory>
#include <optional>

#include "jit/bundle.hpp"
#include "jit/disk_cache.hpp"
#include "jit/missed_kernels.hpp"

namespace tileops::jit {

struct KernelBinary {
    std::string cubin;
    std::string lowered_name;  // the kernel's symbol in the cubin
    bool compiled = false;     // true when this call ran NVRTC (a miss), false for a disk hit
};

// Everything a cubin's validity depends on, and nothing else (no paths).
struct KernelKeyInputs {
    std::string translation_unit;  // the rendered source
    std::string template_hash;     // the template's content hash, with its shared headers
    std::string name_expression;
    std::string options;           // the compile options that shape the code
    std::string nvrtc_version;
    std::string arch;
};

// The disk cache key (hex SHA-256) of a kernel.
std::string kernel_cache_key(const KernelKeyInputs& inputs);

class KernelBuilder {
public:
    // allow_compile == false turns a miss into tileops::CacheMiss (JitMode::off), true compiles it.
    KernelBuilder(const std::filesystem::path& cache_dir, uint64_t max_bytes, bool allow_compile);
    // What a miss does: compile, compile and record it in the policy's manifest, or CacheMiss.
    KernelBuilder(const std::filesystem::path& cache_dir, uint64_t max_bytes, JitPolicy policy);

    // The cache key of a kernel of the current templates and NVRTC.
    std::string cache_key(const std::string& template_file, const std::string& name_expression,
                          const std::string& arch) const;

    // Serves kernels from a fleet bundle first (read-only; its kernels compiled against other
    // CUDA headers than those found here are passed over). Set before the first get().
    void serve_from(std::shared_ptr<const Bundle> bundle) { bundle_ = std::move(bundle); }

    // Thread-safe; concurrent requests for one key compile once (in this process and across
    // processes sharing the cache directory).
    KernelBinary get(const std::string& template_file, const std::string& name_expression, const std::string& arch);

    // The kernel from the bundle or the disk cache, without compiling (nullopt: get() would
    // compile it). Thread-safe.
    std::optional<KernelBinary> find(const std::string& template_file, const std::string& name_expression,
                                     const std::string& arch);

    uint64_t compiled_count() const noexcept { return compiled_.load(); }
    uint64_t disk_hit_count() const noexcept { return disk_hits_.load(); }
    uint64_t bundle_hit_count() const noexcept { return bundle_hits_.load(); }
    DiskCache& cache() noexcept { return cache_; }
    bool allow_compile() const noexcept { return policy_.mode != JitMode::off; }
    const JitPolicy& policy() const noexcept { return policy_; }

private:
    std::optional<KernelBinary> from_bundle(const std::string& key, const std::string& name_expression,
                                            const std::string& arch);
    // Logs and records a kernel compiled on a miss (JitMode::warn), once per builder.
    void record_miss(const MissedKernel& kernel);

    DiskCache cache_;
    JitPolicy policy_;
    MissRecorder misses_;
    std::atomic<uint64_t> compiled_{0};
    std::atomic<uint64_t> disk_hits_{0};
    std::atomic<uint64_t> bundle_hits_{0};
    std::shared_ptr<const Bundle> bundle_;
};

}  // namespace tileops::jit
