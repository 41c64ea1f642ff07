#include "jit/bundle.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jit/disk_cache.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"
#include "util/json_keys.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

namespace tileops::jit {
namespace {

constexpr size_t kMagicBytes = 17;  // strlen(kBundleMagic)

std::string little_endian(uint64_t value) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
    return bytes;
}

uint64_t from_little_endian(const unsigned char* bytes) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) value = value << 8 | bytes[i];
    return value;
}

// Reads exactly `size` bytes at `offset`; false on a short read or an error.
bool read_at(int fd, uint64_t offset, uint64_t size, std::string& out) {
    out.assign(size, '\0');
    uint64_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<uint64_t>(n);
    }
    return true;
}

// An offset or size of the index: written as a JSON integer >= 0. get<uint64_t>() would take a
// float too (1.5 read as 1) and convert one past 2^64 (1e30) with undefined behaviour.
uint64_t count_field(const nlohmann::json& entry, const char* field, const std::string& blob) {
    const nlohmann::json& value = entry.at(field);
    if (!value.is_number_unsigned())
        throw std::runtime_error(fmt::format("blob {:.80}: \"{}\" must be an integer >= 0, got {}", blob, field,
                                             value.is_number() ? value.dump() : value.type_name()));
    return value.get<uint64_t>();
}

// A string of the index that is printed (unpack --list, messages) or names a file: no control
// characters, which could drive the terminal (an escape sequence starts with one).
std::string printable_field(const nlohmann::json& value, const std::string& what) {
    std::string text = value.get<std::string>();
    if (util::first_control_character(text) >= 0)
        throw std::runtime_error(fmt::format("{} {:?} holds a control character", what, text.substr(0, 80)));
    return text;
}

}  // namespace

void write_bundle(const std::filesystem::path& path, const BundleContents& contents) {
    nlohmann::json blobs = nlohmann::json::array();
    std::string data;
    auto add = [&](const char* kind, const std::string& name, const std::string& arch, const std::string& bytes) {
        nlohmann::json blob = {{"kind", kind},          {"name", name},
                               {"offset", data.size()}, {"size", bytes.size()},
                               {"sha256", util::sha256_hex(bytes)}};
        if (!arch.empty()) blob["arch"] = arch;
        blobs.push_back(std::move(blob));
        data += bytes;
    };
    for (const auto& [name, text] : contents.databases) add("database", name, "", text);
    for (const BundleContents::Kernel& kernel : contents.kernels) add("kernel", kernel.key, kernel.arch, kernel.payload);
    const std::string index = nlohmann::json{{"format", kBundleFormat},
                                             {"nvrtc_version", contents.nvrtc_version},
                                             {"archs", contents.archs},
                                             {"blobs", std::move(blobs)}}
                                  .dump();
    util::write_file_atomic(path, std::string(kBundleMagic) + little_endian(index.size()) + index + data);
}

