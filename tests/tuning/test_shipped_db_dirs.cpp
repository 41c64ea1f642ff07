// Where the shipped tuning databases are looked for: beside the installed library first, found
// from the loaded module, so that an installed prefix uses its own copy.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <catch2/catch_test_macros.hpp>

#include "tuning/shipped_db_dirs.hpp"

namespace fs = std::filesystem;
using namespace tileops::tuning;

TEST_CASE("shipped databases are looked for beside the loaded library first", "[tuning_db]") {
    const fs::path opt("/opt/tileops/share/tileops_jit/tuning_db"), usr("/usr/share/tileops_jit/tuning_db");
    CHECK(installed_db_dirs("/opt/tileops/lib/libtileops_jit.so.0").front() == opt);
    CHECK(installed_db_dirs("/opt/tileops/bin/tileops-tune").front() == opt);
    CHECK(installed_db_dirs("/usr/lib/x86_64-linux-gnu/libtileops_jit.so").back() == usr);  // Debian's libdir

    // This test program links the library statically: the module is the program itself.
    CHECK(fs::equivalent(loaded_module_path(), fs::read_symlink("/proc/self/exe")));

    const std::vector<std::string> dirs = default_shipped_dirs();
    REQUIRE_FALSE(dirs.empty());
    CHECK(dirs.front() == installed_db_dirs(loaded_module_path()).front().string());
    CHECK(std::find(dirs.begin(), dirs.end(), fs::path(TILEOPS_TEST_SOURCE_DIR "/tuning_db").lexically_normal().string()) !=
          dirs.end());
    for (size_t i = 0; i < dirs.size(); ++i)
        for (size_t j = i + 1; j < dirs.size(); ++j) CHECK(dirs[i] != dirs[j]);
}
