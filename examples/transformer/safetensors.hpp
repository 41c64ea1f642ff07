// A read-only view of a .safetensors file (8-byte little-endian header length, a JSON header of
// name -> {dtype, shape, data_offsets}, then the data), mapped into memory. Every length, offset
// and shape in the header is checked against the file before anything is read through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace transformer {

struct WeightSpec;

struct TensorView {
    std::string dtype;            // "F32", "F16", "BF16", ...
    std::vector<int64_t> shape;
    const std::byte* data = nullptr;
    size_t bytes = 0;
};

class SafetensorsFile {
public:
    // Maps and checks the file; throws std::invalid_argument naming it (and the tensor) on
    // anything malformed.
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::map<std::string, TensorView>& tensors() const noexcept { return tensors_; }
    // The tensor called `name`; throws std::invalid_argument when there is none.
    const TensorView& tensor(const std::string& name) const;
    // Checks that each weight is present with its shape and one of the float dtypes; throws
    // std::invalid_argument naming the first that is not.
    void check_weights(const std::vector<WeightSpec>& weights) const;

private:
    std::string path_;
    void* mapping_ = nullptr;
    size_t size_ = 0;
    std::map<std::string, TensorView> tensors_;
};

// Bytes of one element of a safetensors dtype; 0 for a dtype this reader does not know.
size_t dtype_bytes(const std::string& dtype);

// A tensor to write: its name, safetensors dtype, shape and little-endian bytes.
struct OutputTensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
};

// Writes the tensors as a .safetensors file: to a temporary file in the same directory, then
// renamed over `path` (a reader never sees half a file; a link at `path` is replaced, not
// followed). Throws std::runtime_error naming the path.
void write_safetensors(const std::string& path, const std::vector<OutputTensor>& tensors);

}  // namespace transformer