Bundle::Bundle(const std::filesystem::path& path) : path_(path) {
    auto fail = [&](const std::string& why) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        return FileError(fmt::format("tileops: bundle {}: {}", path_.string(), why));
    };
    // No link is followed (a bundle is one file that is what it says), and a FIFO must not block.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd_ < 0) throw fail(errno == ELOOP ? "is a symbolic link" : std::strerror(errno));
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw fail(std::strerror(errno));
    if (!S_ISREG(info.st_mode)) throw fail("not a regular file");
    const auto file_size = static_cast<uint64_t>(info.st_size);
    std::string head;
    if (file_size < kMagicBytes + 8 || !read_at(fd_, 0, kMagicBytes + 8, head) ||
        head.compare(0, kMagicBytes, kBundleMagic) != 0)
        throw fail("not a tileops bundle (no TILEOPS-BUNDLE-1 header)");
    const uint64_t index_size = from_little_endian(reinterpret_cast<const unsigned char*>(head.data() + kMagicBytes));
    data_start_ = kMagicBytes + 8 + index_size;
    if (index_size > kMaxIndexBytes || data_start_ > file_size)
        throw fail(fmt::format("its index of {} bytes does not fit the file ({} bytes)", index_size, file_size));
    std::string index_text;
    if (!read_at(fd_, kMagicBytes + 8, index_size, index_text)) throw fail("its index cannot be read");
    const util::JsonScan scan = util::scan_json(index_text);
    if (scan.values > util::kMaxJsonValues)
        throw fail(fmt::format("its index holds more than {} JSON values", util::kMaxJsonValues));
    try {
        const nlohmann::json index = nlohmann::json::parse(index_text);
        // JSON keeps the last of a repeated key: a second "blobs" list would hide the first.
        if (!scan.repeated.empty())
            throw fail(fmt::format("its index gives the key {:?} twice in one object", scan.repeated.front().key));
        // An integer equal to the format: get<int>() would read 1.9, or 2^32 + 1, as 1.
        const nlohmann::json& format = index.at("format");
        if (!format.is_number_integer() || format.get<long long>() != kBundleFormat)
            throw fail(fmt::format("format {} is not the {} this library reads",
                                   format.is_number() ? format.dump() : format.type_name(), kBundleFormat));
        nvrtc_version_ = printable_field(index.at("nvrtc_version"), "nvrtc_version");
        const nlohmann::json& archs = index.at("archs");
        if (!archs.is_array()) throw fail("\"archs\" is not a list");
        for (const nlohmann::json& arch : archs) archs_.push_back(printable_field(arch, "arch"));
        const uint64_t data_size = file_size - data_start_;
        std::set<std::string> databases;
        // A list (an object's values would iterate too, and a string would be one blob).
        const nlohmann::json& entries = index.at("blobs");
        if (!entries.is_array()) throw fail("\"blobs\" is not a list");
        for (const nlohmann::json& entry : entries) {
            BundleBlob blob;
            blob.kind = entry.at("kind").get<std::string>();
            blob.name = printable_field(entry.at("name"), "blob name");
            blob.offset = count_field(entry, "offset", blob.name);
            blob.size = count_field(entry, "size", blob.name);
            blob.sha256 = entry.at("sha256").get<std::string>();
            if (blob.size > kMaxBlobBytes || blob.offset > data_size || blob.size > data_size - blob.offset)
                throw fail(fmt::format("blob {} ({} bytes at {}) lies outside the file", blob.name, blob.size, blob.offset));
            if (!DiskCache::valid_key(blob.sha256)) throw fail(fmt::format("blob {} has no SHA-256", blob.name));
            if (blob.kind == "kernel") {
                blob.arch = printable_field(entry.at("arch"), "kernel arch");
                if (!DiskCache::valid_key(blob.name)) throw fail(fmt::format("kernel {:.80} is not a cache key", blob.name));
                if (!kernels_.emplace(blob.name, blobs_.size()).second)
                    throw fail(fmt::format("kernel {} appears twice", blob.name));
            } else if (blob.kind == "database") {
                // A plain file name: unpack writes it into a directory of the user's choosing.
                if (blob.name.empty() || blob.name.find('/') != std::string::npos || blob.name == "." ||
                    blob.name == ".." || blob.name.find('\0') != std::string::npos)
                    throw fail(fmt::format("database name {:?} is not a plain file name", blob.name));
                if (!databases.insert(blob.name).second) throw fail(fmt::format("database {} appears twice", blob.name));
            } else {
                throw fail(fmt::format("blob {} has unknown kind {:?}", blob.name, blob.kind));
            }
            blobs_.push_back(std::move(blob));
        }
        // The blobs lie one after another, as write_bundle lays them: blobs sharing bytes would
        // let a small file name the same 256 MB many times over (a database read, and held, for
        // each of them), where disjoint ones hold at most the file's size in all.
        std::vector<std::pair<uint64_t, uint64_t>> spans;  // offset, end
        for (const BundleBlob& blob : blobs_) spans.emplace_back(blob.offset, blob.offset + blob.size);
        std::sort(spans.begin(), spans.end());
        for (size_t i = 1; i < spans.size(); ++i)
            if (spans[i].first < spans[i - 1].second)
                throw fail(fmt::format("blobs overlap (bytes {} to {} are in two of them)", spans[i].first,
                                       std::min(spans[i].second, spans[i - 1].second)));
    } catch (const FileError&) {
        throw;
    } catch (const std::exception& e) {
        throw fail(fmt::format("malformed index: {}", e.what()));
    }
}

Bundle::~Bundle() {
    if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string> Bundle::read_checked(const BundleBlob& blob, std::string* why) const {
    std::string bytes;
    if (!read_at(fd_, data_start_ + blob.offset, blob.size, bytes)) {
        *why = "cannot be read";
        return std::nullopt;
    }
    if (util::sha256_hex(bytes) != blob.sha256) {
        *why = "fails its checksum";
        return std::nullopt;
    }
    return bytes;
}

std::optional<std::string> Bundle::kernel(const std::string& key) const {
    const auto it = kernels_.find(key);
    if (it == kernels_.end()) return std::nullopt;
    std::string why;
    std::optional<std::string> payload = read_checked(blobs_[it->second], &why);
    if (!payload) util::logger().warn("tileops: bundle {}: kernel {} {}; using the kernel cache instead", path_.string(), key, why);
    return payload;
}

std::string Bundle::read(const BundleBlob& blob) const {
    std::string why;
    std::optional<std::string> bytes = read_checked(blob, &why);
    if (!bytes) throw FileError(fmt::format("tileops: bundle {}: {} {} {}", path_.string(), blob.kind, blob.name, why));
    return std::move(*bytes);
}

std::vector<std::pair<std::string, std::string>> Bundle::databases() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const BundleBlob& blob : blobs_)
        if (blob.kind == "database") out.emplace_back(blob.name, read(blob));
    return out;
}

}  // namespace tileops::jit
