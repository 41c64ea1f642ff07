// Double-precision references of the row-wise ops on row-major [rows, cols] matrices.
#pragma once

#include <cstdint>
#include <vector>

namespace tileops::test {

// y = h / sqrt(mean(h^2) + eps) * w with h = x (+ r when r is not empty); `sum`, when given,
// receives h.
std::vector<double> rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& r,
                                      const std::vector<double>& w, int64_t rows, int64_t cols, double eps,
                                      std::vector<double>* sum = nullptr);
// y = (x - mean) / sqrt(var + eps) * w + b, biased variance.
std::vector<double> layernorm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                        const std::vector<double>& b, int64_t rows, int64_t cols, double eps);
// softmax, or log-softmax when `log`, over each row.
std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols, bool log);

}  // namespace tileops::test
