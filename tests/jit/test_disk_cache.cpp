// The on-disk kernel cache and the in-process InFlight dedupe: round trips, damaged files are misses,
// builds happen once per key across threads and processes, different keys build in parallel, LRU
// eviction spares entries in use, an unwritable cache still builds. No GPU is involved.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "jit/disk_cache.hpp"
#include "jit/in_flight.hpp"
#include "support/log_capture.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"
#include "util/sha256.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;
using tileops::jit::DiskCache;
using tileops::jit::InFlight;
using tileops::util::FileLock;

namespace {

// A fresh directory under the system temp directory, removed with everything in it at the end.
struct TempDir {
    fs::path path;
    TempDir() {
        static std::atomic<int> counter{0};
        std::random_device random;
        path = fs::temp_directory_path() /
               ("tileops_disk_cache_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
                std::to_string(random()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

std::string key_of(const std::string& name) { return tileops::util::sha256_hex(name); }

void write_raw(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

std::string read_raw(const fs::path& path) {
    auto data = tileops::util::read_file(path);
    REQUIRE(data.has_value());
    return *data;
}

void set_age(const fs::path& path, std::chrono::seconds age) {
    fs::last_write_time(path, fs::file_time_type::clock::now() - age);
}

// Spins until `go` is set, so that threads start their calls together.
void wait_for(const std::atomic<bool>& go) {
    while (!go.load()) std::this_thread::yield();
}

// Polls `condition` for up to `limit`; returns its last value.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// Saves environment variables and puts them back at the end of a test.
struct EnvGuard {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    explicit EnvGuard(std::initializer_list<const char*> names) {
        for (const char* name : names) {
            const char* value = std::getenv(name);
            saved.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
        }
    }
    ~EnvGuard() {
        for (const auto& [name, value] : saved) {
            if (value) ::setenv(name.c_str(), value->c_str(), 1);
            else ::unsetenv(name.c_str());
        }
    }
};

}  // namespace

TEST_CASE("disk cache: store then load round-trips; a missing key is a miss", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("round trip");
    const std::string payload("cubin\0\x01\xff\n bytes", 16);

    CHECK_FALSE(cache.load(key).has_value());
    CHECK_FALSE(fs::exists(tmp.path / "cache"));  // a miss creates nothing

    cache.store(key, payload);
    CHECK(cache.entry_path(key) == tmp.path / "cache" / key.substr(0, 2) / (key + ".cubin"));
    CHECK(fs::exists(cache.entry_path(key)));
    CHECK(cache.load(key) == payload);
    CHECK_FALSE(cache.load(key_of("another key")).has_value());

    // Another instance (another process) sees it too; an empty payload is a valid entry.
    DiskCache again(tmp.path / "cache", 0);
    CHECK(again.load(key) == payload);
    again.store(key_of("empty"), "");
    auto empty = cache.load(key_of("empty"));
    REQUIRE(empty.has_value());
    CHECK(empty->empty());

    auto entries = cache.entries();
    REQUIRE(entries.size() == 2);
    auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.key == key; });
    REQUIRE(it != entries.end());
    CHECK(it->path == cache.entry_path(key));
    CHECK(it->size == fs::file_size(cache.entry_path(key)));
    CHECK(it->size > payload.size());  // the header
    CHECK(cache.total_bytes() == entries[0].size + entries[1].size);

    // Keys are hex SHA-256 strings: nothing else can name a file.
    CHECK_THROWS_AS(cache.load("../../etc/passwd"), tileops::InvalidArgument);
    CHECK_THROWS_AS(cache.store(key.substr(1), "x"), tileops::InvalidArgument);
}

TEST_CASE("disk cache: a hit refreshes the entry's last use", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("touched");
    cache.store(key, "payload");
    set_age(cache.entry_path(key), 3600s);
    REQUIRE(cache.entries().at(0).last_use < std::chrono::system_clock::now() - 3000s);

    REQUIRE(cache.load(key) == "payload");
    CHECK(fs::last_write_time(cache.entry_path(key)) > fs::file_time_type::clock::now() - 60s);
    CHECK(cache.entries().at(0).last_use > std::chrono::system_clock::now() - 60s);
}

TEST_CASE("disk cache: damaged entries are misses and get rebuilt", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("victim");
    const std::string other = key_of("other");
    const std::string payload = std::string(300, 'x') + "tail";
    cache.store(key, payload);
    cache.store(other, "other payload");
    const fs::path file = cache.entry_path(key);
    std::string bytes = read_raw(file);

    SECTION("a flipped byte in the payload") { bytes[bytes.size() - 10] ^= 0x40; }
    SECTION("a flipped byte in the magic") { bytes[0] ^= 0x01; }
    SECTION("a truncated payload") { bytes.resize(bytes.size() - 5); }
    SECTION("a truncated header") { bytes.resize(40); }
    SECTION("another key's entry") { bytes = read_raw(cache.entry_path(other)); }
    SECTION("a key of control characters (it once went into the warning as it was)") {
        bytes.replace(16, 64, std::string(32, '\x1b') + std::string(32, '\a'));
        write_raw(file, bytes);
        tileops::test::LogCapture log(spdlog::level::warn);
        CHECK_FALSE(cache.load(key).has_value());
        CHECK(log.count("entry was written for no valid key") == 1);
        CHECK(log.count("\x1b") == 0);
    }
    SECTION("an empty file") { bytes.clear(); }
    SECTION("trailing garbage") { bytes += "junk"; }
    write_raw(file, bytes);

    CHECK_FALSE(cache.load(key).has_value());
    CHECK_FALSE(DiskCache(tmp.path / "cache", 0).load(key).has_value());

    int calls = 0;
    bool built = false;
    auto build = [&] {
        ++calls;
        return payload;
    };
    CHECK(cache.get_or_build(key, build, &built) == payload);
    CHECK(built);
    CHECK(calls == 1);
    CHECK(cache.load(key) == payload);
    CHECK(cache.get_or_build(key, build, &built) == payload);
    CHECK_FALSE(built);
    CHECK(calls == 1);
    CHECK(cache.load(other) == "other payload");
}

TEST_CASE("disk cache: 3000 randomly mutated entries read as a miss or as the stored payload", "[disk_cache][fuzz]") {
    // Seeded: a failure names its round and reproduces. Every byte of an entry is covered by its
    // header or checksum, so any change reads as a miss; nothing may crash, hang or throw.
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("fuzzed");
    const std::string payload = "headers\nkernel\n" + std::string(200, '\x7f') + "cubin";
    cache.store(key, payload);
    const fs::path file = cache.entry_path(key);
    const std::string valid = read_raw(file);
    std::mt19937 random(20261127);
    size_t misses = 0;
    for (int round = 0; round < 3000; ++round) {
        std::string bytes = valid;
        const int edits = 1 + static_cast<int>(random() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = bytes.empty() ? 0 : random() % bytes.size();
            switch (random() % 5) {
                case 0: if (!bytes.empty()) bytes[at] = static_cast<char>(random()); break;
                case 1: bytes.resize(at); break;
                case 2: bytes.insert(at, 1 + random() % 16, static_cast<char>(random())); break;
                case 3: if (!bytes.empty()) bytes.erase(at, 1 + random() % 16); break;
                default: {  // a plausible length field: the payload length made huge
                    if (bytes.size() >= 8) {
                        const uint64_t huge = uint64_t{1} << (32 + random() % 31);
                        std::memcpy(bytes.data() + at - at % 8, &huge, std::min<size_t>(8, bytes.size() - at + at % 8));
                    }
                }
            }
        }
        write_raw(file, bytes);
        std::optional<std::string> loaded;
        REQUIRE_NOTHROW(loaded = cache.load(key));
        if (!loaded) ++misses;
        else if (*loaded != payload) FAIL("round " << round << ": a mutated entry loaded as other bytes");
    }
    CHECK(misses > 2900);  // all but the mutations that changed nothing
}

TEST_CASE("disk cache: an entry that is a FIFO, a link to a device or a directory is replaced by the build",
          "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("not a file");
    cache.store(key, "first");
    const fs::path file = cache.entry_path(key);
    fs::remove(file);
    SECTION("a FIFO (reading it would wait for a writer)") { REQUIRE(::mkfifo(file.c_str(), 0600) == 0); }
    SECTION("a link to /dev/zero (reading it would never end)") { fs::create_symlink("/dev/zero", file); }
    SECTION("a directory holding a file (a rename cannot replace it: it once stayed, rebuilt every time)") {
        fs::create_directories(file / "inside");
        std::ofstream(file / "inside" / "x") << "x";
    }
    CHECK_FALSE(cache.load(key).has_value());
    bool built = false;
    CHECK(cache.get_or_build(key, [] { return std::string("rebuilt"); }, &built) == "rebuilt");
    CHECK(built);
    CHECK(fs::is_regular_file(fs::symlink_status(file)));
    CHECK(cache.load(key) == "rebuilt");
    CHECK(DiskCache(tmp.path / "cache", 0).get_or_build(key, [] { return std::string("again"); }, &built) == "rebuilt");
    CHECK_FALSE(built);
}

TEST_CASE("disk cache: get_or_build builds once, then hits; a failed build writes nothing", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("once");
    int calls = 0;
    auto build = [&] {
        ++calls;
        return std::string("cubin #") + std::to_string(calls);
    };
    bool built = false;
    CHECK(cache.get_or_build(key, build, &built) == "cubin #1");
    CHECK(built);
    CHECK(cache.get_or_build(key, build, &built) == "cubin #1");
    CHECK_FALSE(built);
    CHECK(DiskCache(tmp.path / "cache", 0).get_or_build(key, build, &built) == "cubin #1");
    CHECK_FALSE(built);
    CHECK(calls == 1);

    const std::string failing = key_of("fails");
    auto throwing = [&]() -> std::string { throw std::runtime_error("nvrtc said no"); };
    CHECK_THROWS_WITH(cache.get_or_build(failing, throwing, &built), "nvrtc said no");
    CHECK_FALSE(fs::exists(cache.entry_path(failing)));
    CHECK_FALSE(cache.load(failing).has_value());
    // The failure is not remembered: the next call builds.
    CHECK(cache.get_or_build(failing, build, &built) == "cubin #2");
    CHECK(built);
}

TEST_CASE("disk cache: building and loading leave no lock file beside the entry", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("no lock left");
    CHECK(cache.get_or_build(key, [] { return std::string("cubin"); }) == "cubin");
    CHECK(fs::exists(cache.entry_path(key)));
    CHECK_FALSE(fs::exists(cache.lock_path(key)));
    CHECK(cache.load(key) == std::optional<std::string>("cubin"));
    CHECK_FALSE(fs::exists(cache.lock_path(key)));
    // A failed build leaves none either.
    const std::string failing = key_of("fails without a lock left");
    CHECK_THROWS(cache.get_or_build(failing, []() -> std::string { throw std::runtime_error("no"); }));
    CHECK_FALSE(fs::exists(cache.lock_path(failing)));
}

TEST_CASE("disk cache: a lock file that is a link is not followed", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("linked lock");
    const fs::path outside = tmp.path / "outside.lock";
    fs::create_directories(cache.lock_path(key).parent_path());
    fs::create_symlink(outside, cache.lock_path(key));
    // Built (not cached under a lock it cannot take), and nothing created through the link.
    CHECK(cache.get_or_build(key, [] { return std::string("cubin"); }) == "cubin");
    CHECK_FALSE(fs::exists(outside));
    CHECK_THROWS_AS(FileLock(cache.lock_path(key), FileLock::Mode::exclusive), tileops::FileError);
}

TEST_CASE("disk cache: a fan directory that is a link is replaced, never written or cleaned through", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 1);  // a bound of one byte: every store evicts the others
    const std::string key = key_of("linked fan"), old_key = key_of("old entry");
    const fs::path outside = tmp.path / "outside";
    fs::create_directories(outside);
    fs::create_directories(cache.directory());
    // Files of the linked directory named as the cache names its own: an entry, a lock file and a
    // stale temporary file. They once were evicted and cleaned, and the entry written beside them.
    const fs::path fan = cache.directory() / old_key.substr(0, 2);
    fs::create_symlink(outside, fan);
    write_raw(outside / (old_key + ".cubin"), "not the cache's");
    write_raw(outside / (old_key + ".lock"), "");
    write_raw(outside / ("." + old_key + ".cubin.tmp.999999.0"), "not the cache's");
    for (const auto& file : fs::directory_iterator(outside)) set_age(file.path(), 3600s);
    CHECK(cache.clear() == 0);
    CHECK(cache.entries().empty());
    cache.store(key, "payload");  // another fan: its cleanup and eviction pass over the link
    CHECK(std::distance(fs::directory_iterator(outside), fs::directory_iterator()) == 3);

    cache.store(old_key, "payload");  // its own fan is the link: replaced by a directory
    CHECK(fs::is_directory(fs::symlink_status(fan)));
    CHECK(cache.load(old_key) == "payload");
    CHECK(read_raw(outside / (old_key + ".cubin")) == "not the cache's");
    CHECK(std::distance(fs::directory_iterator(outside), fs::directory_iterator()) == 3);

    // get_or_build takes the key's lock before it writes: no lock file is created through a link.
    const std::string built_key = key_of("built under a linked fan");
    const fs::path built_fan = cache.directory() / built_key.substr(0, 2);
    if (built_fan != fan) {
        std::error_code ec;
        fs::remove_all(built_fan, ec);
        fs::create_symlink(outside, built_fan);
        CHECK(cache.get_or_build(built_key, [] { return std::string("built"); }) == "built");
        CHECK(fs::is_directory(fs::symlink_status(built_fan)));
        CHECK(std::distance(fs::directory_iterator(outside), fs::directory_iterator()) == 3);
    }
}

TEST_CASE("disk cache: 8 threads asking for one key build it once", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    const std::string key = key_of("shared by threads");
    std::atomic<int> calls{0};
    std::atomic<bool> go{false};
    std::vector<std::string> results(8);
    std::vector<char> built(8, 0);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&, i] {
            wait_for(go);
            bool b = false;
            results[i] = cache.get_or_build(
                key,
                [&] {
                    calls.fetch_add(1);
                    std::this_thread::sleep_for(100ms);
                    return std::string("the cubin");
                },
                &b);
            built[i] = b;
        });
    }
    go = true;
    for (auto& t : threads) t.join();
    CHECK(calls.load() == 1);
    CHECK(std::count(built.begin(), built.end(), 1) == 1);
    for (const auto& r : results) CHECK(r == "the cubin");
}

