// tileops-tune: tune problems ahead of time, pre-warm kernel caches, and inspect, merge and verify
// tuning databases. `tileops-tune <command> --help` describes each command.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jit/compiler.hpp"
#include "tileops/version.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/tune_worker.hpp"
#include "util/log.hpp"

namespace {

struct Command {
    const char* name;
    int (*run)(int, char**);
    const char* summary;
};

const Command kCommands[] = {
    {"tune", tileops::cli::cmd_tune, "autotune problems on this GPU and write them into a database"},
    {"warm", tileops::cli::cmd_warm, "compile every kernel a database or workload needs into the kernel cache (no GPU needed)"},
    {"list", tileops::cli::cmd_list, "list a database's entries as a table or JSON"},
    {"show", tileops::cli::cmd_show, "show a database's entries in full (metadata, runners-up, provenance)"},
    {"merge", tileops::cli::cmd_merge, "merge databases, keeping the faster entry per key"},
    {"verify", tileops::cli::cmd_verify, "re-time a database's entries on this GPU and report drift"},
    {"explain", tileops::cli::cmd_explain, "which config a problem would get, and why"},
    {"rekey", tileops::cli::cmd_rekey, "re-key entries to this build's kernel templates (after proving the kernels unchanged)"},
    {"cache", tileops::cli::cmd_cache, "the kernel cache: size, list, clear, gc"},
    {"pack", tileops::cli::cmd_pack, "write a fleet bundle: databases and their kernels for each arch, in one file"},
    {"unpack", tileops::cli::cmd_unpack, "check a fleet bundle and copy it into a kernel cache (--list: list it)"},
};

// Edits (insertions, deletions, substitutions) between two words: a typo is one or two away.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

void usage(std::FILE* out) {
    fmt::print(out, "usage: tileops-tune <command> [options]\n\ncommands:\n");
    for (const Command& c : kCommands) fmt::print(out, "  {:<8} {}\n", c.name, c.summary);
    fmt::print(out, "\n`tileops-tune <command> --help` for a command's options, `tileops-tune --version` the "
                    "version. Logging: TILEOPS_LOG_LEVEL=debug.\n");
}

}  // namespace

int main(int argc, char** argv) {
    // The library logs to stderr (its "tileops" logger), so --json output on stdout stays parseable.
    tileops::util::configure_logging();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const std::string name = argv[1];
    if (name == "--help" || name == "-h" || name == "help") {
        usage(stdout);
        return 0;
    }
    if (name == "--version" || name == "version") {
        // --json is the only option it takes, as every command takes it.
        bool json = false;
        for (int i = 2; i < argc; ++i) {
            if (std::strcmp(argv[i], "--json") == 0 && !json) {
                json = true;
                continue;
            }
            fmt::print(stderr, "tileops-tune {}: unexpected argument '{}' (it takes --json only)\n", name, argv[i]);
            return 2;
        }
        if (json)
            fmt::print("{}\n", nlohmann::json({{"version", tileops::version()},
                                               {"nvrtc_version", tileops::jit::nvrtc_version()}})
                                   .dump(2));
        else
            fmt::print("tileops-tune {} (NVRTC {})\n", tileops::version(), tileops::jit::nvrtc_version());
        return 0;
    }
    for (const Command& c : kCommands)
        if (name == c.name) return c.run(argc - 1, argv + 1);
    // Not listed: `tune` starts it (tune_worker.hpp).
    if (name == "tune-worker") return tileops::cli::cmd_tune_worker(argc - 1, argv + 1);
    const Command* closest = nullptr;
    for (const Command& c : kCommands)
        if (edit_distance(name, c.name) <= 2 && (closest == nullptr || edit_distance(name, c.name) < edit_distance(name, closest->name)))
            closest = &c;
    if (closest != nullptr) {
        fmt::print(stderr, "tileops-tune: unknown command '{}'; did you mean '{}'?\n", name, closest->name);
    } else {
        fmt::print(stderr, "tileops-tune: unknown command '{}'\n\n", name);
        usage(stderr);
    }
    return 2;
}
