// Small filesystem helpers shared by the kernel cache and the tuning database: whole-file reads,
// atomic writes (temporary file in the same directory, fsync, rename) and advisory file locks.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace tileops::util {

// The largest file read_file reads by default (databases, cache entries, templates): 256 MiB.
inline constexpr size_t kMaxReadBytes = size_t{256} << 20;

// Reads a whole regular file of at most `max_bytes`. Returns nullopt, with the reason in `why`
// when given, when it does not exist or cannot be read, is not a regular file (a FIFO would block
// the reader, a device such as /dev/zero never ends) or is larger. Links are followed.
std::optional<std::string> read_file(const std::filesystem::path& path, size_t max_bytes = kMaxReadBytes,
                                     std::string* why = nullptr);

// Writes `data` to `path` so that readers see either the old file or the whole new one, never a
// partial file: writes a uniquely named temporary file in the same directory, fsyncs it, renames
// it over `path`, then fsyncs the directory. Creates the directory if needed. Throws FileError.
void write_file_atomic(const std::filesystem::path& path, std::string_view data);

// An advisory lock (flock) on a lock file, held for the object's lifetime. Locks are per open
// file description, so they also exclude other threads of this process that open their own lock.
class FileLock {
public:
    enum class Mode { shared, exclusive };

    // Blocks until the lock is taken. Creates the lock file (and its directory) if needed.
    FileLock(const std::filesystem::path& path, Mode mode);
    // Takes the lock only if it is free now; check owns().
    static FileLock try_lock(const std::filesystem::path& path, Mode mode);
    // Takes the lock only where the lock file exists, waiting for it; nullopt when there is none
    // (no holder to wait for). Readers use it, so that reading leaves no lock file behind.
    static std::optional<FileLock> if_present(const std::filesystem::path& path, Mode mode);

    // Unlinks the lock file as the lock is released, so that none is left behind: the exclusive
    // holder's job. Whoever waits on the unlinked file notices once it gets it and locks the
    // path's new file instead (the constructors check the file is still at the path).
    void remove_on_release(const std::filesystem::path& path) { remove_path_ = path; }

    FileLock(FileLock&& other) noexcept;
    FileLock& operator=(FileLock&& other) noexcept;
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;
    ~FileLock();

    bool owns() const noexcept { return fd_ >= 0; }

private:
    FileLock() = default;
    void release() noexcept;
    int fd_ = -1;
    std::filesystem::path remove_path_;  // empty: the lock file stays
};

// Creates `dir` with mode 0700, or checks that the one there is a directory (not a link) owned by
// this user and writable by no one else; throws tileops::FileError naming it and `what` it is for
// otherwise. For directories under a shared one such as /tmp.
void make_private_directory(const std::filesystem::path& dir, const char* what);

// Reads an environment variable; nullopt when unset or empty.
std::optional<std::string> env(const char* name);

// An on/off environment variable: false when unset or empty, "0" or "1" otherwise; anything else
// ("true", "yes", "off") is a tileops::InvalidArgument naming the variable.
bool env_switch(const char* name);

}  // namespace tileops::util
