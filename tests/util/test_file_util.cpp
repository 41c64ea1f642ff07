// util::write_file_atomic: temporary files that killed writers left behind are removed by the
// next write of the same file, and nothing else is.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "support/test_support.hpp"
#include "util/file_util.hpp"

namespace fs = std::filesystem;
using tileops::test::TempDir;

namespace {

// The pid of a process that has exited (reaped), so no process answers to it.
pid_t dead_pid() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
}

fs::path make_file(const fs::path& path, std::chrono::minutes age) {
    std::ofstream(path) << "partial";
    fs::last_write_time(path, fs::file_time_type::clock::now() - age);
    return path;
}

}  // namespace

TEST_CASE("write_file_atomic removes the temporary files of killed writers of that file only", "[util]") {
    TempDir dir;
    const pid_t gone = dead_pid();
    const auto name = [&](const std::string& file, long pid, int n) {
        return dir.path() / (("." + file + ".tmp.") + std::to_string(pid) + "." + std::to_string(n));
    };
    const fs::path abandoned = make_file(name("db.json", gone, 0), std::chrono::minutes(60));
    const fs::path recent = make_file(name("db.json", gone, 1), std::chrono::minutes(1));     // maybe still written
    const fs::path ours = make_file(name("db.json", ::getpid(), 7), std::chrono::minutes(60));  // a live writer
    const fs::path init = make_file(name("db.json", 1, 0), std::chrono::minutes(60));          // pid 1 is alive
    const fs::path other = make_file(name("other.json", gone, 0), std::chrono::minutes(60));  // another file's
    const fs::path odd = make_file(dir.path() / ".db.json.tmp.x.0", std::chrono::minutes(60));  // not our pattern

    tileops::util::write_file_atomic(dir.path() / "db.json", "{}");
    CHECK_FALSE(fs::exists(abandoned));
    for (const fs::path& kept : {recent, ours, init, other, odd}) {
        INFO(kept.string());
        CHECK(fs::exists(kept));
    }
    CHECK(fs::file_size(dir.path() / "db.json") == 2);
}