TEST_CASE("disk cache: 8 threads on 8 different keys build in parallel", "[disk_cache]") {
    TempDir tmp;
    DiskCache cache(tmp.path / "cache", 0);
    std::atomic<int> active{0}, max_active{0};
    std::atomic<bool> go{false};
    std::vector<std::string> results(8);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&, i] {
            wait_for(go);
            results[i] = cache.get_or_build(key_of("parallel " + std::to_string(i)), [&, i] {
                int now = active.fetch_add(1) + 1;
                int seen = max_active.load();
                while (now > seen && !max_active.compare_exchange_weak(seen, now)) {
                }
                // Each build waits for the other seven to be under way (a bound, not a fixed
                // sleep, so that a loaded machine cannot make the builds miss each other): all
                // eight at once is what proves they run in parallel; serialized, none would see
                // another and each would wait out the bound.
                const auto deadline = std::chrono::steady_clock::now() + 10s;
                while (max_active.load() < 8 && std::chrono::steady_clock::now() < deadline)
                    std::this_thread::sleep_for(1ms);
                active.fetch_sub(1);
                return "cubin " + std::to_string(i);
            });
        });
    }
    go = true;
    for (auto& t : threads) t.join();
    CHECK(max_active.load() == 8);
    for (int i = 0; i < 8; ++i) CHECK(results[i] == "cubin " + std::to_string(i));
}

