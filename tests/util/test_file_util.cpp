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
#include "tileops/error.hpp"
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

TEST_CASE("write_file_atomic keeps a rewritten file's mode and replaces a link instead of writing through it",
          "[util]") {
    TempDir dir;
    const fs::path db = dir.path() / "fleet.json";
    tileops::util::write_file_atomic(db, "{}");
    fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write);
    tileops::util::write_file_atomic(db, "{\"a\": 1}");
    CHECK((fs::status(db).permissions() & fs::perms::group_write) == fs::perms::group_write);

    const fs::path target = dir.path() / "elsewhere.json", link = dir.path() / "link.json";
    std::ofstream(target) << "kept";
    fs::create_symlink(target, link);
    tileops::util::write_file_atomic(link, "new");
    CHECK_FALSE(fs::is_symlink(link));
    std::ifstream kept(target);
    std::string text;
    kept >> text;
    CHECK(text == "kept");
}

TEST_CASE("a private directory under a shared one is made 0700 and must stay this user's alone", "[util]") {
    TempDir dir;
    const fs::path fresh = dir.path() / "fresh";
    tileops::util::make_private_directory(fresh, "a test");
    CHECK((fs::status(fresh).permissions() & fs::perms::all) == fs::perms::owner_all);
    tileops::util::make_private_directory(fresh, "a test");  // ours already: accepted

    const fs::path open = dir.path() / "open";
    fs::create_directory(open);
    fs::permissions(open, fs::perms::all);  // 0777: anyone could swap files in
    CHECK_THROWS_AS(tileops::util::make_private_directory(open, "a test"), tileops::FileError);

    const fs::path link = dir.path() / "link";
    fs::create_directory_symlink(fresh, link);
    CHECK_THROWS_AS(tileops::util::make_private_directory(link, "a test"), tileops::FileError);
    std::ofstream(dir.path() / "file") << "x";
    CHECK_THROWS_AS(tileops::util::make_private_directory(dir.path() / "file", "a test"), tileops::FileError);
}
