#include "support/device_tensor.hpp"

#include <algorithm>

#include <catch2/catch_message.hpp>

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

void DeviceMatrix::fill(double value) { upload(std::vector<double>(static_cast<size_t>(rows_ * cols_), value)); }

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
    // Where the gaps were written says which store went astray: the first element and how many.
    int64_t touched = 0, first_row = -1, first_col = -1;
    for (int64_t r = 0; r + 1 < rows_; ++r)
        for (int64_t c = cols_; c < stride_; ++c) {
            const size_t begin = static_cast<size_t>(r * stride_ + c) * element;
            if (std::all_of(all.begin() + begin, all.begin() + begin + element, [](uint8_t b) { return b == 0xff; }))
                continue;
            if (touched++ == 0) first_row = r, first_col = c;
        }
    if (touched > 0)
        UNSCOPED_INFO(touched << " elements written between rows (" << rows_ << " x " << cols_ << ", stride " << stride_
                              << "); the first at row " << first_row << ", column " << first_col);
    return touched == 0;
}

}  // namespace tileops::test