TEST_CASE("disk cache: builders killed with SIGKILL at random moments leave no damaged entry", "[disk_cache][kill]") {
    // Rounds of four processes building the same eight keys (a build takes 0-20 ms), one killed
    // at a random moment. Afterwards every entry on disk loads whole, and a build of every key
    // completes (a dead holder's lock does not block it).
    TempDir tmp;
    const fs::path dir = tmp.path / "cache";
    std::mt19937 random(136);
    std::vector<std::string> keys;
    for (int k = 0; k < 8; ++k) keys.push_back(key_of("killed " + std::to_string(k)));
    auto payload_of = [](const std::string& key) { return "cubin of " + key + std::string(4096, 'c'); };
    for (int round = 0; round < 10; ++round) {
        CAPTURE(round);
        std::vector<pid_t> children;
        for (int p = 0; p < 4; ++p) {
            const pid_t pid = ::fork();
            REQUIRE(pid >= 0);
            if (pid == 0) {  // child: never returns into Catch2
                int rc = 0;
                try {
                    DiskCache cache(dir, 0);
                    std::mt19937 mine(static_cast<unsigned>(::getpid()));
                    for (const std::string& key : keys)
                        cache.get_or_build(key, [&] {
                            std::this_thread::sleep_for(std::chrono::milliseconds(mine() % 20));
                            return payload_of(key);
                        });
                } catch (...) {
                    rc = 2;
                }
                ::_exit(rc);
            }
            children.push_back(pid);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(random() % 60));
        ::kill(children[random() % children.size()], SIGKILL);
        for (pid_t pid : children) {
            int status = 0;
            REQUIRE(::waitpid(pid, &status, 0) == pid);
            CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
        }
        DiskCache cache(dir, 0);
        for (const std::string& key : keys) {
            if (fs::exists(cache.entry_path(key))) CHECK(cache.load(key) == payload_of(key));
            CHECK(cache.get_or_build(key, [&] { return payload_of(key); }) == payload_of(key));
        }
        fs::remove_all(dir);  // the next round starts cold
    }
}

