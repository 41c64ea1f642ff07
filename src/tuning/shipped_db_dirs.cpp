#include "tuning/shipped_db_dirs.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>

namespace tileops::tuning {
namespace fs = std::filesystem;

std::vector<fs::path> installed_db_dirs(const fs::path& module) {
    const fs::path tail = fs::path("share") / "tileops_jit" / "tuning_db";
    return {(module.parent_path() / ".." / tail).lexically_normal(),
            (module.parent_path() / ".." / ".." / tail).lexically_normal()};
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

std::vector<std::string> default_shipped_dirs() {
    std::vector<std::string> dirs;
    const auto add = [&](const fs::path& dir) {
        if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir.string()) == dirs.end()) dirs.push_back(dir.string());
    };
    if (const fs::path module = loaded_module_path(); !module.empty())
        for (const fs::path& dir : installed_db_dirs(module)) add(dir);
#ifdef TILEOPS_SHIPPED_DB_DIR
    add(fs::path(TILEOPS_SHIPPED_DB_DIR).lexically_normal());
#endif
#ifdef TILEOPS_SOURCE_DB_DIR
    add(fs::path(TILEOPS_SOURCE_DB_DIR).lexically_normal());
#endif
    return dirs;
}

}  // namespace tileops::tuning
