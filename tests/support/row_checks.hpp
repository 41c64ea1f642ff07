// What the row-op and elementwise GPU tests share: their shapes, labels and the comparison with a
// reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tileops/tensor.hpp"

namespace tileops::test {

struct Shape {
    int64_t rows, cols;
};

// 1 row; tiny and odd rows; rows longer than a block; longer than a cluster can hold at fp32.
inline constexpr Shape kShapes[] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}, {2, 65536}, {2, 70001}, {3, 262144}, {130, 4096}};

// "rmsnorm 37x1000 bf16 pad 3".
std::string label(const char* op, Shape s, DType dtype, int64_t pad);

// Compares with the reference as the output dtype stores it (what an exact kernel would write):
// the tolerance then covers the kernel's arithmetic, not the format (fp16 softmax outputs of
// 1e-6 are subnormal, for instance).
void expect_close(const std::vector<double>& out, const std::vector<double>& ref, DType out_dtype, const std::string& what);

}  // namespace tileops::test