TEST_CASE("disk cache: 16 processes starting cold build a key once", "[disk_cache]") {
    TempDir tmp;
    const fs::path dir = tmp.path / "cache";
    const fs::path counter = tmp.path / "builds.txt";
    const std::string key = key_of("shared by processes");
    constexpr int kChildren = 16;

    int gate[2];
    REQUIRE(::pipe(gate) == 0);
    std::vector<pid_t> children;
    for (int i = 0; i < kChildren; ++i) {
        pid_t pid = ::fork();
        if (pid == 0) {
            // Child: never returns into Catch2.
            int rc = 0;
            try {
                ::close(gate[1]);
                char c;
                while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
                }  // EOF once the parent closes its end: all children start together
                DiskCache cache(dir, 0);
                std::string out = cache.get_or_build(key, [&] {
                    const std::string line = std::to_string(::getpid()) + "\n";
                    int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                    if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
                        throw std::runtime_error("cannot append to the counter file");
                    ::close(fd);
                    std::this_thread::sleep_for(100ms);
                    return "cubin built by " + std::to_string(::getpid());
                });
                std::ofstream result(tmp.path / ("result_" + std::to_string(i)), std::ios::binary);
                result << out;
                result.close();
                if (!result) rc = 3;
            } catch (...) {
                rc = 2;
            }
            ::_exit(rc);
        }
        if (pid < 0) break;
        children.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);  // releases the children
    for (pid_t pid : children) {
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
    REQUIRE(children.size() == kChildren);

    std::istringstream lines(read_raw(counter));
    std::vector<std::string> builders;
    for (std::string line; std::getline(lines, line);) builders.push_back(line);
    REQUIRE(builders.size() == 1);
    for (int i = 0; i < kChildren; ++i)
        CHECK(read_raw(tmp.path / ("result_" + std::to_string(i))) == "cubin built by " + builders[0]);
    CHECK(DiskCache(dir, 0).load(key) == "cubin built by " + builders[0]);
}

