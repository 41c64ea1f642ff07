#include "jit/cuda_headers.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "jit/compiler.hpp"
#include "tileops/error.hpp"
#include "jit/template_registry.hpp"
#include "util/file_util.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

namespace tileops::jit {
namespace fs = std::filesystem;
namespace {

// The names of a file's `#include "..."` and `#include <...>` lines, and whether each was quoted.
// Conditional includes are all taken: hashing a header that a build does not use costs nothing
// but a little time.
std::vector<std::pair<std::string, bool>> include_names(std::string_view text) {
    std::vector<std::pair<std::string, bool>> names;
    size_t line = 0;
    while (line < text.size()) {
        const size_t end = std::min(text.find('\n', line), text.size());
        std::string_view l = text.substr(line, end - line);
        line = end + 1;
        const size_t hash = l.find_first_not_of(" \t");
        if (hash == std::string_view::npos || l[hash] != '#') continue;
        const size_t word = l.find_first_not_of(" \t", hash + 1);
        if (word == std::string_view::npos || l.compare(word, 7, "include") != 0) continue;
        const size_t open = l.find_first_not_of(" \t", word + 7);
        if (open == std::string_view::npos || (l[open] != '"' && l[open] != '<')) continue;
        const size_t close = l.find(l[open] == '"' ? '"' : '>', open + 1);
        if (close == std::string_view::npos) continue;
        names.emplace_back(std::string(l.substr(open + 1, close - open - 1)), l[open] == '"');
    }
    return names;
}

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
        for (const auto& [include, quoted] : include_names(*text))
            if (fs::path p = resolve(include, quoted, path, include_dirs); !p.empty() && !found.count(p))
                pending.emplace_back(p, include);
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
            for (const auto& [name, quoted] : include_names(file.content))
                if (!quoted) roots.insert(name);
        size_t files = 0;
        std::string digest = headers_closure_hash({roots.begin(), roots.end()}, cuda_include_dirs(), &files);
        util::logger().debug("tileops: CUDA headers hashed: {} files from {} includes", files, roots.size());
        return digest;
    }();
    return hash ? &*hash : nullptr;
}

}  // namespace tileops::jit
