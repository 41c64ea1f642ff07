#include "util/file_util.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops::util {
namespace fs = std::filesystem;

std::optional<std::string> read_file(const fs::path& path, size_t max_bytes, std::string* why) {
    const auto fail = [&](std::string reason) -> std::optional<std::string> {
        if (why != nullptr) *why = std::move(reason);
        return std::nullopt;
    };
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fail(std::strerror(errno));
    struct FdCloser {
        int fd;
        ~FdCloser() { ::close(fd); }
    } closer{fd};
    struct stat info {};
    if (::fstat(fd, &info) != 0) return fail(std::strerror(errno));
    if (!S_ISREG(info.st_mode)) return fail("not a regular file");
    if (static_cast<unsigned long long>(info.st_size) > max_bytes)
        return fail(fmt::format("{} bytes, more than the {} allowed", info.st_size, max_bytes));
    std::string data(static_cast<size_t>(info.st_size), '\0');
    size_t done = 0;
    while (done <= max_bytes) {  // the file may grow while it is read: stop one byte past the cap
        if (done == data.size()) data.resize(std::min(max_bytes + 1, data.size() + 4096));
        const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail(std::strerror(errno));
        }
        if (n == 0) break;
        done += static_cast<size_t>(n);
    }
    if (done > max_bytes) return fail(fmt::format("more than the {} bytes allowed", max_bytes));
    data.resize(done);
    return data;
}

namespace {

void fsync_directory(const fs::path& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;  // best effort: some filesystems refuse to open directories
    ::fsync(fd);
    ::close(fd);
}

void write_all(int fd, std::string_view data, const fs::path& tmp) {
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw FileError(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)));
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
}

}  // namespace

namespace {

// Temporary files of earlier writes of `name` in `dir` whose writer was killed (kill -9 leaves
// them; a database's can be tens of MB): removed when their process is gone and they are older
// than any write takes (the age also spares a writer on another host sharing the directory).
void remove_abandoned_temps(const fs::path& dir, const std::string& name) {
    const std::string prefix = "." + name + ".tmp.";
    std::error_code ec;
    const auto old = fs::file_time_type::clock::now() - std::chrono::minutes(10);
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string file = it->path().filename().string();
        if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string rest = file.substr(prefix.size());  // "<pid>.<counter>"
        const size_t dot = rest.find('.');
        if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789.") != std::string::npos) continue;
        const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
        if (pid <= 0 || pid == ::getpid()) continue;
        // A live process answers, another user's fails with EPERM: only ESRCH means it is gone.
        if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
        std::error_code age_error;
        if (!it->is_regular_file(age_error) || fs::last_write_time(it->path(), age_error) > old || age_error) continue;
        ::unlink(it->path().c_str());
    }
}

}  // namespace

void write_file_atomic(const fs::path& path, std::string_view data) {
    fs::path dir = path.parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw FileError(fmt::format("cannot create directory {}: {}", dir.string(), ec.message()));
    remove_abandoned_temps(dir, path.filename().string());

    static std::atomic<unsigned> counter{0};
    fs::path tmp = dir / fmt::format(".{}.tmp.{}.{}", path.filename().string(), ::getpid(), counter++);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw FileError(fmt::format("cannot create {}: {}", tmp.string(), std::strerror(errno)));
    try {
        // A file rewritten in place keeps its permissions (a shared database stays group-writable);
        // a link at `path` is replaced, never written through.
        struct stat existing {};
        if (::lstat(path.c_str(), &existing) == 0 && S_ISREG(existing.st_mode) && ::fchmod(fd, existing.st_mode & 07777) != 0)
            throw FileError(fmt::format("cannot set the mode of {}: {}", tmp.string(), std::strerror(errno)));
        write_all(fd, data, tmp);
        if (::fsync(fd) != 0)
            throw FileError(fmt::format("cannot fsync {}: {}", tmp.string(), std::strerror(errno)));
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw FileError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), std::strerror(err)));
    }
    fsync_directory(dir);
}

