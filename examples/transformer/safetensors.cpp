#include "safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "model_config.hpp"
#include "read_bounded.hpp"

namespace transformer {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the format's own limit

}  // namespace

size_t dtype_bytes(const std::string& dtype) {
    if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
    if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
    if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
    if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
    return 0;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    const auto refuse = [&](const std::string& what) { throw std::invalid_argument(fmt::format("{}: {}", path_, what)); };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) refuse(fmt::format("cannot open: {}", std::strerror(errno)));
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        ::close(fd);
        refuse("not a regular file");
    }
    size_ = static_cast<size_t>(info.st_size);
    if (size_ < 8) {
        ::close(fd);
        refuse(fmt::format("{} bytes: too short for a safetensors header", size_));
    }
    mapping_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (mapping_ == MAP_FAILED) {
        mapping_ = nullptr;
        refuse(fmt::format("cannot map: {}", std::strerror(errno)));
    }
    try {
        const auto* bytes = static_cast<const std::byte*>(mapping_);
        uint64_t header_bytes = 0;
        for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | std::to_integer<uint64_t>(bytes[i]);
        if (header_bytes > kMaxHeaderBytes || header_bytes > size_ - 8)
            refuse(fmt::format("header length {} does not fit the file ({} bytes)", header_bytes, size_));
        const std::string_view header(reinterpret_cast<const char*>(bytes) + 8, header_bytes);
        if (header.find('\0') != std::string_view::npos) refuse("the header holds a NUL byte");
        json root;
        try {
            root = json::parse(header.begin(), header.end());
        } catch (const json::exception& e) {
            refuse(fmt::format("the header is not valid JSON: {}", e.what()));
        }
        if (!root.is_object()) refuse("the header is not a JSON object");
        const std::byte* data = bytes + 8 + header_bytes;
        const uint64_t data_bytes = size_ - 8 - header_bytes;
        std::vector<std::tuple<uint64_t, uint64_t, std::string>> extents;
        for (const auto& [name, entry] : root.items()) {
            if (name == "__metadata__") continue;
            const auto bad = [&](const std::string& what) { refuse(fmt::format("tensor '{}': {}", name, what)); };
            if (!entry.is_object()) bad("not an object");
            if (!entry.contains("dtype") || !entry["dtype"].is_string()) bad("no dtype");
            if (!entry.contains("shape") || !entry["shape"].is_array()) bad("no shape");
            if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
                bad("no data_offsets [begin, end]");
            TensorView view;
            view.dtype = entry["dtype"].get<std::string>();
            const size_t element = dtype_bytes(view.dtype);
            if (element == 0) bad(fmt::format("unknown dtype '{}'", view.dtype));
            uint64_t count = 1;
            for (const json& dim : entry["shape"]) {
                if (!dim.is_number_unsigned()) bad(fmt::format("shape {} is not of non-negative integers", entry["shape"].dump()));
                const uint64_t extent = dim.get<uint64_t>();
                if (extent != 0 && count > std::numeric_limits<uint64_t>::max() / extent / element)
                    bad(fmt::format("shape {} overflows", entry["shape"].dump()));
                count *= extent;
                view.shape.push_back(static_cast<int64_t>(extent));
            }
            const json& offsets = entry["data_offsets"];
            if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) bad("data_offsets are not integers");
            const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
            if (begin > end || end > data_bytes)
                bad(fmt::format("data_offsets [{}, {}] outside the data ({} bytes)", begin, end, data_bytes));
            if (end - begin != count * element)
                bad(fmt::format("data_offsets hold {} bytes, its shape and dtype {}", end - begin, count * element));
            view.data = data + begin;
            view.bytes = static_cast<size_t>(end - begin);
            extents.emplace_back(begin, end, name);
            tensors_.emplace(name, std::move(view));
        }
        std::sort(extents.begin(), extents.end());
        for (size_t i = 1; i < extents.size(); ++i)
            if (std::get<0>(extents[i]) < std::get<1>(extents[i - 1]))
                refuse(fmt::format("tensors '{}' and '{}' share bytes of the data", std::get<2>(extents[i - 1]),
                                   std::get<2>(extents[i])));
    } catch (...) {
        ::munmap(mapping_, size_);
        mapping_ = nullptr;
        throw;
    }
}

