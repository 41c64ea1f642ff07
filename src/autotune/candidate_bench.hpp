// Runs an op's candidate configs in this process: operand buffers with random inputs, outputs
// poisoned before each check, the heuristic's outputs as the reference, CUDA-event timing.
#pragma once

#include <cstdint>
#include <vector>

#include "autotune/autotuner.hpp"
#include "autotune/operand_buffers.hpp"
#include "autotune/timing.hpp"

namespace tileops::tuning {

class CandidateBench final : public CandidateRunner {
public:
    CandidateBench(Runtime& runtime, const Op& op, uint64_t seed, LengthSpread lengths = LengthSpread::uniform);

    int vector_width() override { return vec_; }
    double bytes_moved() override { return buffers_.bytes_moved(); }
    // A launch failure that leaves the context unusable (an illegal address, a trap) is thrown
    // as the DriverError: nothing after it can run in this process.
    Measurement measure(size_t index, const Config& config, int warmup, int repeats) override;
    std::vector<std::vector<double>> retime(const std::vector<Config>& configs, int rounds) override;

private:
    void launch(const detail::ResolvedLaunch& resolved);

    Runtime& runtime_;
    const Op& op_;
    OperandBuffers buffers_;
    int vec_;
    KernelTimer timer_;
    std::vector<float> reference_;
    double tolerance_;
};

// Whether the context that returned `status` can run nothing more (sticky errors).
bool context_is_lost(int status);

}  // namespace tileops::tuning
