// Empties L2 of a timed kernel's data before each timed run, by reading a buffer larger than L2.
//
// A read, not a memset: a memset leaves L2 full of dirty lines whose write-back then lands inside
// the next timed run (about 50 MB, ~17 us on an H100), which distorted every small problem and
// the tuner's ranking of their configs. After a read, L2 holds clean lines of the buffer only.
#pragma once

#include <cuda.h>

#include <string>

#include "cuda/device.hpp"

namespace tileops::tuning {

class L2Flusher {
public:
    // Compiles its kernel with NVRTC for `arch` (the current context's device, which must stay
    // current when flushing).
    explicit L2Flusher(const std::string& arch);

    // Enqueues a read of all of `buffer` (at least twice the L2 size) on `stream`.
    void flush(const cuda::DeviceBuffer& buffer, CUstream stream) const;

private:
    cuda::Module module_;
    CUfunction function_ = nullptr;
};

}  // namespace tileops::tuning
