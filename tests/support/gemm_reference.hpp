// The GEMM epilogue's activations in double precision, for the GEMM tests' references.
#pragma once

#include <cmath>

#include "tileops/gemm.hpp"

namespace tileops::test {

inline double gemm_activation(GemmEpilogue e, double x) {
    if (e == GemmEpilogue::gelu) return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    if (e == GemmEpilogue::silu) return x / (1.0 + std::exp(-x));
    return x;
}

}  // namespace tileops::test
