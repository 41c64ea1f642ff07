// The kernel templates the library compiles: embedded at build time, or read from
// TILEOPS_TEMPLATE_DIR (for template development without rebuilding the library).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jit/compiler.hpp"

namespace tileops::jit {

// An `#include "name"` or `#include <name>` (spaces allowed after the '#'), and where its name
// sits in the text. Found anywhere in the text, comments included: an include seen too many
// costs a hash a little work, one missed would leave a dependency out of it.
struct Include {
    std::string name;
    bool quoted = false;        // "name", not <name>
    size_t begin = 0, end = 0;  // the name is content[begin, end)
};
std::vector<Include> includes(const std::string& content);

struct TemplateFile {
    std::string path;  // relative to kernel_templates/, e.g. "rmsnorm.cuh", "common/types.cuh"
    std::string content;
};

class TemplateRegistry {
public:
    // The process-wide registry (reads TILEOPS_TEMPLATE_DIR once).
    static const TemplateRegistry& instance();

    // Embedded templates.
    TemplateRegistry();
    // Templates read from a directory (every *.cuh below it); throws FileError when unreadable.
    explicit TemplateRegistry(const std::string& directory);

    const std::vector<TemplateFile>& files() const noexcept { return files_; }
    const std::string& origin() const noexcept { return origin_; }
    // Throws Error naming the file and where templates came from when it is missing.
    const TemplateFile& file(const std::string& path) const;

    // Content hash of a template and of every template file it includes (transitively), by
    // content only: a file's path plays no part, so moving files changes no hash. What a compiled
    // kernel and a tuning entry depend on. Throws Error when a file is missing.
    std::string template_hash(const std::string& path) const;
    bool contains(const std::string& path) const;

    // The in-memory headers handed to NVRTC: every template file by its relative path.
    std::vector<std::pair<std::string, std::string>> headers() const;

private:
    static constexpr int kMaxIncludeDepth = 64;
    std::string content_hash(const std::string& path, std::map<std::string, std::string>& memo, int depth) const;

    std::vector<TemplateFile> files_;
    std::string origin_;
};

// The translation unit NVRTC compiles for a kernel of `template_path`: it includes the template;
// the kernel itself is instantiated through its name expression.
std::string render_translation_unit(const std::string& template_path);

// A compile request for kernels of one template (all instantiated in one NVRTC program).
jit::CompileRequest compile_request(const std::string& template_path, std::vector<std::string> name_expressions,
                                        const std::string& arch);

}  // namespace tileops::jit
