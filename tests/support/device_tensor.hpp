// A device buffer holding a [rows, cols] matrix with a row stride, filled from and read back into
// doubles through the dtype's host encoding. Gaps between rows are poisoned so a test can check
// that a kernel wrote exactly its rows and nothing else.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device.hpp"
#include "support/test_support.hpp"

namespace tileops::test {

class DeviceMatrix {
public:
    // Poisoned (all bits set: NaN in every float dtype) everywhere.
    DeviceMatrix(DType dtype, int64_t rows, int64_t cols, int64_t stride = 0, size_t byte_offset = 0);
    void poison();  // every byte back to 0xff
    // Every element `value` (the gaps between rows stay as they are): a poison for int32 outputs,
    // whose 0xff pattern reads as -1, a value some of them legitimately hold.
    void fill(double value);

    void upload(const std::vector<double>& values);  // rows*cols values, row-major
    std::vector<double> download() const;            // rows*cols values
    // True when every element between rows (stride > cols) is still the poison pattern; else says
    // (UNSCOPED_INFO, printed with the next failed check) where the first written one is and how many.
    bool gaps_untouched() const;

    void* data() const { return static_cast<char*>(buffer_.data()) + offset_; }
    int64_t stride() const { return stride_; }
    DType dtype() const { return dtype_; }

private:
    DType dtype_;
    int64_t rows_, cols_, stride_;
    size_t offset_;
    cuda::DeviceBuffer buffer_;
};

}  // namespace tileops::test
