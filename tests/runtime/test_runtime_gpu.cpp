// The runtime on a GPU: a fresh process starts warm from the disk cache, prepare() of many ops,
// the hot path allocates nothing and is safe in CUDA graph capture, no-compile mode, explain(),
// background compiling.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cuda/driver.hpp"
#include "jit/bundle.hpp"
#include "jit/disk_cache.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/allocation_counter.hpp"
#include "support/device_tensor.hpp"
#include "support/row_reference.hpp"
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

TEST_CASE("prepare of several ops compiles all their kernels at once; their runs compile nothing", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    test::TempDir dir;
    const int64_t rows = 64, cols = 1000, vocab = 50257;
    RmsNorm norm({rows, cols, DType::bf16}), same_norm({rows, cols, DType::bf16});
    Softmax softmax({8, vocab, DType::fp32});
    auto runtime_on = [&](const char* cache) {
        RuntimeOptions options;
        options.cache_dir = (dir.path() / cache).string();
        return std::make_unique<Runtime>(options);
    };
    // One op at a time, on a cache of its own: the kernels the three ops need.
    auto one_by_one = runtime_on("one-by-one");
    for (const Op* op : {static_cast<const Op*>(&norm), static_cast<const Op*>(&softmax)}) one_by_one->prepare(*op);
    const uint64_t needed = one_by_one->stats().kernels_compiled;
    REQUIRE(needed >= 2);

    auto runtime = runtime_on("together");
    runtime->prepare({&norm, &softmax, &same_norm});  // same_norm shares norm's kernels
    CHECK(runtime->stats().kernels_compiled == needed);
    test::DeviceMatrix x(DType::bf16, rows, cols), w(DType::bf16, 1, cols), y(DType::bf16, rows, cols);
    x.upload(test::random_values(rows * cols, 1));
    w.upload(test::random_values(cols, 2));
    test::DeviceMatrix logits(DType::fp32, 8, vocab), probs(DType::fp32, 8, vocab);
    logits.upload(test::random_values(8 * vocab, 3));
    norm.run(*runtime, {x.data(), w.data()}, {y.data()});
    same_norm.run(*runtime, {x.data(), w.data()}, {y.data()});
    softmax.run(*runtime, {logits.data()}, {probs.data()});
    CHECK(runtime->stats().kernels_compiled == needed);
    bool all_written = true;
    for (double v : y.download()) all_written &= std::isfinite(v);
    for (double v : probs.download()) all_written &= std::isfinite(v);
    CHECK(all_written);

    runtime->prepare(std::vector<const Op*>{});  // nothing to do
    CHECK_THROWS_AS(runtime->prepare({&norm, nullptr}), InvalidArgument);
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

namespace {

// An RmsNorm of `rows` x 4096 bf16 with its operands; check() compares y with the reference.
struct RowsOf4096 {
    static constexpr int64_t kCols = 4096;
    int64_t rows;
    RmsNorm op;
    test::DeviceMatrix x, w, y;
    std::vector<double> reference;

    explicit RowsOf4096(int64_t rows_)
        : rows(rows_),
          op({rows_, kCols, DType::bf16}),
          x(DType::bf16, rows_, kCols),
          w(DType::bf16, 1, kCols),
          y(DType::bf16, rows_, kCols) {
        const std::vector<double> xs = test::round_to(DType::bf16, test::random_values(rows * kCols, 5));
        const std::vector<double> ws = test::round_to(DType::bf16, test::random_values(kCols, 6));
        x.upload(xs);
        w.upload(ws);
        reference = test::rmsnorm_reference(xs, {}, ws, rows, kCols, 1e-6);
    }
    void run(Runtime& runtime, CUstream stream = nullptr) { op.run(runtime, {x.data(), w.data()}, {y.data()}, stream); }
    bool correct() { return test::relative_error(y.download(), reference) < test::tolerance(DType::bf16); }
};

}  // namespace

TEST_CASE("background compiling: a new shape runs a stand-in at once, then its chosen kernel; graphs never record one",
          "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    test::TempDir dir;
    test::ScopedEnv exact_only("TILEOPS_TUNING_MAX_DISTANCE", "0");  // configs from the heuristic alone
    RuntimeOptions options;
    options.cache_dir = (dir.path() / "cache").string();
    options.background_compile = true;
    Runtime runtime(options);
    const auto& cu = cuda::driver();

    // The first op of its kind has no stand-in: it compiles in the foreground, as without the option.
    RowsOf4096 first(64);
    first.run(runtime);
    CHECK(first.correct());
    CHECK(runtime.stats().background_compiles == 0);
    CHECK(runtime.stats().standin_runs == 0);
    const Config first_config = runtime.impl().choice(first.op).config;

    // Shapes whose chosen config differs from the first's, which is valid for them: their first
    // run has a stand-in at hand.
    std::vector<std::unique_ptr<RowsOf4096>> others;
    for (int64_t rows : {8192, 16384, 1, 2, 4096, 128, 32768}) {
        auto problem = std::make_unique<RowsOf4096>(rows);
        if (runtime.impl().choice(problem->op).config != first_config &&
            !problem->op.model().invalid_reason(first_config, runtime.device()))
            others.push_back(std::move(problem));
    }
    REQUIRE(others.size() >= 2);
    RowsOf4096& second = *others[0];
    RowsOf4096& captured = *others[1];

    second.run(runtime);
    TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
    CHECK(second.correct());  // the stand-in computes the same result
    CHECK(runtime.stats().background_compiles == 1);
    CHECK(runtime.stats().standin_runs == 1);
    const std::string note = runtime.explain(second.op);
    CHECK_THAT(note, ContainsSubstring("compiles in the background"));

    // A stream under capture waits for the chosen kernel rather than record a stand-in.
    const uint64_t standins = runtime.stats().standin_runs;
    CUstream stream = nullptr;
    TILEOPS_CU_CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    TILEOPS_CU_CHECK(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    captured.run(runtime, stream);
    TILEOPS_CU_CHECK(cu.cuStreamEndCapture(stream, &graph));
    CHECK(runtime.stats().standin_runs == standins);
    CHECK(runtime.explain(captured.op).find("background") == std::string::npos);
    TILEOPS_CU_CHECK(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
    TILEOPS_CU_CHECK(cu.cuGraphLaunch(exec, stream));
    TILEOPS_CU_CHECK(cu.cuStreamSynchronize(stream));
    CHECK(captured.correct());
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
    cu.cuStreamDestroy(stream);

    // Once the background compile is done, the next run takes the chosen kernel for good.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (runtime.explain(second.op).find("background") != std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
        second.run(runtime);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(runtime.explain(second.op).find("background") == std::string::npos);
    const uint64_t settled = runtime.stats().standin_runs;
    second.y = test::DeviceMatrix(DType::bf16, second.rows, RowsOf4096::kCols);  // poisoned again
    for (int i = 0; i < 3; ++i) second.run(runtime);
    TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
    CHECK(runtime.stats().standin_runs == settled);
    CHECK(second.correct());
}

TEST_CASE("background compiling: a GEMM's first run compiles only a quick stand-in, then takes its chosen kernel",
          "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    if (test::shared_runtime().device().sm() != 90) SKIP("the quick stand-in is a TMA kernel's (sm_90)");
    test::TempDir dir;
    test::ScopedEnv exact_only("TILEOPS_TUNING_MAX_DISTANCE", "0");  // the heuristic's 128 x 256 tiles
    RuntimeOptions options;
    options.cache_dir = (dir.path() / "cache").string();
    options.background_compile = true;
    Runtime runtime(options);
    const auto& cu = cuda::driver();
    const int64_t m = 2048, n = 2048, k = 512;
    GemmProblem p;
    p.m = m, p.n = n, p.k = k, p.layout = GemmLayout::nt;
    Gemm op(p);
    const Config chosen = runtime.impl().choice(op).config;
    const std::optional<Config> quick = op.model().quick_config(chosen, runtime.device());
    REQUIRE(quick.has_value());
    test::DeviceMatrix a(DType::bf16, m, k), b(DType::bf16, n, k), d(DType::bf16, m, n);
    a.upload(test::random_values(m * k, 5));
    b.upload(test::random_values(n * k, 6));

    op.run(runtime, {a.data(), b.data()}, {d.data()});  // nothing at hand: the quick config compiles
    TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
    CHECK(runtime.stats().standin_runs == 1);
    CHECK(runtime.stats().background_compiles == 1);
    CHECK_THAT(runtime.explain(op), ContainsSubstring("compiles in the background"));
    const std::vector<double> from_standin = d.download();

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (runtime.explain(op).find("background") != std::string::npos && std::chrono::steady_clock::now() < deadline) {
        op.run(runtime, {a.data(), b.data()}, {d.data()});
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(runtime.explain(op).find("background") == std::string::npos);
    d = test::DeviceMatrix(DType::bf16, m, n);  // poisoned again
    op.run(runtime, {a.data(), b.data()}, {d.data()});
    TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
    const std::vector<double> from_chosen = d.download();
    bool finite = true;
    for (double v : from_chosen) finite &= std::isfinite(v);
    CHECK(finite);
    // Both kernels are checked against a reference in the GEMM tests; here they must agree.
    CHECK(test::relative_error(from_standin, from_chosen) <= test::tolerance(DType::bf16));
}

TEST_CASE("TILEOPS_BACKGROUND_COMPILE must be 0 or 1", "[gpu][runtime]") {
    TILEOPS_REQUIRE_GPU();
    test::ScopedEnv bad("TILEOPS_BACKGROUND_COMPILE", "yes");
    CHECK_THROWS_AS(Runtime(), InvalidArgument);
}