TEST_CASE("disk cache: least recently used entries are evicted first, never one in use", "[disk_cache]") {
    TempDir tmp;
    const fs::path dir = tmp.path / "cache";
    DiskCache fill(dir, 0);
    const std::string payload(1000, 'p');
    const std::string a = key_of("A"), b = key_of("B"), c = key_of("C"), d = key_of("D"), e = key_of("E");
    // Oldest first: A, B, C, D (explicit times, so that the order does not depend on timestamp
    // granularity).
    std::chrono::seconds age = 400s;
    for (const auto& key : {a, b, c, d}) {
        fill.store(key, payload);
        set_age(fill.entry_path(key), age);
        age -= 100s;
    }
    const uint64_t entry_size = fs::file_size(fill.entry_path(a));
    const uint64_t bound = 3 * entry_size + entry_size / 2;  // room for 3 of the 5 entries
    auto exists = [&](const std::string& key) { return fs::exists(fill.entry_path(key)); };

    SECTION("the oldest go first; a recently loaded entry survives") {
        REQUIRE(fill.load(a) == payload);  // A becomes the most recently used
        DiskCache bounded(dir, bound);
        bounded.store(e, payload);
        CHECK(exists(a));
        CHECK_FALSE(exists(b));
        CHECK_FALSE(exists(c));
        CHECK(exists(d));
        CHECK(exists(e));
        CHECK(bounded.total_bytes() <= bound);
        CHECK_FALSE(fs::exists(fill.lock_path(b)));  // an evicted entry's lock file goes with it
    }
    SECTION("an entry whose lock is held shared is skipped") {
        FileLock reader(fill.lock_path(a), FileLock::Mode::shared);
        DiskCache bounded(dir, bound);
        bounded.store(e, payload);
        CHECK(exists(a));
        CHECK_FALSE(exists(b));
        CHECK_FALSE(exists(c));
        CHECK(exists(d));
        CHECK(exists(e));
    }
    SECTION("the entry just stored is never evicted, even when it alone exceeds the bound") {
        DiskCache tiny(dir, 10);
        tiny.store(e, payload);
        for (const auto& key : {a, b, c, d}) CHECK_FALSE(exists(key));
        CHECK(tiny.load(e) == payload);
    }
    SECTION("get_or_build evicts too") {
        DiskCache bounded(dir, bound);
        bool built = false;
        CHECK(bounded.get_or_build(e, [&] { return payload; }, &built) == payload);
        CHECK(built);
        CHECK_FALSE(exists(a));
        CHECK_FALSE(exists(b));
        CHECK(exists(c));
        CHECK(exists(d));
        CHECK(exists(e));
    }
}

