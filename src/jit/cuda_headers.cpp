#include "jit/cuda_headers.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "jit/compiler.hpp"
#include "jit/template_registry.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

namespace tileops::jit {
namespace fs = std::filesystem;
namespace {

// Where a compiler finds `name`, or an empty path.
fs::path resolve(const std::string& name, bool quoted, const fs::path& from, const std::vector<std::string>& dirs) {
    std::error_code ec;
    if (quoted && !from.empty()) {
        const fs::path beside = from.parent_path() / name;
        if (fs::is_regular_file(beside, ec)) return fs::weakly_canonical(beside, ec);
    }
    for (const std::string& dir : dirs) {
        const fs::path candidate = fs::path(dir) / name;
        if (fs::is_regular_file(candidate, ec)) return fs::weakly_canonical(candidate, ec);
    }
    return {};
}

}  // namespace

std::string headers_closure_hash(const std::vector<std::string>& roots, const std::vector<std::string>& include_dirs,
                                 size_t* files) {
    // Files are hashed in the order of their resolved paths, so the result does not depend on
    // the order includes are met in; each is named by what its first includer wrote, relative to
    // an include directory, never by an absolute path (a toolkit may live anywhere).
    std::map<fs::path, std::string> found;  // resolved path -> the name it was included as
    std::vector<std::pair<fs::path, std::string>> pending;
    for (const std::string& root : roots)
        if (fs::path p = resolve(root, false, {}, include_dirs); !p.empty()) pending.emplace_back(p, root);
    while (!pending.empty()) {
        auto [path, name] = std::move(pending.back());
        pending.pop_back();
        if (found.count(path)) continue;
        found.emplace(path, name);
        const auto text = util::read_file(path);
        if (!text) continue;
        for (const Include& include : includes(*text))
            if (fs::path p = resolve(include.name, include.quoted, path, include_dirs); !p.empty() && !found.count(p))
                pending.emplace_back(p, include.name);
    }
    util::Sha256 hash;
    hash.field("tileops-cuda-headers-v1");
    for (const auto& [path, name] : found) {
        const auto text = util::read_file(path);
        hash.field(name).field(text ? *text : std::string("<unreadable>"));
    }
    if (files != nullptr) *files = found.size();
    return hash.hex_digest();
}

const std::string* cuda_headers_hash_if_found() {
    static const std::optional<std::string> hash = []() -> std::optional<std::string> {
        try {
            (void)cuda_include_dirs();
        } catch (const Unsupported&) {
            return std::nullopt;  // no toolkit headers here: nothing can be compiled, nor checked
        }
        std::set<std::string> roots;
        for (const TemplateFile& file : TemplateRegistry::instance().files())
            for (const Include& include : includes(file.content))
                if (!include.quoted) roots.insert(include.name);
        size_t files = 0;
        std::string digest = headers_closure_hash({roots.begin(), roots.end()}, cuda_include_dirs(), &files);
        util::logger().debug("tileops: CUDA headers hashed: {} files from {} includes", files, roots.size());
        return digest;
    }();
    return hash ? &*hash : nullptr;
}

}  // namespace tileops::jit
