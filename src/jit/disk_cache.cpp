#include "jit/disk_cache.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "tileops/error.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

namespace tileops::jit {
namespace fs = std::filesystem;
using Clock = std::chrono::system_clock;

namespace {

// ---- Entry file format -------------------------------------------------------------------------
// magic[8] | version u32 | key length u32 | key | payload length u64 | SHA-256(payload)[32] | payload
// Integers are little-endian.
constexpr std::string_view kMagic{"TOPSKRNL", 8};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kDigestSize = 32;
constexpr std::string_view kEntrySuffix = ".cubin";
constexpr std::string_view kLockSuffix = ".lock";
constexpr size_t kKeySize = 64;

void put_le(std::string& out, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view data, size_t offset, int bytes) {
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value |= uint64_t(static_cast<unsigned char>(data[offset + i])) << (8 * i);
    return value;
}

std::string digest_bytes(std::string_view payload) {
    auto digest = util::Sha256().update(payload).digest();
    return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string encode_entry(std::string_view key, std::string_view payload) {
    std::string out;
    out.reserve(kMagic.size() + 16 + key.size() + kDigestSize + payload.size());
    out.append(kMagic);
    put_le(out, kFormatVersion, 4);
    put_le(out, key.size(), 4);
    out.append(key);
    put_le(out, payload.size(), 8);
    out.append(digest_bytes(payload));
    out.append(payload);
    return out;
}

// Returns the payload's offset in `data` when `data` is a sound entry for `key`; sets `why` otherwise.
std::optional<size_t> check_entry(std::string_view data, std::string_view key, std::string& why) {
    const size_t fixed = kMagic.size() + 4 + 4;
    if (data.size() < fixed) {
        why = fmt::format("file is {} bytes, shorter than a header", data.size());
        return std::nullopt;
    }
    if (data.substr(0, kMagic.size()) != kMagic) {
        why = "not a tileops cache entry (bad magic)";
        return std::nullopt;
    }
    const uint64_t version = get_le(data, kMagic.size(), 4);
    if (version != kFormatVersion) {
        why = fmt::format("entry format version {}, expected {}", version, kFormatVersion);
        return std::nullopt;
    }
    const uint64_t key_size = get_le(data, kMagic.size() + 4, 4);
    const uint64_t header = fixed + key_size + 8 + kDigestSize;
    if (key_size != key.size() || data.size() < header) {
        why = fmt::format("truncated or malformed header ({} bytes, key length {})", data.size(), key_size);
        return std::nullopt;
    }
    if (const std::string_view written = data.substr(fixed, key_size); written != key) {
        // Logged: the file's bytes only when they are a key, never control characters that could
        // drive the terminal the log is read on.
        why = DiskCache::valid_key(written) ? fmt::format("entry was written for key {}", written)
                                            : std::string("entry was written for no valid key");
        return std::nullopt;
    }
    const uint64_t payload_size = get_le(data, fixed + key_size, 8);
    if (payload_size != data.size() - header) {
        why = fmt::format("payload is {} bytes, header says {} (truncated?)", data.size() - header, payload_size);
        return std::nullopt;
    }
    std::string_view digest = data.substr(fixed + key_size + 8, kDigestSize);
    if (digest != digest_bytes(data.substr(header))) {
        why = "payload checksum mismatch";
        return std::nullopt;
    }
    return static_cast<size_t>(header);
}

// ---- Small filesystem helpers (errors are results, never exceptions) ---------------------------

Clock::time_point mtime_of(const struct stat& st) {
    auto since_epoch = std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(since_epoch));
}

// Sets the file's times to now: the entry's "last use" for LRU eviction. Best effort.
void touch(const fs::path& path) {
    if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0)
        util::logger().debug("tileops: cannot refresh the time of {}: {}", path.string(), std::strerror(errno));
}

bool remove_file(const fs::path& path) { return ::unlink(path.c_str()) == 0 || errno == ENOENT; }

// An entry path holding anything: a file or link is unlinked, a directory removed with what it
// holds (remove_all does not follow links out of it).
void remove_entry(const fs::path& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    } else {
        remove_file(path);
    }
}

