#include "support/row_checks.hpp"

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "support/test_support.hpp"

namespace tileops::test {

std::string label(const char* op, Shape s, DType dtype, int64_t pad) {
    return fmt::format("{} {}x{} {} pad {}", op, s.rows, s.cols, dtype_name(dtype), pad);
}

void expect_close(const std::vector<double>& out, const std::vector<double>& ref, DType out_dtype, const std::string& what) {
    const std::vector<double> want = round_to(out_dtype, ref);
    const double error = relative_error(out, want);
    INFO(what << ": relative error " << error << " (tolerance " << tolerance(out_dtype) << ")");
    CHECK(error <= tolerance(out_dtype));
    // Element by element too: the norm averages over the whole output, where a few wrong values
    // (a ragged row's head or tail) hide at bf16's tolerance.
    const std::vector<size_t> off = elements_off(out, want, out_dtype);
    if (!off.empty())
        UNSCOPED_INFO(what << ": " << off.size() << " elements off, the first at " << off.front() << ": "
                           << out[off.front()] << " against " << want[off.front()]);
    CHECK(off.empty());
}

}  // namespace tileops::test