TEST_CASE("disk cache: stale temporary files and orphan lock files are cleaned up; clear() spares entries in use",
          "[disk_cache]") {
    TempDir tmp;
    const fs::path dir = tmp.path / "cache";
    const std::string a = key_of("a"), b = key_of("b"), c = key_of("c"), d = key_of("d");
    DiskCache cache(dir, 0);
    const fs::path fan = cache.entry_path(b).parent_path();
    fs::create_directories(fan);
    fs::create_directories(cache.lock_path(c).parent_path());
    fs::create_directories(cache.lock_path(d).parent_path());
    const fs::path stale_tmp = fan / ("." + b + ".cubin.tmp.999999.0");
    const fs::path fresh_tmp = fan / ("." + b + ".cubin.tmp.999999.1");
    write_raw(stale_tmp, "half written");
    write_raw(fresh_tmp, "being written");
    set_age(stale_tmp, 3600s);
    write_raw(cache.lock_path(c), "");  // orphan, old
    set_age(cache.lock_path(c), 3600s);
    write_raw(cache.lock_path(d), "");  // no entry yet, but recent: a builder may be about to store

    cache.store(a, "payload");  // the first store of a DiskCache runs the cleanup
    CHECK_FALSE(fs::exists(stale_tmp));
    CHECK(fs::exists(fresh_tmp));
    CHECK_FALSE(fs::exists(cache.lock_path(c)));
    CHECK(fs::exists(cache.lock_path(d)));
    CHECK(cache.load(a) == "payload");

    cache.store(b, "payload b");
    {
        FileLock reader(cache.lock_path(a), FileLock::Mode::shared);
        CHECK(cache.clear() == 1);  // b goes, a is in use
        CHECK(fs::exists(cache.entry_path(a)));
        CHECK_FALSE(fs::exists(cache.entry_path(b)));
    }
    CHECK(cache.clear() == 1);
    CHECK(cache.entries().empty());
    CHECK(cache.total_bytes() == 0);
    CHECK_FALSE(cache.load(a).has_value());
}

