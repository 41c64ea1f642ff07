#include "tuning/shipped_db_dirs.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "tileops/error.hpp"
#include "util/file_util.hpp"

#ifndef TILEOPS_DB_SUBDIR
#define TILEOPS_DB_SUBDIR "share/tileops_jit/tuning_db"
#endif

namespace tileops::tuning {
namespace fs = std::filesystem;

std::string python_install_dir() {
#ifdef TILEOPS_PYTHON_INSTALL_DIR
    return TILEOPS_PYTHON_INSTALL_DIR;
#else
    return "";
#endif
}

// `dir` without the trailing components `tail` (both normalized), or nullopt when it does not end so.
static std::optional<fs::path> strip_tail(const fs::path& dir, const fs::path& tail) {
    std::vector<fs::path> a, b;
    for (const fs::path& part : dir.lexically_normal()) if (!part.empty()) a.push_back(part);
    for (const fs::path& part : tail.lexically_normal()) if (!part.empty()) b.push_back(part);
    if (b.empty() || b.size() >= a.size() || !std::equal(b.rbegin(), b.rend(), a.rbegin())) return std::nullopt;
    fs::path prefix;
    for (size_t i = 0; i < a.size() - b.size(); ++i) prefix /= a[i];
    return prefix;
}

std::vector<fs::path> installed_db_dirs(const fs::path& module) {
    const fs::path tail = TILEOPS_DB_SUBDIR;
    const fs::path dir = module.parent_path();
    std::vector<fs::path> dirs;
    if (const std::string python = python_install_dir(); !python.empty())
        if (auto prefix = strip_tail(dir, fs::path(python) / "tileops_jit")) dirs.push_back((*prefix / tail).lexically_normal());
    dirs.push_back((dir / ".." / tail).lexically_normal());
    dirs.push_back((dir / ".." / ".." / tail).lexically_normal());
    return dirs;
}

fs::path loaded_module_path() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&loaded_module_path), &info) != 0 && info.dli_fname != nullptr) {
        const fs::path path(info.dli_fname);
        // The main program's entry may be the name it was started by: ask the kernel instead.
        if (path.is_absolute() && path.filename().string().find(".so") != std::string::npos) return path;
    }
    char buffer[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
    if (n <= 0) return {};
    return fs::path(std::string(buffer, static_cast<size_t>(n)));
}

std::optional<fs::path> shipped_db_dir_from_env() {
    const std::optional<std::string> value = util::env("TILEOPS_SHIPPED_DB_DIR");
    if (!value) return std::nullopt;
    std::error_code ec;
    if (!fs::is_directory(*value, ec))
        throw InvalidArgument(fmt::format("tileops: TILEOPS_SHIPPED_DB_DIR='{}' is not a directory{} (it names the "
                                          "directory of shipped tuning databases, *.json; unset it to use the "
                                          "installed ones)",
                                          *value, fs::exists(*value, ec) ? "" : ": no such file or directory"));
    return fs::path(*value);
}

std::vector<fs::path> shipped_db_candidates(const fs::path& module) {
    std::vector<fs::path> dirs;
    const auto add = [&](const fs::path& dir) {
        if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
    };
    if (!module.empty())
        for (const fs::path& dir : installed_db_dirs(module)) add(dir);
#ifdef TILEOPS_INSTALL_DB_DIR
    add(fs::path(TILEOPS_INSTALL_DB_DIR).lexically_normal());
#endif
    return dirs;
}

std::vector<std::string> default_shipped_dirs() {
    if (const std::optional<fs::path> dir = shipped_db_dir_from_env()) return {dir->string()};
    const std::vector<fs::path> candidates = shipped_db_candidates(loaded_module_path());
    for (const fs::path& dir : candidates) {
        std::error_code ec;
        if (fs::is_directory(dir, ec)) return {dir.string()};
    }
    std::vector<std::string> looked;
    std::transform(candidates.begin(), candidates.end(), std::back_inserter(looked),
                   [](const fs::path& dir) { return dir.string(); });
    return looked;
}

}  // namespace tileops::tuning
