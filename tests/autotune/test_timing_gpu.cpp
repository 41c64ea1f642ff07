// The tuner's timer on a GPU: its L2 flush (a read kernel compiled at run time) launches, and the
// timings it returns are those of the timed work.
#include <cmath>

#include <catch2/catch_test_macros.hpp>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "support/test_support.hpp"
#include "tileops/tileops.hpp"
#include "autotune/timing.hpp"

using namespace tileops;

TEST_CASE("the tuner's timer flushes L2 by reading and times the launch it is given", "[gpu][tuning]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = test::shared_runtime();  // makes the device's context current
    tuning::KernelTimer timer(runtime.device());
    const auto& cu = cuda::driver();

    // A 256 MB memset (~0.1 ms at HBM speed) and a 1 MB one: the timer must tell them apart.
    cuda::DeviceBuffer big(size_t{256} << 20), small(size_t{1} << 20);
    const tuning::TimingStats big_stats =
        timer.time([&] { TILEOPS_CU_CHECK(cu.cuMemsetD8Async(big.get(), 1, big.size(), nullptr)); }, 2, 7);
    const tuning::TimingStats small_stats =
        timer.time([&] { TILEOPS_CU_CHECK(cu.cuMemsetD8Async(small.get(), 1, small.size(), nullptr)); }, 2, 7);
    for (const tuning::TimingStats* stats : {&big_stats, &small_stats}) {
        REQUIRE(stats->samples_us.size() == 7);
        for (double us : stats->samples_us) CHECK((std::isfinite(us) && us > 0));
        CHECK(stats->p25_us <= stats->median_us);
        CHECK(stats->median_us <= stats->p75_us);
    }
    // 256 MB can't be written faster than 10 TB/s on any GPU this runs on: >= 25 us.
    CHECK(big_stats.median_us >= 25.0);
    CHECK(big_stats.median_us > 10 * small_stats.median_us);
    TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
}
