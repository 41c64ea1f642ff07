#include "support/row_checks.hpp"

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "support/test_support.hpp"

namespace tileops::test {

std::string label(const char* op, Shape s, DType dtype, int64_t pad) {
    return fmt::format("{} {}x{} {} pad {}", op, s.rows, s.cols, dtype_name(dtype), pad);
}

void expect_close(const std::vector<double>& out, const std::vector<double>& ref, DType out_dtype, const std::string& what) {
    const double error = relative_error(out, round_to(out_dtype, ref));
    INFO(what << ": relative error " << error << " (tolerance " << tolerance(out_dtype) << ")");
    CHECK(error <= tolerance(out_dtype));
}

}  // namespace tileops::test
