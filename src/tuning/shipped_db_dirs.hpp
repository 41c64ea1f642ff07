// Where the shipped tuning databases are: beside the installed library (found from the loaded
// module, so a prefix moved after installation still finds its own), then the install prefix the
// build was configured with, then the source tree's tuning_db/ (a build used in place).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tileops::tuning {

// Where an installation holding `module` keeps the databases: share/tileops_jit/tuning_db one and
// two levels above the module's directory (prefix/bin/tileops-tune, prefix/lib/libtileops_jit.so
// and Debian's prefix/lib/<triplet>/libtileops_jit.so).
std::vector<std::filesystem::path> installed_db_dirs(const std::filesystem::path& module);

// The file this library's code was loaded from: the shared library, or the executable it is
// linked into; empty when it cannot be told.
std::filesystem::path loaded_module_path();

// The directories searched for shipped databases, in order, without duplicates.
std::vector<std::string> default_shipped_dirs();

}  // namespace tileops::tuning
