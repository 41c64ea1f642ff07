// The runtime on a GPU: a fresh process starts warm from the disk cache, the hot path allocates
// nothing and is safe in CUDA graph capture, no-compile mode, explain().
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cuda/driver.hpp"
#include "jit/bundle.hpp"
#include "jit/disk_cache.hpp"
#include "support/allocation_counter.hpp"
#include "support/device_tensor.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {

// Runs one RmsNorm on `runtime`; whether it wrote every output element.
bool rmsnorm_writes_all(Runtime& runtime) {
    const int64_t rows = 64, cols = 1000;
    RmsNorm op({rows, cols, DType::bf16});
    test::DeviceMatrix x(DType::bf16, rows, cols), w(DType::bf16, 1, cols), y(DType::bf16, rows, cols);
    x.upload(test::random_values(rows * cols, 1));
    w.upload(test::random_values(cols, 2));
    op.run(runtime, {x.data(), w.data()}, {y.data()});
    bool all_written = true;
    for (double v : y.download()) all_written &= std::isfinite(v);
    return all_written;
}

// Runs one RmsNorm in this process and returns the runtime's statistics.
RuntimeStats run_rmsnorm_once(const std::string& cache_dir) {
    RuntimeOptions options;
    options.cache_dir = cache_dir;
    Runtime runtime(options);
    if (!rmsnorm_writes_all(runtime)) throw std::runtime_error("rmsnorm left an element unwritten");
    return runtime.stats();
}

}  // namespace

// Run by the test below in a child process: writes "compiled disk_hits" to TILEOPS_TEST_STATS.
TEST_CASE("child: run an op with the cache directory it is given", "[.child_cache]") {
    const char* stats_file = std::getenv("TILEOPS_TEST_STATS");
    const char* cache_dir = std::getenv("TILEOPS_TEST_CACHE");
    if (stats_file == nullptr || cache_dir == nullptr) SKIP("only run as a child of the disk cache test");
    RuntimeStats stats = run_rmsnorm_once(cache_dir);
    std::ofstream(stats_file) << stats.kernels_compiled << ' ' << stats.disk_cache_hits << '\n';
}

TEST_CASE("a second process loads kernels from the disk cache without compiling", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    test::TempDir dir;
    auto run_child = [&](const std::string& name) {
        const std::string stats = (dir.path() / name).string();
        int status = test::run_self({"[.child_cache]"}, {{"TILEOPS_TEST_STATS", stats},
                                                         {"TILEOPS_TEST_CACHE", (dir.path() / "cache").string()}});
        REQUIRE(status == 0);
        uint64_t compiled = 0, hits = 0;
        std::ifstream(stats) >> compiled >> hits;
        return std::pair{compiled, hits};
    };
    auto [compiled_first, hits_first] = run_child("first");
    CHECK(compiled_first >= 1);
    CHECK(hits_first == 0);
    auto [compiled_second, hits_second] = run_child("second");
    CHECK(compiled_second == 0);
    CHECK(hits_second >= 1);
}

TEST_CASE("no-compile mode turns a cache miss into CacheMiss", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    test::TempDir dir;
    RuntimeOptions options;
    options.cache_dir = dir.path().string();
    options.allow_compile = false;
    Runtime runtime(options);  // makes the context current
    Softmax op({4, 96, DType::fp16});
    test::DeviceMatrix x(DType::fp16, 4, 96), y(DType::fp16, 4, 96);
    CHECK_THROWS_AS(op.run(runtime, {x.data()}, {y.data()}), CacheMiss);
}

TEST_CASE("a runtime serves a fleet bundle's kernels with compiling off and an empty cache", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    test::TempDir dir;
    // The kernels one process compiled, shipped as a bundle (what `tileops-tune pack` writes).
    const RuntimeStats built = run_rmsnorm_once((dir.path() / "build").string());
    REQUIRE(built.kernels_compiled >= 1);
    jit::DiskCache build_cache(dir.path() / "build");
    jit::BundleContents contents;
    contents.nvrtc_version = "any";
    contents.archs = {test::shared_runtime().device().arch()};
    for (const jit::DiskCacheEntry& entry : build_cache.entries())
        contents.kernels.push_back({entry.key, contents.archs[0], build_cache.load(entry.key).value()});
    const std::filesystem::path bundle = dir.path() / "fleet.bundle";
    jit::write_bundle(bundle, contents);

    RuntimeOptions options;
    options.cache_dir = (dir.path() / "serving").string();
    options.allow_compile = false;
    options.bundle = bundle.string();
    Runtime runtime(options);
    CHECK(rmsnorm_writes_all(runtime));
    CHECK(runtime.stats().bundle_hits >= 1);
    CHECK(runtime.stats().kernels_compiled == 0);
    CHECK(jit::DiskCache(dir.path() / "serving").entries().empty());
}

TEST_CASE("a cache hit allocates nothing on the heap and works under graph capture", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    Runtime runtime;
    const int64_t rows = 256, cols = 4096;
    Elementwise op({ElementwiseOp::silu_mul, rows, cols, DType::bf16});
    test::DeviceMatrix a(DType::bf16, rows, cols), b(DType::bf16, rows, cols), y(DType::bf16, rows, cols);
    a.upload(test::random_values(rows * cols, 3));
    b.upload(test::random_values(rows * cols, 4));
    op.run(runtime, {a.data(), b.data()}, {y.data()});  // compiles or loads
    {
        test::AllocationCounter counter;
        for (int i = 0; i < 100; ++i) op.run(runtime, {a.data(), b.data()}, {y.data()});
        CHECK(counter.count() == 0);
    }
    const auto& cu = cuda::driver();
    CUstream stream = nullptr;
    TILEOPS_CU_CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    y = test::DeviceMatrix(DType::bf16, rows, cols);  // poisoned again
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    TILEOPS_CU_CHECK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    op.run(runtime, {a.data(), b.data()}, {y.data()}, stream);
    TILEOPS_CU_CHECK(cu.cuStreamEndCapture(stream, &graph));
    TILEOPS_CU_CHECK(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
    TILEOPS_CU_CHECK(cu.cuGraphLaunch(exec, stream));
    TILEOPS_CU_CHECK(cu.cuStreamSynchronize(stream));
    auto out = y.download();
    bool all_written = true;
    for (double v : out) all_written &= std::isfinite(v);
    CHECK(all_written);
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
    cu.cuStreamDestroy(stream);
}

TEST_CASE("explain names the config and where it came from", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    Runtime runtime;
    RmsNorm op({8192, 4096, DType::bf16});
    const std::string text = runtime.explain(op);
    CHECK_THAT(text, ContainsSubstring("rmsnorm 8192x4096 bf16"));
    CHECK_THAT(text, ContainsSubstring("threads_per_row="));
    CHECK_THAT(text, ContainsSubstring(runtime.device().arch()));
}
