// The zero-JIT serving contract: whether a kernel missing from the cache may be compiled on the
// request path, and a manifest of the kernels that were, so that a deployment can warm exactly
// those (`tileops-tune warm --manifest FILE`) and then serve with compiling off.
#pragma once

#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace tileops::jit {

enum class JitMode {
    on,    // compile what the cache lacks
    warn,  // compile it, and log each missed kernel once and append it to the manifest
    off,   // a kernel the cache lacks is a tileops::CacheMiss
};

struct JitPolicy {
    JitMode mode = JitMode::on;
    std::filesystem::path manifest;  // warn: where missed kernels are recorded
};

// TILEOPS_JIT (on, warn or off; unset or empty: on), where TILEOPS_NO_COMPILE=1 or
// allow_compile == false mean off. TILEOPS_JIT_MANIFEST names warn's manifest; by default
// missed-kernels.jsonl in the cache directory. Throws InvalidArgument for another TILEOPS_JIT
// value, or one that contradicts TILEOPS_NO_COMPILE.
JitPolicy jit_policy(const std::filesystem::path& cache_dir, bool allow_compile);

// A kernel as the manifest names it: enough to compile it again.
struct MissedKernel {
    std::string template_file;    // e.g. "rows/rmsnorm.cuh"
    std::string name_expression;  // e.g. "tileops::rmsnorm_kernel<...>"
    std::string arch;             // e.g. "sm_90a"
    bool operator<(const MissedKernel& o) const;
};

// One manifest line (a JSON object with "template", "kernel" and "arch").
std::string manifest_line(const MissedKernel& kernel);

// Appends `kernel` to the manifest at `path` (one line, written with O_APPEND in one write, so
// processes sharing a manifest do not interleave lines). Throws FileError naming the path.
void append_to_manifest(const std::filesystem::path& path, const MissedKernel& kernel);

// The kernels of a manifest, duplicates removed. A line that is not a kernel (malformed JSON,
// missing or mistyped fields, a template this library does not have, an unreasonable name) goes
// into `rejected` as "line N: why" (the first 100 of them; then one report counts the rest);
// blank lines are skipped. Throws FileError when the file cannot be read (not a regular file,
// larger than the read bound).
std::vector<MissedKernel> read_manifest(const std::filesystem::path& path, std::vector<std::string>& rejected);

// Per builder: which missed kernels were already logged and recorded.
class MissRecorder {
public:
    // True the first time `kernel` is seen.
    bool first_time(const MissedKernel& kernel);

private:
    std::mutex mutex_;
    std::set<MissedKernel> seen_;
};

}  // namespace tileops::jit
