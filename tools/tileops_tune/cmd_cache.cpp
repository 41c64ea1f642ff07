// tileops-tune cache: what the kernel cache holds, and its upkeep (clear, gc) without a program
// that uses it.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jit/disk_cache.hpp"
#include "tileops/error.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/output.hpp"

namespace tileops::cli {
namespace {

std::string utc_text(std::chrono::system_clock::time_point when) {
    const std::time_t t = std::chrono::system_clock::to_time_t(when);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

std::string mb_text(uint64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

int cmd_cache(int argc, char** argv) {
    return run_command(
        "cache",
        "The kernel cache: `size` (entries and bytes), `list` (each entry, most recently used first), `clear` "
        "(remove every entry not in use), `gc` (evict to the size bound; remove stale temporary and lock files).",
        argc, argv,
        [](cxxopts::Options& options) {
            options.add_options()("action", "size, list, clear or gc", cxxopts::value<std::string>())(
                "cache-dir", "kernel cache directory (default: TILEOPS_CACHE_DIR or the user cache)",
                cxxopts::value<std::string>())(
                "max-mb", "gc: the size bound in MB (default: TILEOPS_CACHE_MAX_MB, else 2048)", cxxopts::value<uint64_t>());
            options.parse_positional({"action"});
            options.positional_help("size|list|clear|gc");
        },
        [](const cxxopts::ParseResult& args) {
            if (!args.count("action")) throw InvalidArgument("give an action: size, list, clear or gc");
            const std::string action = args["action"].as<std::string>();
            if (action != "size" && action != "list" && action != "clear" && action != "gc")
                throw InvalidArgument(fmt::format("unknown action '{}' (size, list, clear or gc)", action));
            if (args.count("max-mb") && action != "gc") throw InvalidArgument("--max-mb applies to gc only");
            const std::filesystem::path dir = args.count("cache-dir") ? std::filesystem::path(args["cache-dir"].as<std::string>())
                                                                      : jit::DiskCache::default_directory();
            const uint64_t max_bytes =
                args.count("max-mb") ? args["max-mb"].as<uint64_t>() << 20 : jit::DiskCache::default_max_bytes();
            jit::DiskCache cache(dir, max_bytes);
            const bool json = args.count("json") > 0;
            nlohmann::json out = {{"cache_dir", dir.string()}, {"action", action}};
            if (action == "clear") {
                out["removed"] = cache.clear();
            } else if (action == "gc") {
                out["removed"] = cache.evict();
            }
            const auto entries = cache.entries();
            out["entries"] = entries.size();
            out["bytes"] = cache.total_bytes();
            out["max_bytes"] = cache.max_bytes();
            if (action == "list") {
                std::vector<jit::DiskCacheEntry> by_use(entries.begin(), entries.end());
                std::stable_sort(by_use.begin(), by_use.end(), [](const auto& a, const auto& b) { return a.last_use > b.last_use; });
                nlohmann::json list = nlohmann::json::array();
                std::vector<std::vector<std::string>> rows;
                for (const jit::DiskCacheEntry& e : by_use) {
                    list.push_back({{"key", e.key}, {"bytes", e.size}, {"last_use", utc_text(e.last_use)}});
                    rows.push_back({e.key, fmt::format("{}", e.size), utc_text(e.last_use)});
                }
                out["list"] = list;
                if (!json) print_table({"key", "bytes", "last use"}, rows);
            }
            if (json) {
                fmt::print("{}\n", out.dump(2));
                return 0;
            }
            const std::string bound = cache.max_bytes() == 0 ? "unbounded" : "bound " + mb_text(cache.max_bytes());
            if (out.contains("removed")) fmt::print("removed {} entries\n", out["removed"].get<size_t>());
            fmt::print("{}: {} entries, {} ({})\n", dir.string(), entries.size(), mb_text(cache.total_bytes()), bound);
            return 0;
        });
}

}  // namespace tileops::cli
