#include "support/row_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tileops::test {

std::vector<double> rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& r,
                                      const std::vector<double>& w, int64_t rows, int64_t cols, double eps,
                                      std::vector<double>* sum) {
    std::vector<double> y(x.size()), h(x.size());
    for (int64_t i = 0; i < rows; ++i) {
        double squares = 0;
        for (int64_t j = 0; j < cols; ++j) {
            const int64_t at = i * cols + j;
            h[at] = x[at] + (r.empty() ? 0.0 : r[at]);
            squares += h[at] * h[at];
        }
        const double inv = 1.0 / std::sqrt(squares / cols + eps);
        for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = h[i * cols + j] * inv * w[j];
    }
    if (sum != nullptr) *sum = h;
    return y;
}

std::vector<double> layernorm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                        const std::vector<double>& b, int64_t rows, int64_t cols, double eps) {
    std::vector<double> y(x.size());
    for (int64_t i = 0; i < rows; ++i) {
        const double* row = x.data() + i * cols;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < cols; ++j) mean += row[j];
        mean /= cols;
        for (int64_t j = 0; j < cols; ++j) var += (row[j] - mean) * (row[j] - mean);
        var /= cols;
        for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = (row[j] - mean) / std::sqrt(var + eps) * w[j] + b[j];
    }
    return y;
}

std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols, bool log) {
    std::vector<double> y(x.size());
    for (int64_t i = 0; i < rows; ++i) {
        const double* row = x.data() + i * cols;
        double max = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < cols; ++j) max = std::max(max, row[j]);
        for (int64_t j = 0; j < cols; ++j) sum += std::exp(row[j] - max);
        for (int64_t j = 0; j < cols; ++j) {
            const double v = row[j] - max;
            y[i * cols + j] = log ? v - std::log(sum) : std::exp(v) / sum;
        }
    }
    return y;
}

}  // namespace tileops::test