namespace {

int open_lock_file(const fs::path& path) {
    std::error_code ec;
    if (!path.parent_path().empty()) fs::create_directories(path.parent_path(), ec);
    if (ec)
        throw FileError(fmt::format("cannot create the directory of lock file {}: {}", path.string(), ec.message()));
    // O_NOFOLLOW: a lock file that is a link would create or lock its target elsewhere.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) throw FileError(fmt::format("cannot open lock file {}: {}", path.string(), std::strerror(errno)));
    return fd;
}

int flock_op(FileLock::Mode mode) { return mode == FileLock::Mode::shared ? LOCK_SH : LOCK_EX; }

}  // namespace

namespace {

// Whether the open lock file `fd` is still the file at `path`. A holder may unlink a lock file
// (cache eviction and clear() do); whoever then locks the unlinked file owns nothing, while a
// newcomer creates and locks a new one at the path. So a lock counts only once this holds.
bool still_at_path(int fd, const fs::path& path) {
    struct stat held {};
    struct stat now {};
    if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &now) != 0) return false;
    return held.st_dev == now.st_dev && held.st_ino == now.st_ino;
}

}  // namespace

FileLock::FileLock(const fs::path& path, Mode mode) {
    for (;;) {
        fd_ = open_lock_file(path);
        while (::flock(fd_, flock_op(mode)) != 0) {
            if (errno == EINTR) continue;
            int err = errno;
            ::close(fd_);
            fd_ = -1;
            throw FileError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(err)));
        }
        if (still_at_path(fd_, path)) return;
        ::close(fd_);  // the file was unlinked while we waited: lock the one at the path now
    }
}

FileLock FileLock::try_lock(const fs::path& path, Mode mode) {
    FileLock lock;
    int fd = open_lock_file(path);
    if (::flock(fd, flock_op(mode) | LOCK_NB) == 0 && still_at_path(fd, path)) {
        lock.fd_ = fd;
    } else {
        ::close(fd);
    }
    return lock;
}

std::optional<FileLock> FileLock::if_present(const fs::path& path, Mode mode) {
    for (;;) {
        const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            if (errno == ENOENT) return std::nullopt;
            throw FileError(fmt::format("cannot open lock file {}: {}", path.string(), std::strerror(errno)));
        }
        while (::flock(fd, flock_op(mode)) != 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw FileError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(err)));
        }
        if (still_at_path(fd, path)) {
            FileLock lock;
            lock.fd_ = fd;
            return lock;
        }
        ::close(fd);  // unlinked by its holder while we waited: look again
    }
}

FileLock::FileLock(FileLock&& other) noexcept : fd_(other.fd_), remove_path_(std::move(other.remove_path_)) {
    other.fd_ = -1;
    other.remove_path_.clear();
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
    if (this != &other) {
        release();
        fd_ = other.fd_;
        remove_path_ = std::move(other.remove_path_);
        other.fd_ = -1;
        other.remove_path_.clear();
    }
    return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::release() noexcept {
    if (fd_ < 0) return;
    // Unlinked while still held, so no other process can have taken the file meanwhile.
    if (!remove_path_.empty() && still_at_path(fd_, remove_path_)) ::unlink(remove_path_.c_str());
    ::close(fd_);  // closing the descriptor releases the flock
    fd_ = -1;
}

void make_private_directory(const std::filesystem::path& dir, const char* what) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        throw FileError(fmt::format("tileops: cannot create {} ({}): {}", dir.string(), what, std::strerror(errno)));
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
        throw FileError(fmt::format("tileops: {} ({}) is not a directory of this user's alone: a link, another "
                                    "owner's, or writable by others",
                                    dir.string(), what));
}

std::optional<std::string> env(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
}

bool env_switch(const char* name) {
    const std::optional<std::string> value = env(name);
    if (!value || *value == "0") return false;
    if (*value == "1") return true;
    throw InvalidArgument(fmt::format("tileops: {} must be 0 or 1, got '{}'", name, *value));
}

}  // namespace tileops::util
