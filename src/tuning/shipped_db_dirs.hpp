// Where the shipped tuning databases are. They come from ONE directory, the first of these that
// exists (the others are never read, so an installed program cannot mix in another tree's files):
//   1. TILEOPS_SHIPPED_DB_DIR, when set: it must be a directory (else tileops::InvalidArgument);
//   2. share/tileops_jit/tuning_db of the prefix the loaded module (the shared library, or the
//      program the static library is linked into, or the Python module) is installed in:
//      installed_db_dirs() below;
//   3. share/tileops_jit/tuning_db of the prefix the build was configured with (a program linked
//      statically from outside any prefix).
// The build tree is laid out as a prefix (<build>/share/tileops_jit/tuning_db links to the source
// tree's tuning_db/), so the build's own programs find the source tree's databases by rule 2; the
// library never names the source tree.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tileops::tuning {

// Where an installation holding `module` keeps the databases, most specific first: for the Python
// module, <prefix>/share/tileops_jit/tuning_db where the module lies in
// <prefix>/<python_install_dir()>/tileops_jit; then share/tileops_jit/tuning_db one and two levels
// above the module's directory (prefix/bin/tileops-tune, prefix/lib/libtileops_jit.so and Debian's
// prefix/lib/<triplet>/libtileops_jit.so).
std::vector<std::filesystem::path> installed_db_dirs(const std::filesystem::path& module);

// The Python package's install directory relative to the prefix, as the build was configured
// (e.g. lib/python3.11/site-packages); empty when the build has no Python module or installs it
// to an absolute directory.
std::string python_install_dir();

// The file this library's code was loaded from: the shared library, or the executable it is
// linked into; empty when it cannot be told.
std::filesystem::path loaded_module_path();

// TILEOPS_SHIPPED_DB_DIR: nullopt when unset or empty; throws InvalidArgument when it names no
// directory.
std::optional<std::filesystem::path> shipped_db_dir_from_env();

// The directories looked at in order (rules 2 and 3 above) for `module`, without duplicates.
std::vector<std::filesystem::path> shipped_db_candidates(const std::filesystem::path& module);

// The shipped databases' directory by the rule above, as a one-element list; when none exists, every
// directory looked at (so that the warning names them).
std::vector<std::string> default_shipped_dirs();

}  // namespace tileops::tuning