// The fan directory (<dir>/<key[0:2]>) of an entry about to be locked or written must be the
// cache's own directory: a link there (to a directory outside, or dangling) would put the entry,
// its lock file and eviction's unlinks outside the cache, and a file there fails every write.
// Either is damage, removed as a damaged entry is (the next write creates the directory).
void remove_foreign_fan(const fs::path& fan) {
    struct stat st {};
    if (::lstat(fan.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return;
    util::logger().warn("tileops: removing {} from the kernel cache: {} where a directory of entries belongs",
                        fan.string(), S_ISLNK(st.st_mode) ? "a link" : "not a directory");
    remove_file(fan);
}

bool is_hex_pair(const std::string& name) {
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
    return name.size() == 2 && hex(name[0]) && hex(name[1]);
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct FileInfo {
    std::string key;  // empty for temporary files
    fs::path path;
    uint64_t size = 0;
    Clock::time_point mtime;
};

struct Scan {
    std::vector<FileInfo> entries;
    std::vector<FileInfo> locks;
    std::vector<FileInfo> temps;
};

// Lists the cache directory's entries, lock files and temporary files. A missing directory is empty.
Scan scan_directory(const fs::path& dir) {
    Scan scan;
    std::error_code ec;
    for (fs::directory_iterator top(dir, ec), end; !ec && top != end; top.increment(ec)) {
        const std::string fan = top->path().filename().string();
        std::error_code link_ec;
        if (!is_hex_pair(fan) || top->is_symlink(link_ec)) continue;  // never maintain a linked directory's files
        std::error_code sub_ec;
        for (fs::directory_iterator it(top->path(), sub_ec); !sub_ec && it != end; it.increment(sub_ec)) {
            const std::string name = it->path().filename().string();
            struct stat st {};
            if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
            FileInfo info{{}, it->path(), static_cast<uint64_t>(st.st_size), mtime_of(st)};
            if (name[0] == '.' && name.find(".tmp.") != std::string::npos) {
                scan.temps.push_back(std::move(info));
                continue;
            }
            std::string_view suffix;
            if (ends_with(name, kEntrySuffix)) suffix = kEntrySuffix;
            else if (ends_with(name, kLockSuffix)) suffix = kLockSuffix;
            else continue;
            info.key = name.substr(0, name.size() - suffix.size());
            if (!DiskCache::valid_key(info.key) || info.key.compare(0, 2, fan) != 0) continue;
            (suffix == kEntrySuffix ? scan.entries : scan.locks).push_back(std::move(info));
        }
    }
    return scan;
}

void check_key(std::string_view key) {
    if (!DiskCache::valid_key(key))
        throw InvalidArgument(fmt::format("tileops: kernel cache key '{}' is not 64 lowercase hex digits", key));
}

// Takes the key's lock file exclusive if nobody holds it; an unopenable lock file counts as busy.
std::optional<util::FileLock> try_exclusive(const fs::path& lock_path) {
    try {
        auto lock = util::FileLock::try_lock(lock_path, util::FileLock::Mode::exclusive);
        if (lock.owns()) return std::optional<util::FileLock>(std::move(lock));
    } catch (const FileError& e) {
        util::logger().debug("tileops: {}", e.what());
    }
    return std::nullopt;
}

}  // namespace

// ---- DiskCache ---------------------------------------------------------------------------------

DiskCache::DiskCache(fs::path directory, uint64_t max_bytes)
    : directory_(std::move(directory)), max_bytes_(max_bytes) {}

fs::path DiskCache::default_directory() {
    if (auto dir = util::env("TILEOPS_CACHE_DIR")) return fs::path(*dir);
    const fs::path sub = fs::path("tileops_jit") / "kernels";
    // The XDG spec says relative values are invalid and must be ignored.
    if (auto xdg = util::env("XDG_CACHE_HOME"); xdg && fs::path(*xdg).is_absolute()) return fs::path(*xdg) / sub;
    std::optional<std::string> home = util::env("HOME");
    if (!home) {
        struct passwd pw {};
        struct passwd* result = nullptr;
        std::array<char, 4096> buffer{};
        if (::getpwuid_r(::getuid(), &pw, buffer.data(), buffer.size(), &result) == 0 && result != nullptr &&
            result->pw_dir != nullptr && *result->pw_dir != '\0')
            home = std::string(result->pw_dir);
    }
    if (home) return fs::path(*home) / ".cache" / sub;
    std::error_code ec;
    fs::path tmp = fs::temp_directory_path(ec);
    if (ec) tmp = "/tmp";
    // A shared temp directory: another user could create this name first and swap in cubins the
    // runtime would run, so it must be this user's alone.
    const fs::path own = tmp / fmt::format("tileops_jit-{}", ::getuid());
    util::make_private_directory(own, "the kernel cache's fallback (no HOME); set TILEOPS_CACHE_DIR");
    return own / "kernels";
}

uint64_t DiskCache::default_max_bytes() {
    auto value = util::env("TILEOPS_CACHE_MAX_MB");
    if (!value) return kDefaultMaxMb << 20;
    uint64_t mb = 0;
    const char* first = value->data();
    const char* last = first + value->size();
    auto [end, ec] = std::from_chars(first, last, mb);
    if (ec != std::errc() || end != last || mb > (std::numeric_limits<uint64_t>::max() >> 20))
        throw InvalidArgument(fmt::format("tileops: TILEOPS_CACHE_MAX_MB='{}' is not a number of MB", *value));
    return mb << 20;
}

bool DiskCache::valid_key(std::string_view key) noexcept {
    return key.size() == kKeySize &&
           std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

fs::path DiskCache::entry_path(std::string_view key) const {
    check_key(key);
    return directory_ / std::string(key.substr(0, 2)) / (std::string(key) + std::string(kEntrySuffix));
}

fs::path DiskCache::lock_path(std::string_view key) const {
    check_key(key);
    return directory_ / std::string(key.substr(0, 2)) / (std::string(key) + std::string(kLockSuffix));
}

DiskCache::ReadResult DiskCache::read_entry(const std::string& key) const {
    ReadResult result;
    const fs::path path = entry_path(key);
    auto data = util::read_file(path);
    if (!data) {
        // Something that is not a file (a directory, a FIFO, a link to a device) is damage to
        // remove, or it would stay in the way of every build; anything else is a miss.
        struct stat st {};
        if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
            result.status = ReadStatus::damaged;
            result.payload = S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file";
        }
        return result;
    }
    std::string why;
    if (auto offset = check_entry(*data, key, why)) {
        result.status = ReadStatus::hit;
        result.payload = data->substr(*offset);
    } else {
        result.status = ReadStatus::damaged;
        result.payload = std::move(why);
    }
    return result;
}

std::optional<std::string> DiskCache::load(const std::string& key) {
    const fs::path path = entry_path(key);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        util::logger().debug("tileops: kernel cache miss {}", key);
        return std::nullopt;
    }
    // A shared lock waits for a builder or evictor that holds the key's lock file; where there is
    // no lock file nobody holds it, and reading creates none (entries are replaced by rename, so a
    // read never sees half a file). A cache we cannot lock (read-only) cannot be evicted from
    // either, so we read it without one.
    std::optional<util::FileLock> lock;
    try {
        lock = util::FileLock::if_present(lock_path(key), util::FileLock::Mode::shared);
    } catch (const FileError& e) {
        util::logger().debug("tileops: reading {} without a lock: {}", path.string(), e.what());
    }
    ReadResult entry = read_entry(key);
    switch (entry.status) {
        case ReadStatus::hit:
            touch(path);
            util::logger().debug("tileops: kernel cache hit {} ({} bytes)", key, entry.payload.size());
            return std::move(entry.payload);
        case ReadStatus::missing:
            util::logger().debug("tileops: kernel cache miss {} (removed meanwhile)", key);
            return std::nullopt;
        case ReadStatus::damaged:
            util::logger().warn("tileops: ignoring damaged kernel cache entry {}: {}", path.string(), entry.payload);
            return std::nullopt;
    }
    return std::nullopt;
}

void DiskCache::write_entry(const std::string& key, std::string_view payload) {
    const fs::path path = entry_path(key);
    remove_foreign_fan(path.parent_path());
    try {
        util::write_file_atomic(path, encode_entry(key, payload));
    } catch (const FileError& e) {
        throw FileError(fmt::format("tileops: cannot write kernel cache entry {}: {}", path.string(), e.what()));
    }
    util::logger().debug("tileops: stored kernel cache entry {} ({} bytes)", key, payload.size());
}

void DiskCache::store(const std::string& key, std::string_view payload) {
    write_entry(key, payload);
    after_store(key);
}

void DiskCache::store_if_writable(const std::string& key, std::string_view payload) {
    try {
        write_entry(key, payload);
    } catch (const FileError& e) {
        warn_unwritable(e.what());
        return;
    }
    after_store(key);
}

std::string DiskCache::get_or_build(const std::string& key, const std::function<std::string()>& build, bool* built) {
    check_key(key);
    if (auto hit = load(key)) {
        if (built) *built = false;
        return std::move(*hit);
    }
    // Threads of this process share one attempt per key; processes are serialized by the lock file.
    bool ran = false;
    std::string payload = in_flight_.get_or_compute(key, [&] { return build_locked(key, build, ran); });
    if (built) *built = ran;
    return payload;
}

std::string DiskCache::build_locked(const std::string& key, const std::function<std::string()>& build, bool& ran) {
    std::optional<util::FileLock> lock;
    remove_foreign_fan(lock_path(key).parent_path());  // before the lock file is created in it
    try {
        lock.emplace(lock_path(key), util::FileLock::Mode::exclusive);
        lock->remove_on_release(lock_path(key));  // no lock file stays beside the entry
    } catch (const FileError& e) {
        warn_unwritable(e.what());
    }
    if (lock) {
        // Another thread or process may have built it while we waited for the lock.
        ReadResult entry = read_entry(key);
        if (entry.status == ReadStatus::hit) {
            touch(entry_path(key));
            util::logger().debug("tileops: kernel cache hit {} (built by another caller)", key);
            return std::move(entry.payload);
        }
        if (entry.status == ReadStatus::damaged) {
            // Remove it now so that a failing build does not leave it behind.
            util::logger().debug("tileops: removing damaged kernel cache entry {}: {}", key, entry.payload);
            remove_entry(entry_path(key));
        }
    }
    util::logger().debug("tileops: kernel cache miss {}; building", key);
    ran = true;
    std::string payload = build();  // on an exception the lock is released and nothing is written
    try {
        write_entry(key, payload);
    } catch (const FileError& e) {
        warn_unwritable(e.what());
        return payload;
    }
    lock.reset();  // let waiters for this key in, then evict
    after_store(key);
    return payload;
}

void DiskCache::warn_unwritable(const std::string& what) {
    if (!warned_unwritable_.exchange(true))
        util::logger().warn("tileops: the kernel cache {} cannot be written; kernels are built but not cached ({})",
                      directory_.string(), what);
    else
        util::logger().debug("tileops: kernel cache not written: {}", what);
}

void DiskCache::after_store(const std::string& key) {
    // Housekeeping must never fail a store that succeeded.
    try {
        evict(key);
    } catch (const std::exception& e) {
        util::logger().warn("tileops: kernel cache maintenance in {} failed: {}", directory_.string(), e.what());
    }
}

std::size_t DiskCache::evict(const std::string& keep) {
    const auto now_steady = std::chrono::steady_clock::now().time_since_epoch();
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now_steady).count();
    const int64_t last = last_cleanup_ns_.load();
    const bool cleanup_due = last == 0 || now_ns - last > std::chrono::nanoseconds(std::chrono::minutes(1)).count();
    if (max_bytes_ == 0 && !cleanup_due) return 0;  // nothing to do: skip the directory scan

    std::lock_guard<std::mutex> guard(maintenance_mutex_);
    Scan scan = scan_directory(directory_);

    if (cleanup_due) {
        last_cleanup_ns_.store(now_ns);
        const auto stale = Clock::now() - kStaleAge;
        for (const FileInfo& temp : scan.temps) {
            if (temp.mtime < stale && remove_file(temp.path))
                util::logger().debug("tileops: removed stale temporary file {}", temp.path.string());
        }
        std::vector<std::string> keys;
        for (const FileInfo& entry : scan.entries) keys.push_back(entry.key);
        std::sort(keys.begin(), keys.end());
        for (const FileInfo& lock_file : scan.locks) {
            if (lock_file.mtime >= stale || std::binary_search(keys.begin(), keys.end(), lock_file.key)) continue;
            if (auto lock = try_exclusive(lock_file.path)) {
                // Re-check under the lock: a builder may have stored the entry meanwhile.
                struct stat st {};
                if (::stat(entry_path(lock_file.key).c_str(), &st) != 0 && remove_file(lock_file.path))
                    util::logger().debug("tileops: removed orphan lock file {}", lock_file.path.string());
            }
        }
    }

    if (max_bytes_ == 0) return 0;
    uint64_t total = 0;
    for (const FileInfo& entry : scan.entries) total += entry.size;
    if (total <= max_bytes_) return 0;

    // Least recently used first; the key breaks ties so that the order is deterministic.
    std::sort(scan.entries.begin(), scan.entries.end(), [](const FileInfo& a, const FileInfo& b) {
        return a.mtime != b.mtime ? a.mtime < b.mtime : a.key < b.key;
    });
    std::size_t removed = 0;
    for (const FileInfo& entry : scan.entries) {
        if (total <= max_bytes_) break;
        if (entry.key == keep) continue;
        auto lock = try_exclusive(lock_path(entry.key));
        if (!lock) {
            util::logger().debug("tileops: not evicting kernel cache entry {}: in use", entry.key);
            continue;
        }
        struct stat st {};
        if (::stat(entry.path.c_str(), &st) != 0) {  // someone else removed it
            total -= std::min(total, entry.size);
            continue;
        }
        if (mtime_of(st) > entry.mtime) {
            util::logger().debug("tileops: not evicting kernel cache entry {}: used since the scan", entry.key);
            continue;
        }
        if (!remove_file(entry.path)) {
            util::logger().debug("tileops: cannot evict {}: {}", entry.path.string(), std::strerror(errno));
            continue;
        }
        remove_file(lock_path(entry.key));  // still ours until `lock` goes out of scope
        total -= std::min(total, static_cast<uint64_t>(st.st_size));
        ++removed;
        util::logger().debug("tileops: evicted kernel cache entry {} ({} bytes)", entry.key, st.st_size);
    }
    if (total > max_bytes_)
        util::logger().debug("tileops: kernel cache {} holds {} bytes, over its bound of {} (entries in use)",
                       directory_.string(), total, max_bytes_);
    return removed;
}

