// Helpers shared by the tests: GPU detection, temporary directories, host-side dtype conversion,
// random inputs and error measures.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "tileops/runtime.hpp"
#include "tileops/tensor.hpp"

namespace tileops::test {

// True when a CUDA driver and device are present.
bool have_gpu();

// One runtime (device 0, default caches) for the GPU tests of the whole test program, created on
// first use: kernels compiled for one test are found by the next.
Runtime& shared_runtime();

// GPU tests call this first: SKIP (not pass) where no device is found.
#define TILEOPS_REQUIRE_GPU() \
    if (!::tileops::test::have_gpu()) SKIP("no CUDA device")

// A fresh directory removed (with its contents) on destruction.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

// Sets an environment variable for the lifetime of the object, restoring the old value.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const std::string& value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::string old_;
    bool had_old_;
};

// Which part of a long list of cases this run takes: TILEOPS_TEST_SHARD="i/n" (0 <= i < n) keeps
// the items at positions i, i + n, i + 2n, ...; unset, all of them. The search-space tests
// ([search_space]) shard their configs this way, so that a slow tool (compute-sanitizer racecheck)
// can cover them as n jobs spread over GPUs (tools/gpu_sanitizers.py --shards). A malformed value
// throws std::invalid_argument. `variable` names another variable of the same form
// (TILEOPS_TEST_COMPILE_SHARD: the share of kernels the compile tests compile).
struct Shard {
    size_t index = 0, count = 1;
};
Shard test_shard(const char* variable = "TILEOPS_TEST_SHARD");
template <typename T>
std::vector<T> this_shard(const std::vector<T>& items, const Shard& shard = test_shard()) {
    std::vector<T> kept;
    for (size_t i = shard.index; i < items.size(); i += shard.count) kept.push_back(items[i]);
    return kept;
}

// Host encodings of device dtypes (round to nearest even).
std::vector<uint8_t> encode(DType dtype, const std::vector<double>& values);
std::vector<double> decode(DType dtype, const std::vector<uint8_t>& bytes);
// Values as the dtype stores them (what the kernel actually reads).
std::vector<double> round_to(DType dtype, const std::vector<double>& values);

// Uniform values in [lo, hi), never all zeros; deterministic for a seed.
std::vector<double> random_values(size_t count, uint64_t seed, double lo = -2.0, double hi = 2.0);

// ||out - ref|| / ||ref||, skipping entries where ref is infinite; +inf on any NaN (or an infinity
// ref does not hold there) and when the two differ in size.
double relative_error(const std::vector<double>& out, const std::vector<double>& ref);

// The first `width` values of each of `rows` rows `stride` apart in `stored` (a downloaded
// buffer); `gaps_poisoned` tells whether every value after them up to the next row's start (the
// last row's too) is still NaN, i.e. untouched by the kernel.
std::vector<double> row_prefixes(const std::vector<double>& stored, int64_t rows, int64_t width, int64_t stride,
                                 bool& gaps_poisoned);

// Worst error of a log-sum-exp per row against the reference: relative to max(1, |ref|), and +inf
// where the reference is -inf (a row that saw no key) and the result is not exactly that.
double lse_error(const std::vector<double>& lse, const std::vector<double>& ref);

// The project's tolerances: fp32 1e-5, fp16 1e-3, bf16 1.6e-2 (relative, norm-wise).
double tolerance(DType dtype);

// Per element, what a kernel rounding its fp32 result to `dtype` may differ by from the exact
// value rounded the same way: |out - ref| <= tol (|ref| + rms(ref)) + the smallest subnormal, tol
// the norm-wise tolerance or one unit in the last place at the bottom of a binade, the larger
// (fp8 e4m3: 0.125); rms(ref) counts as 1 where ref is all zeros. Returns the indices that miss it
// (NaN always does).
std::vector<size_t> elements_off(const std::vector<double>& out, const std::vector<double>& ref, DType dtype);

// Two decode batches of `batch` (>= 16) sequences for one launch, seeded: short ones (0-299
// tokens) and in `first` one of `longest` tokens, an empty one and one past the cache (clamped);
// in `second` another sequence is the long one and one length is negative. `capacity` holds what
// each sequence needs in either, clamped to [0, longest]: build the case's cache over it.
struct SkewedBatches {
    std::vector<int> first, second, capacity;
};
SkewedBatches skewed_batches(int batch, int longest, uint32_t seed);

// Runs this test program again in a child process with `args` (e.g. a hidden test's name) and
// the extra environment; returns its exit status.
int run_self(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env);

// A fake device address for the validation tests: 16-byte aligned, `slot` x 64 GB, so that
// check(), which never dereferences it, finds the addresses of different slots apart.
inline void* fake_device_address(int slot) { return reinterpret_cast<void*>(uintptr_t(slot) << 36); }

}  // namespace tileops::test
