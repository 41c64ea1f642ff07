#include "jit/missed_kernels.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jit/template_registry.hpp"
#include "tileops/error.hpp"
#include "util/file_util.hpp"

namespace tileops::jit {
namespace {

// Longest kernel name a manifest may hold: the library's longest is a few hundred characters.
constexpr size_t kMaxNameLength = 4096;
// Longest line parsed: three fields of at most kMaxNameLength, even with every character written
// as a \u escape. A longer line cannot hold a kernel, and parsing one (a line of a million '[')
// would build a JSON tree tens of times its size.
constexpr size_t kMaxLineLength = 64 * 1024;
// Rejected lines reported one by one; the rest are counted in one last report. Each report costs
// far more memory (and a line of output) than the two bytes of a bad line: a manifest of millions
// of bad lines would otherwise take gigabytes.
constexpr size_t kMaxRejectedReported = 100;

// A name NVRTC will be asked to instantiate: printable ASCII only, no line breaks or quotes.
bool plausible_name(const std::string& name) {
    if (name.empty() || name.size() > kMaxNameLength) return false;
    for (const char c : name)
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
    return true;
}

}  // namespace

JitPolicy jit_policy(const std::filesystem::path& cache_dir, bool allow_compile) {
    JitPolicy policy;
    const auto jit = util::env("TILEOPS_JIT");
    if (jit) {
        if (*jit == "on") policy.mode = JitMode::on;
        else if (*jit == "warn") policy.mode = JitMode::warn;
        else if (*jit == "off") policy.mode = JitMode::off;
        else
            throw InvalidArgument(fmt::format("tileops: TILEOPS_JIT must be on, warn or off, got '{}'", *jit));
    }
    if (util::env_switch("TILEOPS_NO_COMPILE")) {
        if (jit && policy.mode != JitMode::off)
            throw InvalidArgument(fmt::format("tileops: TILEOPS_NO_COMPILE=1 contradicts TILEOPS_JIT={}", *jit));
        policy.mode = JitMode::off;
    }
    if (!allow_compile) policy.mode = JitMode::off;
    const auto manifest = util::env("TILEOPS_JIT_MANIFEST");
    policy.manifest = manifest ? std::filesystem::path(*manifest) : cache_dir / "missed-kernels.jsonl";
    return policy;
}

bool MissedKernel::operator<(const MissedKernel& o) const {
    return std::tie(template_file, name_expression, arch) < std::tie(o.template_file, o.name_expression, o.arch);
}

std::string manifest_line(const MissedKernel& kernel) {
    return nlohmann::json{{"template", kernel.template_file}, {"kernel", kernel.name_expression}, {"arch", kernel.arch}}
               .dump() +
           '\n';
}

void append_to_manifest(const std::filesystem::path& path, const MissedKernel& kernel) {
    std::error_code ec;
    if (!path.parent_path().empty()) std::filesystem::create_directories(path.parent_path(), ec);
    // O_NOFOLLOW: a manifest that is a link would append to its target.
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        throw FileError(fmt::format("tileops: cannot open the JIT manifest {}: {}", path.string(), std::strerror(errno)));
    const std::string line = manifest_line(kernel);
    const ssize_t written = ::write(fd, line.data(), line.size());
    const int err = errno;
    ::close(fd);
    if (written != static_cast<ssize_t>(line.size()))
        throw FileError(fmt::format("tileops: cannot append to the JIT manifest {}: {}", path.string(),
                                    written < 0 ? std::strerror(err) : "short write"));
}

std::vector<MissedKernel> read_manifest(const std::filesystem::path& path, std::vector<std::string>& rejected) {
    std::string why;
    const auto text = util::read_file(path, util::kMaxReadBytes, &why);
    if (!text) throw FileError(fmt::format("tileops: cannot read the JIT manifest {}: {}", path.string(), why));
    std::set<MissedKernel> kernels;
    std::istringstream lines(*text);
    size_t number = 0, reported = 0, unreported = 0;
    for (std::string line; std::getline(lines, line);) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto reject = [&](const std::string& reason) {
            if (reported++ < kMaxRejectedReported) rejected.push_back(fmt::format("line {}: {}", number, reason));
            else ++unreported;
        };
        if (line.size() > kMaxLineLength) {
            reject(fmt::format("{} bytes, longer than any kernel's line", line.size()));
            continue;
        }
        const nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
        if (entry.is_discarded() || !entry.is_object()) {
            reject("not a JSON object");
            continue;
        }
        MissedKernel kernel;
        bool complete = true;
        for (auto [field, value] : {std::pair{"template", &kernel.template_file}, {"kernel", &kernel.name_expression},
                                    {"arch", &kernel.arch}}) {
            if (!entry.contains(field) || !entry[field].is_string()) {
                reject(fmt::format("\"{}\" must be a string", field));
                complete = false;
                break;
            }
            *value = entry[field].get<std::string>();
        }
        if (!complete) continue;
        if (!TemplateRegistry::instance().contains(kernel.template_file)) {
            reject(fmt::format("no kernel template '{}' in this library", kernel.template_file));
            continue;
        }
        if (!plausible_name(kernel.name_expression) || !plausible_name(kernel.arch)) {
            reject("the kernel or arch name holds characters no kernel name has, or is too long");
            continue;
        }
        kernels.insert(std::move(kernel));
    }
    if (unreported > 0)
        rejected.push_back(fmt::format("{} more lines are not kernels either (only the first {} are listed)", unreported,
                                       kMaxRejectedReported));
    return {kernels.begin(), kernels.end()};
}

bool MissRecorder::first_time(const MissedKernel& kernel) {
    std::lock_guard lock(mutex_);
    return seen_.insert(kernel).second;
}

}  // namespace tileops::jit