SafetensorsFile::~SafetensorsFile() {
    if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

const TensorView& SafetensorsFile::tensor(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::invalid_argument(fmt::format("{}: no tensor '{}'", path_, name));
    return it->second;
}

namespace {

// Tensor `t` of `file` has the shape the config needs for `w` and a float dtype the loader reads.
void check_weight(const std::string& file, const TensorView& t, const WeightSpec& w) {
    if (t.shape != w.shape)
        throw std::invalid_argument(fmt::format("{}: tensor '{}' has shape [{}], the config needs [{}]", file, w.name,
                                                fmt::join(t.shape, ", "), fmt::join(w.shape, ", ")));
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
        throw std::invalid_argument(fmt::format("{}: tensor '{}' is {}, not F32, F16 or BF16", file, w.name, t.dtype));
}

}  // namespace

void SafetensorsFile::check_weights(const std::vector<WeightSpec>& weights) const {
    for (const WeightSpec& w : weights) check_weight(path_, tensor(w.name), w);
}

namespace {

// The index's directory-relative shard name, refused when absolute or leaving the directory.
std::string shard_path(const std::string& index, const std::string& shard) {
    const std::filesystem::path relative(shard);
    if (shard.empty() || relative.is_absolute() || relative.has_root_name())
        throw std::invalid_argument(fmt::format("{}: shard '{}' is not a path relative to the index", index, shard));
    for (const auto& part : relative)
        if (part == "..") throw std::invalid_argument(fmt::format("{}: shard '{}' leaves the index's directory", index, shard));
    return (std::filesystem::path(index).parent_path() / relative).string();
}

bool ends_with(const std::string& text, const std::string& tail) {
    return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code error;
    std::string file = path;
    if (fs::is_directory(path, error)) {
        const fs::path single = fs::path(path) / "model.safetensors", index = fs::path(path) / "model.safetensors.index.json";
        if (fs::exists(single, error)) {
            file = single.string();
        } else if (fs::exists(index, error)) {
            file = index.string();
        } else {
            throw std::invalid_argument(
                fmt::format("{}: a directory without model.safetensors or model.safetensors.index.json", path));
        }
    }
    if (!ends_with(file, ".index.json")) {
        files_.push_back(std::make_unique<SafetensorsFile>(file));
        for (const auto& [name, view] : files_.back()->tensors()) tensors_.emplace(name, Entry{&view, file});
        return;
    }
    const auto refuse = [&](const std::string& what) { throw std::invalid_argument(fmt::format("{}: {}", file, what)); };
    json root = parse_json_text(read_bounded(file, size_t{64} << 20, "checkpoint index"), refuse);
    if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object() || root["weight_map"].empty())
        refuse("expected an object with a non-empty 'weight_map' of tensor -> shard file");
    std::map<std::string, std::string> shard_of;  // tensor -> shard path
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [name, shard] : root["weight_map"].items()) {
        if (!shard.is_string()) refuse(fmt::format("weight_map: tensor '{}' maps to {}, not a file name", name, shard.dump()));
        const std::string shard_file = shard_path(file, shard.get<std::string>());
        shard_of[name] = shard_file;
        if (shards.count(shard_file) == 0) {
            files_.push_back(std::make_unique<SafetensorsFile>(shard_file));
            shards[shard_file] = files_.back().get();
        }
    }
    // Every tensor where the map says, and no tensor in two shards.
    for (const auto& [shard_file, shard] : shards) {
        for (const auto& [name, view] : shard->tensors()) {
            const auto [it, fresh] = tensors_.emplace(name, Entry{&view, shard_file});
            if (!fresh)
                refuse(fmt::format("tensor '{}' is in two shards, {} and {}", name, it->second.file, shard_file));
        }
    }
    for (const auto& [name, shard_file] : shard_of) {
        const auto it = tensors_.find(name);
        if (it == tensors_.end() || it->second.file != shard_file)
            refuse(fmt::format("weight_map puts tensor '{}' in {}, which does not hold it", name, shard_file));
    }
}

Checkpoint::~Checkpoint() = default;

const TensorView* Checkpoint::find(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) it = tensors_.find("transformer." + name);  // GPT2LMHeadModel's save_pretrained
    return it == tensors_.end() ? nullptr : it->second.view;
}

const TensorView& Checkpoint::tensor(const std::string& name) const {
    const TensorView* view = find(name);
    if (view == nullptr) throw std::invalid_argument(fmt::format("{}: no tensor '{}'", path_, name));
    return *view;
}

void Checkpoint::check(const ModelConfig& config) const {
    for (const WeightSpec& w : required_weights(config)) check_weight(path_, tensor(w.name), w);
    // Biases the architecture does not apply would be ignored silently: refuse them.
    if (config.architecture == Architecture::llama)
        for (const auto& [name, entry] : tensors_)
            if (name.rfind("model.layers.", 0) == 0 && ends_with(name, ".bias"))
                throw std::invalid_argument(
                    fmt::format("{}: tensor '{}': biases are not supported in a Llama model", entry.file, name));
}

void write_safetensors(const std::string& path, const std::vector<OutputTensor>& tensors) {
    json header = json::object();
    uint64_t offset = 0;
    for (const OutputTensor& t : tensors) {
        header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    const std::string temporary = fmt::format("{}.tmp{}", path, ::getpid());
    const auto fail = [&](const char* what) {
        const std::string reason = std::strerror(errno);
        ::unlink(temporary.c_str());
        throw std::runtime_error(fmt::format("{}: cannot {}: {}", path, what, reason));
    };
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) fail("create a temporary file");
    const auto write_all = [&](const void* data, size_t bytes) {
        const auto* p = static_cast<const char*>(data);
        while (bytes > 0) {
            const ssize_t n = ::write(fd, p, bytes);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                ::close(fd);
                fail("write");
            }
            p += n;
            bytes -= static_cast<size_t>(n);
        }
    };
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((uint64_t{text.size()} >> (8 * i)) & 0xFF);
    write_all(length, 8);
    write_all(text.data(), text.size());
    for (const OutputTensor& t : tensors) write_all(t.bytes.data(), t.bytes.size());
    if (::close(fd) != 0) fail("close");
    if (std::rename(temporary.c_str(), path.c_str()) != 0) fail("rename into place");
}

}  // namespace transformer