TEST_CASE("disk cache: an unwritable cache still builds, and store() names the path", "[disk_cache]") {
    TempDir tmp;
    // A directory under a regular file cannot be created, whatever our privileges.
    const fs::path blocker = tmp.path / "a_file";
    write_raw(blocker, "not a directory");
    const fs::path dir = blocker / "cache";
    DiskCache cache(dir, 0);
    const std::string key = key_of("unwritable");
    int calls = 0;
    auto build = [&] {
        ++calls;
        return std::string("bytes");
    };
    bool built = false;
    CHECK(cache.get_or_build(key, build, &built) == "bytes");
    CHECK(built);
    CHECK(cache.get_or_build(key, build, &built) == "bytes");
    CHECK(built);
    CHECK(calls == 2);
    CHECK_FALSE(cache.load(key).has_value());
    CHECK(cache.entries().empty());
    CHECK_THROWS_AS(cache.store(key, "bytes"), tileops::FileError);
    CHECK_THROWS_WITH(cache.store(key, "bytes"), ContainsSubstring(dir.string()));
}

TEST_CASE("disk cache: default directory and size bound follow the environment", "[disk_cache]") {
    EnvGuard guard{"TILEOPS_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "TILEOPS_CACHE_MAX_MB"};
    ::setenv("TILEOPS_CACHE_DIR", "/somewhere/kernels", 1);
    ::setenv("XDG_CACHE_HOME", "/xdg", 1);
    ::setenv("HOME", "/home/someone", 1);
    CHECK(DiskCache::default_directory() == fs::path("/somewhere/kernels"));
    ::unsetenv("TILEOPS_CACHE_DIR");
    CHECK(DiskCache::default_directory() == fs::path("/xdg/tileops_jit/kernels"));
    ::setenv("XDG_CACHE_HOME", "relative/is/ignored", 1);
    CHECK(DiskCache::default_directory() == fs::path("/home/someone/.cache/tileops_jit/kernels"));
    ::unsetenv("XDG_CACHE_HOME");
    CHECK(DiskCache::default_directory() == fs::path("/home/someone/.cache/tileops_jit/kernels"));

    ::unsetenv("TILEOPS_CACHE_MAX_MB");
    CHECK(DiskCache::default_max_bytes() == (uint64_t{2048} << 20));
    ::setenv("TILEOPS_CACHE_MAX_MB", "16", 1);
    CHECK(DiskCache::default_max_bytes() == (uint64_t{16} << 20));
    ::setenv("TILEOPS_CACHE_MAX_MB", "0", 1);
    CHECK(DiskCache::default_max_bytes() == 0);
    ::setenv("TILEOPS_CACHE_MAX_MB", "lots", 1);
    CHECK_THROWS_AS(DiskCache::default_max_bytes(), tileops::InvalidArgument);
}

TEST_CASE("InFlight: concurrent callers of one key share one computation", "[disk_cache][in_flight]") {
    InFlight<std::string, int> in_flight;
    std::atomic<int> calls{0};
    std::mutex mutex;
    std::condition_variable cv;
    bool started = false, release = false;

    int owner_result = 0;
    std::thread owner([&] {
        owner_result = in_flight.get_or_compute("k", [&] {
            calls.fetch_add(1);
            std::unique_lock<std::mutex> lock(mutex);
            started = true;
            cv.notify_all();
            cv.wait_for(lock, 5s, [&] { return release; });
            return 42;
        });
    });
    {
        std::unique_lock<std::mutex> lock(mutex);
        REQUIRE(cv.wait_for(lock, 5s, [&] { return started; }));
    }
    std::vector<int> results(7, 0);
    std::vector<std::thread> waiters;
    for (int i = 0; i < 7; ++i) {
        waiters.emplace_back([&, i] {
            results[i] = in_flight.get_or_compute("k", [&] {
                calls.fetch_add(1);
                return -1;
            });
        });
    }
    // All 7 are waiting on the running computation (none holds the map's mutex across fn) ...
    const bool all_waiting = eventually([&] { return in_flight.waiters("k") == 7; });
    CHECK(all_waiting);
    // ... and another key computes meanwhile.
    if (all_waiting) CHECK(in_flight.get_or_compute("other", [] { return 7; }) == 7);
    {
        std::lock_guard<std::mutex> lock(mutex);
        release = true;
    }
    cv.notify_all();
    owner.join();
    for (auto& t : waiters) t.join();

    CHECK(calls.load() == 1);
    CHECK(owner_result == 42);
    for (int r : results) CHECK(r == 42);
    CHECK(in_flight.size() == 0);
    // InFlight is not a cache: a later call computes again.
    CHECK(in_flight.get_or_compute("k", [] { return 43; }) == 43);
}

TEST_CASE("InFlight: different keys compute in parallel", "[disk_cache][in_flight]") {
    InFlight<int, bool> in_flight;
    std::mutex mutex;
    std::condition_variable cv;
    bool a_started = false, b_ran = false;
    bool a_saw_b = false;
    std::thread a([&] {
        a_saw_b = in_flight.get_or_compute(1, [&] {
            std::unique_lock<std::mutex> lock(mutex);
            a_started = true;
            cv.notify_all();
            // Only returns true if key 2 computes while key 1 is still computing.
            return cv.wait_for(lock, 2s, [&] { return b_ran; });
        });
    });
    {
        std::unique_lock<std::mutex> lock(mutex);
        REQUIRE(cv.wait_for(lock, 5s, [&] { return a_started; }));
    }
    in_flight.get_or_compute(2, [&] {
        std::lock_guard<std::mutex> lock(mutex);
        b_ran = true;
        cv.notify_all();
        return true;
    });
    a.join();
    CHECK(a_saw_b);
}

TEST_CASE("InFlight: a failure reaches every waiter and the next call retries", "[disk_cache][in_flight]") {
    InFlight<std::string, std::string> in_flight;
    std::atomic<int> calls{0};
    std::mutex mutex;
    std::condition_variable cv;
    bool started = false, release = false;

    std::vector<std::string> errors(8);
    auto call = [&](int i) {
        try {
            in_flight.get_or_compute("k", [&]() -> std::string {
                calls.fetch_add(1);
                std::unique_lock<std::mutex> lock(mutex);
                started = true;
                cv.notify_all();
                cv.wait_for(lock, 5s, [&] { return release; });
                throw std::runtime_error("compile failed");
            });
            errors[i] = "no exception";
        } catch (const std::runtime_error& e) {
            errors[i] = e.what();
        }
    };
    std::vector<std::thread> threads;
    threads.emplace_back(call, 0);
    {
        std::unique_lock<std::mutex> lock(mutex);
        REQUIRE(cv.wait_for(lock, 5s, [&] { return started; }));
    }
    for (int i = 1; i < 8; ++i) threads.emplace_back(call, i);
    CHECK(eventually([&] { return in_flight.waiters("k") == 7; }));
    {
        std::lock_guard<std::mutex> lock(mutex);
        release = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();

    CHECK(calls.load() == 1);
    for (const auto& e : errors) CHECK(e == "compile failed");
    CHECK(in_flight.size() == 0);
    CHECK(in_flight.get_or_compute("k", [&] {
        calls.fetch_add(1);
        return std::string("ok");
    }) == "ok");
    CHECK(calls.load() == 2);
}

TEST_CASE("a lock taken on a lock file that was unlinked meanwhile is retaken on the file at the path", "[disk_cache]") {
    // Eviction and clear() unlink a key's lock file while holding it. A process that was already
    // waiting on that file must not end up owning a file nobody else can see, while a newcomer
    // creates and locks a new one at the path: both would build the key.
    TempDir dir;
    const std::filesystem::path path = dir.path / "key.lock";
    auto holder = std::make_unique<FileLock>(path, FileLock::Mode::exclusive);
    std::atomic<bool> waiting{false}, locked{false};
    bool newcomer_got_it = true;
    std::thread waiter([&] {
        waiting = true;
        FileLock lock(path, FileLock::Mode::exclusive);
        locked = true;
        newcomer_got_it = FileLock::try_lock(path, FileLock::Mode::exclusive).owns();
    });
    while (!waiting) std::this_thread::yield();
    std::this_thread::sleep_for(100ms);  // the waiter blocks in flock on the first file
    CHECK_FALSE(locked.load());
    std::filesystem::remove(path);  // what eviction does, then it lets go
    holder.reset();
    waiter.join();
    CHECK(locked.load());
    CHECK_FALSE(newcomer_got_it);  // the waiter holds the lock at the path, not an unlinked file
    CHECK(std::filesystem::exists(path));
}
