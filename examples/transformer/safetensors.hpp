// A read-only view of a .safetensors file (8-byte little-endian header length, a JSON header of
// name -> {dtype, shape, data_offsets}, then the data), mapped into memory. Every length, offset
// and shape in the header is checked against the file before anything is read through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
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

struct ModelConfig;

// A checkpoint: one .safetensors file, a Hugging Face index (*.index.json, whose weight_map names
// the shard of each tensor, paths relative to the index) or a directory holding
// model.safetensors or model.safetensors.index.json. Every shard is mapped and checked; a shard
// outside the index's directory, a tensor in two shards or not where the map says is refused.
class Checkpoint {
public:
    explicit Checkpoint(const std::string& path);
    ~Checkpoint();
    Checkpoint(const Checkpoint&) = delete;
    Checkpoint& operator=(const Checkpoint&) = delete;

    // The tensor called `name` (or "transformer." + name, GPT-2's save_pretrained naming); null
    // or std::invalid_argument when there is none.
    const TensorView* find(const std::string& name) const;
    const TensorView& tensor(const std::string& name) const;
    // Checks every weight the config needs (name, shape, float dtype) and refuses tensors it
    // would ignore (a bias in a Llama layer); throws
    // std::invalid_argument naming the file and the tensor.
    void check(const ModelConfig& config) const;

private:
    struct Entry {
        const TensorView* view;
        std::string file;
    };
    std::string path_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, Entry> tensors_;
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
