// The GPU tests' comparison with a reference: the norm-wise error and the element-by-element
// check beside it. The cases are the ones the norm alone let through: a few wrong values per row
// in long bf16 rows, where the norm averages them away.
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "support/test_support.hpp"

using namespace tileops;
using tileops::test::elements_off;
using tileops::test::random_values;
using tileops::test::relative_error;
using tileops::test::round_to;
using tileops::test::tolerance;

namespace {

// Two rows of 100003 bf16 values, as a normalized row holds them.
std::vector<double> bf16_rows() { return round_to(DType::bf16, random_values(2 * 100003, 7, -2.0, 2.0)); }

}  // namespace

TEST_CASE("A wrong head and tail of each row pass the norm but not the element check", "[test_support]") {
    const std::vector<double> want = bf16_rows();
    std::vector<double> got = want;
    for (size_t row = 0; row < 2; ++row) {
        for (size_t i = 0; i < 7; ++i) got[row * 100003 + i] = 0.0;            // head not written
        for (size_t i = 100003 - 2; i < 100003; ++i) got[row * 100003 + i] = -got[row * 100003 + i];  // tail negated
    }
    CHECK(relative_error(got, want) <= tolerance(DType::bf16));  // what the norm alone accepted
    const std::vector<size_t> off = elements_off(got, want, DType::bf16);
    CHECK(off.size() >= 16);  // all 18 but a value too close to zero to tell
    CHECK(off.front() < 7);
}

TEST_CASE("A kernel's rounding passes the element check in every dtype", "[test_support]") {
    // The exact values off by a few fp32 units before rounding: a kernel's fp32 arithmetic, then
    // its output's own rounding, which may land one unit of the output dtype away.
    const std::vector<double> exact = random_values(50000, 11, -3.0, 3.0);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> wobble(-4e-7, 4e-7);
    std::vector<double> computed = exact;
    for (double& v : computed) v *= 1.0 + wobble(rng);
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16, DType::fp8_e4m3}) {
        CAPTURE(dtype_name(dtype));
        const std::vector<double> want = round_to(dtype, exact);
        const std::vector<double> got = round_to(dtype, computed);
        CHECK(elements_off(got, want, dtype).empty());
    }
    // fp16 subnormals (softmax probabilities of long rows): one subnormal step apart passes.
    const std::vector<double> tiny = round_to(DType::fp16, {3e-6, 2e-5, 4e-5});
    std::vector<double> next = tiny;
    for (double& v : next) v += std::ldexp(1.0, -24);
    CHECK(elements_off(next, tiny, DType::fp16).empty());
    // An all-zero reference (log-softmax of one-element rows): fp32 rounding of log(1 + eps).
    CHECK(elements_off({-1.1e-7}, {0.0}, DType::fp32).empty());
    CHECK(elements_off({-1e-4}, {0.0}, DType::fp32) == std::vector<size_t>{0});
}

TEST_CASE("NaN, a size mismatch and a missing infinity are errors", "[test_support]") {
    const std::vector<double> want{1.0, -2.0, INFINITY};
    CHECK(elements_off({1.0, NAN, INFINITY}, want, DType::fp32) == std::vector<size_t>{1});
    CHECK(elements_off({1.0, -2.0, 5.0}, want, DType::fp32) == std::vector<size_t>{2});
    CHECK(elements_off(want, want, DType::fp32).empty());
    CHECK(std::isinf(relative_error({1.0, -2.0}, want)));
    CHECK(std::isinf(relative_error({1.0, NAN, INFINITY}, want)));
}
