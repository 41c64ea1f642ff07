// The order of a parallel compile (warm, pack, prepare): the costliest kernels first.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "jit/compile_order.hpp"

using tileops::jit::costliest_first;
using tileops::jit::expected_compile_ms;
using tileops::jit::measured_kernel_functions;

TEST_CASE("Compile cost: tensor-core and sampling kernels rank above memory-bound ones", "[jit]") {
    const double mla = expected_compile_ms("mla_decode/mla_decode_seesaw.cuh",
                                           "tileops::mla_decode_seesaw_kernel<__nv_bfloat16, 64, 2, true>");
    const double sampling = expected_compile_ms("sampling/sampling.cuh", "tileops::sampling_kernel<float, 4, 512, false>");
    const double gemm = expected_compile_ms("gemm/gemm_sm90.cuh", "tileops::gemm_sm90_kernel<__nv_bfloat16, 128, 256>");
    const double rmsnorm = expected_compile_ms("rows/rmsnorm.cuh", "tileops::rmsnorm_kernel<__nv_bfloat16, 8, 256>");
    const double add = expected_compile_ms("elementwise/elementwise.cuh", "tileops::elementwise_kernel<float, float, 2, 4, 1, 256>");
    CHECK(mla > sampling);
    CHECK(sampling > gemm);
    CHECK(gemm > rmsnorm);
    CHECK(rmsnorm > add);
    CHECK(add > 0);
}

TEST_CASE("Compile cost: a kernel nobody measured is ranked by its family", "[jit]") {
    // Names the table does not hold, in a heavy and in a memory-bound family.
    const double new_gemm = expected_compile_ms("gemm/gemm_future.cuh", "tileops::gemm_future_kernel<1>");
    const double new_rows = expected_compile_ms("rows/future.cuh", "tileops::rows_future_kernel<1>");
    const double new_other = expected_compile_ms("future/future.cuh", "tileops::future_kernel<1>");
    CHECK(new_gemm > new_rows);
    CHECK(new_rows > new_other);
    CHECK(new_other > 0);
    // Only the function name counts: namespaces and template arguments (with :: in them) do not.
    CHECK(expected_compile_ms("x.cuh", "sampling_kernel<tileops::Foo, 1>") ==
          expected_compile_ms("sampling/sampling.cuh", "tileops::sampling_kernel<float, 4, 512, false>"));
    CHECK(expected_compile_ms("", "") > 0);
}

TEST_CASE("costliest_first: descending cost, ties in their order", "[jit]") {
    const std::vector<double> costs = {1, 5, 3, 5, 0, 3};
    const std::vector<size_t> order = costliest_first(costs.size(), [&](size_t i) { return costs[i]; });
    CHECK(order == std::vector<size_t>{1, 3, 2, 5, 0, 4});
    CHECK(costliest_first(0, [](size_t) { return 1.0; }).empty());
}

TEST_CASE("Compile cost: every measured kernel function is a kernel of the templates", "[jit]") {
    // A renamed kernel would silently fall back to its family's figure.
    std::string all;
    for (const auto& file : std::filesystem::recursive_directory_iterator(std::string(TILEOPS_TEST_SOURCE_DIR) + "/kernel_templates")) {
        if (file.path().extension() != ".cuh") continue;
        std::ifstream in(file.path());
        std::stringstream text;
        text << in.rdbuf();
        all += text.str();
    }
    REQUIRE(!all.empty());
    for (std::string_view name : measured_kernel_functions()) {
        INFO(name);
        CHECK(all.find(std::string(name) + "(") != std::string::npos);
    }
}
