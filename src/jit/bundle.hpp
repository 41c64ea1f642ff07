// A fleet bundle: one relocatable, checksummed file holding the tuning databases and the compiled
// kernels (kernel cache payloads, by cache key) that a fleet of GPUs needs, for one or more archs.
// `tileops-tune pack` makes it; a process serves it read-only ahead of its disk cache
// (TILEOPS_BUNDLE or RuntimeOptions::bundle), or `tileops-tune unpack` copies it into a cache
// directory. A bundle is never written once made, so it can sit on a read-only image.
//
// Layout: the magic "TILEOPS-BUNDLE-1\n", the index's length (8 bytes, little-endian), the index
// (JSON: "format", "nvrtc_version", "archs", and "blobs": for each its "kind" ("database" or
// "kernel"), "name" (a database's file name or a kernel's cache key), "arch" (kernels), "offset"
// (from the end of the index), "size" and "sha256"), then the blobs. Nothing in it is a path, so
// the file can move. Each blob is checked against its SHA-256 whenever it is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tileops::jit {

struct BundleBlob {
    std::string kind;  // "database" or "kernel"
    std::string name;  // a database's file name, a kernel's cache key
    std::string arch;  // kernels: the arch they were compiled for
    uint64_t offset = 0, size = 0;
    std::string sha256;
};

// What `tileops-tune pack` puts in a bundle.
struct BundleContents {
    std::string nvrtc_version;
    std::vector<std::string> archs;
    std::vector<std::pair<std::string, std::string>> databases;  // file name, JSON text
    struct Kernel {
        std::string key, arch, payload;
    };
    std::vector<Kernel> kernels;
};

inline constexpr const char* kBundleMagic = "TILEOPS-BUNDLE-1\n";
inline constexpr int kBundleFormat = 1;

// Writes a bundle atomically (util::write_file_atomic). Throws FileError.
void write_bundle(const std::filesystem::path& path, const BundleContents& contents);

// An open bundle. Opening reads and checks the index: the file must be a regular file (links are
// not followed), the index well formed, every blob inside the file, names unique, kernel keys
// cache keys; anything else is FileError naming the file and what is wrong.
class Bundle {
public:
    static constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;
    static constexpr uint64_t kMaxBlobBytes = uint64_t{256} << 20;

    explicit Bundle(const std::filesystem::path& path);
    ~Bundle();
    Bundle(const Bundle&) = delete;
    Bundle& operator=(const Bundle&) = delete;

    const std::filesystem::path& path() const noexcept { return path_; }
    const std::string& nvrtc_version() const noexcept { return nvrtc_version_; }
    const std::vector<std::string>& archs() const noexcept { return archs_; }
    const std::vector<BundleBlob>& blobs() const noexcept { return blobs_; }

    // The payload of the kernel with this cache key; nullopt when the bundle has none, or its
    // blob fails its checksum (logged at warn: the caller falls back to its cache).
    std::optional<std::string> kernel(const std::string& key) const;
    // The blob's bytes, checked; FileError when they fail the checksum or cannot be read.
    std::string read(const BundleBlob& blob) const;
    // The databases, as (file name, JSON text), checked.
    std::vector<std::pair<std::string, std::string>> databases() const;

private:
    std::optional<std::string> read_checked(const BundleBlob& blob, std::string* why) const;

    std::filesystem::path path_;
    int fd_ = -1;
    uint64_t data_start_ = 0;
    std::string nvrtc_version_;
    std::vector<std::string> archs_;
    std::vector<BundleBlob> blobs_;
    std::map<std::string, size_t> kernels_;  // cache key -> index in blobs_
};

}  // namespace tileops::jit