std::vector<DiskCacheEntry> DiskCache::entries() const {
    Scan scan = scan_directory(directory_);
    std::vector<DiskCacheEntry> out;
    out.reserve(scan.entries.size());
    for (FileInfo& info : scan.entries) out.push_back({std::move(info.key), std::move(info.path), info.size, info.mtime});
    std::sort(out.begin(), out.end(), [](const DiskCacheEntry& a, const DiskCacheEntry& b) { return a.key < b.key; });
    return out;
}

uint64_t DiskCache::total_bytes() const {
    uint64_t total = 0;
    for (const FileInfo& entry : scan_directory(directory_).entries) total += entry.size;
    return total;
}

std::size_t DiskCache::clear() {
    std::lock_guard<std::mutex> guard(maintenance_mutex_);
    Scan scan = scan_directory(directory_);
    std::size_t removed = 0;
    for (const FileInfo& entry : scan.entries) {
        auto lock = try_exclusive(lock_path(entry.key));
        if (!lock) {
            util::logger().debug("tileops: not removing kernel cache entry {}: in use", entry.key);
            continue;
        }
        if (remove_file(entry.path)) {
            remove_file(lock_path(entry.key));
            ++removed;
        }
    }
    const auto stale = Clock::now() - kStaleAge;
    for (const FileInfo& temp : scan.temps)
        if (temp.mtime < stale) remove_file(temp.path);
    for (const FileInfo& lock_file : scan.locks) {
        if (auto lock = try_exclusive(lock_file.path)) {
            struct stat st {};
            if (::stat(entry_path(lock_file.key).c_str(), &st) != 0) remove_file(lock_file.path);
        }
    }
    util::logger().debug("tileops: cleared {} entries from the kernel cache {}", removed, directory_.string());
    return removed;
}

}  // namespace tileops::jit
