// The on-disk kernel cache: one file per key (a hex SHA-256 of everything the cubin depends on),
// shared by all threads and processes that use the same directory.
//
// Layout: <dir>/<key[0:2]>/<key>.cubin holds the entry, <dir>/<key[0:2]>/<key>.lock is its lock
// file. An entry is a small header (magic, format version, the key, the payload length, the
// SHA-256 of the payload) followed by the payload; a file that is short, damaged or written for
// another key is a miss, never an error. Entries are written atomically (temporary file + rename).
//
// Locking (flock on the key's lock file): a reader holds it shared while reading an entry, a
// builder holds it exclusive from its second look-up until the entry is stored, the evictor takes
// it exclusive without waiting and skips entries it cannot lock. Cold processes asking for one key
// therefore build it once; misses on different keys never wait for each other.
//
// Size bound: after a store, when the entries together exceed max_bytes, the least recently used
// ones (by file mtime, which a hit refreshes) are removed until they fit; the entry just stored is
// never removed. The same pass removes stale temporary files and old orphan lock files.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/in_flight.hpp"

namespace tileops::jit {

struct DiskCacheEntry {
    std::string key;
    std::filesystem::path path;
    uint64_t size = 0;                               // bytes on disk, header included
    std::chrono::system_clock::time_point last_use;  // last store or hit (the file's mtime)
};

class DiskCache {
public:
    static constexpr uint64_t kDefaultMaxMb = 2048;
    // Temporary files and orphan lock files older than this are removed by the maintenance pass.
    static constexpr std::chrono::minutes kStaleAge{10};

    // max_bytes == 0: unbounded. Creates nothing until the first store or build.
    explicit DiskCache(std::filesystem::path directory, uint64_t max_bytes = default_max_bytes());
    DiskCache(const DiskCache&) = delete;
    DiskCache& operator=(const DiskCache&) = delete;

    // TILEOPS_CACHE_DIR, else $XDG_CACHE_HOME/tileops_jit/kernels, else ~/.cache/tileops_jit/kernels.
    static std::filesystem::path default_directory();
    // TILEOPS_CACHE_MAX_MB (0 = unbounded) in bytes, else kDefaultMaxMb MB. Throws
    // tileops::InvalidArgument when the variable is not a number.
    static uint64_t default_max_bytes();
    // A key is 64 lowercase hex digits (a SHA-256); anything else is tileops::InvalidArgument.
    static bool valid_key(std::string_view key) noexcept;

    const std::filesystem::path& directory() const noexcept { return directory_; }
    uint64_t max_bytes() const noexcept { return max_bytes_; }
    std::filesystem::path entry_path(std::string_view key) const;
    std::filesystem::path lock_path(std::string_view key) const;

    // The payload stored for `key`, or nullopt when it is missing or its file is damaged (logged at
    // warn). Refreshes the entry's last use on a hit. Never throws for a missing or bad file.
    // Reads under the key's shared lock, so it may wait while another process evicts the entry or
    // rebuilds a damaged one; a missing entry is reported without taking any lock.
    std::optional<std::string> load(const std::string& key);

    // Writes the entry atomically, then enforces the size bound. Throws tileops::FileError naming
    // the path when the directory cannot be created or the file cannot be written.
    void store(const std::string& key, std::string_view payload);
    // store(), except that a cache that cannot be written (read-only, no space) is logged at warn
    // once per DiskCache, as get_or_build() does, instead of failing: the caller has the payload.
    void store_if_writable(const std::string& key, std::string_view payload);
    // Whether a write of this DiskCache failed (the cache is read-only or full): what a command that
    // stored entries and finds some missing tells from a size bound that evicted them.
    bool had_write_failure() const noexcept { return warned_unwritable_.load(); }

    // load(), else build() and store() under the key's exclusive lock after a second look-up, so
    // that concurrent threads and processes build a key once. *built (when given) is true only for
    // the caller whose build() ran. If build() throws, nothing is written and the exception
    // propagates. If the cache cannot be written (read-only, no space), returns the built bytes
    // and logs a warning once per DiskCache.
    std::string get_or_build(const std::string& key, const std::function<std::string()>& build,
                             bool* built = nullptr);

    // Every readable entry (damaged files included; their key is their file name), sorted by key.
    std::vector<DiskCacheEntry> entries() const;
    // Bytes of all entries on disk.
    uint64_t total_bytes() const;
    // Removes every entry that is not in use (in-use ones are skipped), with its lock file, and
    // stale temporary files. Returns the number of entries removed.
    std::size_t clear();
    // Enforces the size bound now (store() does it on its own); `keep` is never removed. Returns the
    // number of entries removed.
    std::size_t evict(const std::string& keep = {});

private:
    enum class ReadStatus { hit, missing, damaged };
    struct ReadResult {
        ReadStatus status = ReadStatus::missing;
        std::string payload;  // the payload on a hit; why the file is damaged otherwise
    };

    ReadResult read_entry(const std::string& key) const;
    void write_entry(const std::string& key, std::string_view payload);
    std::string build_locked(const std::string& key, const std::function<std::string()>& build, bool& ran);
    void after_store(const std::string& key);
    void warn_unwritable(const std::string& what);

    std::filesystem::path directory_;
    uint64_t max_bytes_;
    InFlight<std::string, std::string> in_flight_;
    std::mutex maintenance_mutex_;  // one eviction/cleanup pass at a time in this process
    std::atomic<bool> warned_unwritable_{false};
    std::atomic<int64_t> last_cleanup_ns_{0};  // steady clock; 0 = never
};

}  // namespace tileops::jit
