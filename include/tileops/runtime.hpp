// The runtime: one GPU, its kernel cache (memory, then disk) and the tuning databases.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tileops/device_info.hpp"
#include "tileops/export.hpp"

namespace tileops {

class Op;
namespace detail {
class RuntimeImpl;
}

struct RuntimeOptions {
    int device = 0;
    // Kernel cache directory; empty: TILEOPS_CACHE_DIR, else $XDG_CACHE_HOME/tileops_jit/kernels,
    // else ~/.cache/tileops_jit/kernels, else (no home) $TMPDIR/tileops_jit-<uid>/kernels (0700, this
    // user's alone, or refused).
    std::string cache_dir;
    // Size bound of the disk cache in MB; 0: TILEOPS_CACHE_MAX_MB (0 there: unbounded), else 2048.
    uint64_t cache_max_mb = 0;
    // When false a kernel missing from the caches is an error (tileops::CacheMiss) instead of
    // being compiled; deployments that must never compile on the request path set this, or
    // TILEOPS_JIT=off (TILEOPS_NO_COMPILE=1 too). TILEOPS_JIT=warn compiles but logs each missed
    // kernel once and appends it to a manifest (TILEOPS_JIT_MANIFEST, by default
    // missed-kernels.jsonl in the cache directory) for `tileops-tune warm --manifest`.
    bool allow_compile = true;
    // Tuning databases searched before the shipped one; empty: TILEOPS_TUNING_DB (':'-separated).
    std::vector<std::string> tuning_dbs;
    // A fleet bundle (`tileops-tune pack`) served read-only: its kernels before the disk cache,
    // its databases after tuning_dbs and before the shipped ones; empty: TILEOPS_BUNDLE, if set.
    std::string bundle;
    // Opt-in: a run whose chosen kernel would have to be compiled first runs, until that compile
    // (started on a background thread) has finished, with a stand-in config of the same op kind
    // whose kernels are already at hand (the heuristic's, or a config another op of that kind ran
    // with here); later runs take the chosen kernel. When no stand-in is at hand a GEMM compiles a
    // quick one (128 x 128 tiles) while the chosen kernel compiles on another core; other ops
    // compile as usual. A stream that is capturing a graph never records a stand-in: the run waits for
    // the chosen kernel. prepare() always waits. false: TILEOPS_BACKGROUND_COMPILE=1 turns it on.
    bool background_compile = false;
};

struct RuntimeStats {
    uint64_t kernels_compiled = 0;   // NVRTC compilations done by this runtime
    uint64_t disk_cache_hits = 0;    // kernels loaded from the disk cache
    uint64_t bundle_hits = 0;        // kernels loaded from the fleet bundle
    uint64_t memory_cache_hits = 0;  // kernels found already loaded when an op first ran here
    uint64_t background_compiles = 0;  // chosen kernels compiled in the background (background_compile)
    uint64_t standin_runs = 0;         // runs served by a stand-in config meanwhile
};

class TILEOPS_EXPORT Runtime {
public:
    Runtime();
    explicit Runtime(const RuntimeOptions& options);
    ~Runtime();
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    const DeviceInfo& device() const;
    RuntimeStats stats() const;

    // Which config `op` runs with on this runtime, where it came from (memory, a user database,
    // the shipped database, the nearest tuned shape and its distance, or the heuristic) and why.
    std::string explain(const Op& op);

    // Blocks until every kernel `op` may launch is compiled and loaded (so the first run() does
    // no compile work).
    void prepare(const Op& op);
    // The same for several ops at once: the kernels of all of them compile together on all cores,
    // so a model's layer is ready about when its slowest few kernels are, not after the sum of
    // its ops' compiles. Throws the first failure once every kernel was tried.
    void prepare(const std::vector<const Op*>& ops);

    detail::RuntimeImpl& impl() noexcept { return *impl_; }

private:
    std::unique_ptr<detail::RuntimeImpl> impl_;
};

}  // namespace tileops
