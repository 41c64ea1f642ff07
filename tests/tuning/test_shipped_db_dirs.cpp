// Where the shipped tuning databases are looked for (tuning/shipped_db_dirs.hpp): one directory,
// the first that exists of TILEOPS_SHIPPED_DB_DIR, the loaded module's own prefix and the
// configured prefix; never the source tree by name.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "support/test_support.hpp"
#include "tileops/error.hpp"
#include "tuning/config_choice.hpp"
#include "tuning/shipped_db_dirs.hpp"

namespace fs = std::filesystem;
using namespace tileops::tuning;
using Catch::Matchers::ContainsSubstring;
using tileops::test::ScopedEnv;
using tileops::test::TempDir;

namespace {

bool contains(const std::vector<fs::path>& dirs, const fs::path& dir) {
    return std::find(dirs.begin(), dirs.end(), dir) != dirs.end();
}

// Whether `path` lies inside the source tree (the build tree may lie inside it too).
bool in_source_tree(const fs::path& path) {
    const std::string source = fs::weakly_canonical(TILEOPS_TEST_SOURCE_DIR).string() + "/";
    return path.lexically_normal().string().rfind(source, 0) == 0;
}

}  // namespace

TEST_CASE("shipped databases: an installed module looks in its own prefix", "[tuning_db]") {
    const fs::path opt("/opt/tileops/share/tileops_jit/tuning_db"), usr("/usr/share/tileops_jit/tuning_db");
    CHECK(installed_db_dirs("/opt/tileops/lib/libtileops_jit.so.0").front() == opt);
    CHECK(installed_db_dirs("/opt/tileops/bin/tileops-tune").front() == opt);
    CHECK(contains(installed_db_dirs("/usr/lib/x86_64-linux-gnu/libtileops_jit.so"), usr));  // Debian's libdir
    // Every candidate is share/tileops_jit/tuning_db of some prefix above the module.
    for (const fs::path& dir : installed_db_dirs("/opt/tileops/bin/tileops-tune")) {
        CHECK(dir.filename() == "tuning_db");
        CHECK(dir.parent_path().filename() == "tileops_jit");
    }

    // The Python module, <prefix>/<python install dir>/tileops_jit/_C*.so, finds <prefix>/share.
    const std::string python = python_install_dir();
    if (python.empty()) {
        SUCCEED("this build installs no Python module into the prefix");
    } else {
        const fs::path module = fs::path("/opt/tileops") / python / "tileops_jit" / "_C.cpython-311-x86_64-linux-gnu.so";
        const std::vector<fs::path> dirs = installed_db_dirs(module);
        CAPTURE(module, dirs);
        CHECK(dirs.front() == opt);
        // A module of that name elsewhere does not take a prefix it is not in.
        CHECK_FALSE(contains(installed_db_dirs("/srv/app/tileops_jit/_C.so"), opt));
    }
}

TEST_CASE("shipped databases: one directory, the first that exists; never the source tree by name", "[tuning_db]") {
    // This test program links the library statically: the module is the program itself.
    CHECK(fs::equivalent(loaded_module_path(), fs::read_symlink("/proc/self/exe")));

    // No candidate names the source tree's tuning_db/; the build tree is a prefix of its own.
    const std::vector<fs::path> candidates = shipped_db_candidates(loaded_module_path());
    REQUIRE_FALSE(candidates.empty());
    for (const fs::path& dir : candidates) {
        CAPTURE(dir);
        CHECK(dir != fs::path(TILEOPS_TEST_SOURCE_DIR "/tuning_db").lexically_normal());
        CHECK(dir.filename() == "tuning_db");
    }
    for (size_t i = 0; i < candidates.size(); ++i)
        for (size_t j = i + 1; j < candidates.size(); ++j) CHECK(candidates[i] != candidates[j]);

    // In the build tree, <build>/share/tileops_jit/tuning_db is that prefix's, and holds the
    // source tree's databases.
    std::optional<ScopedEnv> no_override;
    if (std::getenv("TILEOPS_SHIPPED_DB_DIR") != nullptr) no_override.emplace("TILEOPS_SHIPPED_DB_DIR", "");
    const std::vector<std::string> dirs = default_shipped_dirs();
    REQUIRE(dirs.size() == 1);
    CHECK(dirs.front() == candidates.front().string());
    CHECK(fs::equivalent(dirs.front(), TILEOPS_TEST_SOURCE_DIR "/tuning_db"));

    // A program moved out of the build tree into a prefix of its own looks there, and where that
    // prefix has no databases, in the configured prefix: never the source tree.
    TempDir prefix;
    const fs::path program = prefix.path() / "bin" / "service";
    const std::vector<fs::path> moved = shipped_db_candidates(program);
    REQUIRE_FALSE(moved.empty());
    CHECK(moved.front() == prefix.path() / "share" / "tileops_jit" / "tuning_db");
    for (const fs::path& dir : moved) {
        CAPTURE(dir);
        CHECK_FALSE(in_source_tree(dir));
    }
}

TEST_CASE("shipped databases: TILEOPS_SHIPPED_DB_DIR names the directory, and must be one", "[tuning_db]") {
    TempDir dir;
    {
        ScopedEnv env("TILEOPS_SHIPPED_DB_DIR", dir.path().string());
        CHECK(shipped_db_dir_from_env() == dir.path());
        CHECK(default_shipped_dirs() == std::vector<std::string>{dir.path().string()});
    }
    {
        ScopedEnv env("TILEOPS_SHIPPED_DB_DIR", "");  // empty: unset
        CHECK_FALSE(shipped_db_dir_from_env().has_value());
    }
    const fs::path missing = dir.path() / "missing";
    const fs::path file = dir.path() / "h100.json";
    std::ofstream(file) << "{}";
    for (const fs::path& bad : {missing, file}) {
        CAPTURE(bad);
        ScopedEnv env("TILEOPS_SHIPPED_DB_DIR", bad.string());
        CHECK_THROWS_MATCHES(default_shipped_dirs(), tileops::InvalidArgument,
                             Catch::Matchers::MessageMatches(ContainsSubstring("TILEOPS_SHIPPED_DB_DIR='" + bad.string() +
                                                                               "' is not a directory")));
        // The runtime's resolver says so when it is made, not by silently using other databases.
        ResolverOptions options;
        options.arch = "sm_90a";
        CHECK_THROWS_AS(ConfigResolver(options), tileops::InvalidArgument);
    }
}
