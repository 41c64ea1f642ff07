#include "support/device_tensor.hpp"

#include <algorithm>

namespace tileops::test {

DeviceMatrix::DeviceMatrix(DType dtype, int64_t rows, int64_t cols, int64_t stride, size_t byte_offset)
    : dtype_(dtype), rows_(rows), cols_(cols), stride_(stride == 0 ? cols : stride), offset_(byte_offset),
      buffer_(byte_offset + static_cast<size_t>((rows - 1) * stride_ + cols) * dtype_size(dtype)) {
    poison();
}

void DeviceMatrix::poison() { buffer_.fill_bytes(0xff); }

void DeviceMatrix::upload(const std::vector<double>& values) {
    const size_t element = dtype_size(dtype_);
    std::vector<uint8_t> bytes = encode(dtype_, values);
    if (stride_ == cols_) {
        buffer_.upload(bytes.data(), bytes.size(), offset_);
        return;
    }
    for (int64_t r = 0; r < rows_; ++r)
        buffer_.upload(bytes.data() + r * cols_ * element, cols_ * element, offset_ + r * stride_ * element);
}

std::vector<double> DeviceMatrix::download() const {
    const size_t element = dtype_size(dtype_);
    std::vector<uint8_t> all(buffer_.size() - offset_);
    buffer_.download(all.data(), all.size(), offset_);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows_ * cols_) * element);
    for (int64_t r = 0; r < rows_; ++r)
        std::copy_n(all.begin() + r * stride_ * element, cols_ * element, bytes.begin() + r * cols_ * element);
    return decode(dtype_, bytes);
}

bool DeviceMatrix::gaps_untouched() const {
    const size_t element = dtype_size(dtype_);
    std::vector<uint8_t> all(buffer_.size() - offset_);
    buffer_.download(all.data(), all.size(), offset_);
    for (int64_t r = 0; r + 1 < rows_; ++r)
        for (size_t b = (r * stride_ + cols_) * element; b < static_cast<size_t>((r + 1) * stride_) * element; ++b)
            if (all[b] != 0xff) return false;
    return true;
}

}  // namespace tileops::test
