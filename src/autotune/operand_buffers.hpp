// Device buffers for every operand of an op, inputs filled with random values (never zeros; past
// 64 MB an operand repeats its first 64 MB) or as OperandSpec says (sequence lengths and a
// grouped GEMM's rows a group as `spread` draws them), outputs poisoned; for the autotuner and
// benchmarks.
#pragma once

#include <cstdint>
#include <vector>

#include "autotune/length_spread.hpp"
#include "core/op_model.hpp"
#include "cuda/device.hpp"
#include "tileops/tensor.hpp"

namespace tileops::tuning {

// Element i of the n elements of an index operand that `spec` fills with one of the index fills
// (constant, scrambled_index, multiples, even_offsets; see detail::OperandFill).
long long index_fill(const detail::OperandSpec& spec, size_t i, size_t n);

class OperandBuffers {
public:
    OperandBuffers(const detail::OpModel& model, uint64_t seed, LengthSpread spread = LengthSpread::uniform);

    Inputs inputs() const { return Inputs(inputs_.data(), inputs_.size()); }
    Outputs outputs() const { return Outputs(outputs_.data(), outputs_.size()); }

    // Sets every output byte to 0xff (NaN in every float dtype); partial outputs to zeros.
    void poison_outputs();
    // The outputs as floats, concatenated (for comparing candidates).
    std::vector<float> download_outputs() const;
    // Bytes the op must move: each input read once (a cache as far as the lengths reach), each
    // output written once.
    double bytes_moved() const { return bytes_moved_; }

private:
    std::vector<detail::OperandSpec> specs_;
    std::vector<cuda::DeviceBuffer> buffers_;
    std::vector<TensorArg> inputs_;
    std::vector<OutputArg> outputs_;
    double bytes_moved_ = 0;
};

}  // namespace tileops::tuning
