// tileops-tune as a user runs it: exit codes (0 success, 1 failed work, 2 bad usage), --help and
// --json of every command, warm without a GPU, list / show / merge of fixture databases, explain's
// lookup order, and tune failing cleanly where there is no GPU. Each case runs the executable in a
// child process and reads its exit status, stdout and stderr.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jit/bundle.hpp"
#include "jit/template_registry.hpp"
#include "jit/compiler.hpp"
#include "support/test_support.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops/version.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::WithinAbs;
using nlohmann::json;
using tileops::TuningDb;
using tileops::TuningEntry;
using tileops::TuningKey;
using tileops::test::TempDir;

fs::path fixture(const std::string& name) { return fs::path(TILEOPS_TEST_SOURCE_DIR) / "tests" / "data" / "tuning" / name; }

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

struct ToolResult {
    int status = -1;  // exit code, or 128 + signal
    std::string out;
    std::string err;
};

#ifdef TILEOPS_TUNE_EXE

// Runs tileops-tune with `args`. The child gets this process's environment without the variables
// that would change which databases or distance it uses, and its stdin is /dev/null (so no
// progress bar: stderr is a file).
ToolResult run_program(const std::string& exe, const std::vector<std::string>& args,
                       const std::vector<std::string>& extra_env = {}) {
    TempDir capture;
    const fs::path out_path = capture.path() / "stdout";
    const fs::path err_path = capture.path() / "stderr";

    // Everything the child needs is built before fork.
    std::vector<std::string> argv_storage = {exe};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::set<std::string> dropped = {"TILEOPS_TUNING_DB", "TILEOPS_TUNING_MAX_DISTANCE", "TILEOPS_NO_COMPILE",
                                           "TILEOPS_CACHE_DIR", "TILEOPS_SHIPPED_DB_DIR"};
    std::vector<std::string> env_storage;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry = *e;
        if (!dropped.count(entry.substr(0, entry.find('=')))) env_storage.push_back(entry);
    }
    env_storage.push_back("TILEOPS_CACHE_DIR=" + (capture.path() / "default-cache").string());
    env_storage.insert(env_storage.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (std::string& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);

    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const int in = ::open("/dev/null", O_RDONLY);
        const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || err < 0) ::_exit(126);
        ::dup2(in, STDIN_FILENO);
        ::dup2(out, STDOUT_FILENO);
        ::dup2(err, STDERR_FILENO);
        ::execve(argv[0], argv.data(), envp.data());
        ::_exit(127);
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid) break;
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            FAIL("tileops-tune did not finish within 120 s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ToolResult result;
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = slurp(out_path);
    result.err = slurp(err_path);
    return result;
}

ToolResult run_tool(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    return run_program(TILEOPS_TUNE_EXE, args, extra_env);
}

#define TILEOPS_REQUIRE_TUNE_EXE() (void)0
#else
ToolResult run_program(const std::string&, const std::vector<std::string>&, const std::vector<std::string>& = {}) {
    return {};
}
ToolResult run_tool(const std::vector<std::string>&, const std::vector<std::string>& = {}) { return {}; }
#define TILEOPS_REQUIRE_TUNE_EXE() SKIP("tileops-tune was not built (TILEOPS_BUILD_TOOLS=OFF)")
#endif

// Files under `dir` whose name ends in `suffix`.
size_t count_files(const fs::path& dir, const std::string& suffix) {
    size_t n = 0;
    std::error_code ec;
    if (!fs::exists(dir, ec)) return 0;
    for (const auto& item : fs::recursive_directory_iterator(dir)) {
        const std::string name = item.path().filename().string();
        if (item.is_regular_file() && name.size() >= suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
            ++n;
    }
    return n;
}

json parse_json(const std::string& text) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        FAIL("not JSON (" << e.what() << "):\n" << text);
    }
    return {};
}

// `tileops-tune explain ARGS --json` of one problem: it must succeed; returns that problem's object.
json explain_one(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), "explain");
    args.push_back("--json");
    const ToolResult r = run_tool(args, env);
    INFO(r.err);
    REQUIRE(r.status == 0);
    const json out = parse_json(r.out);
    REQUIRE(out.is_array());
    REQUIRE(out.size() == 1);
    return out[0];
}

}  // namespace

TEST_CASE("tileops-tune: usage errors exit 2, --help exits 0", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();

    const ToolResult bare = run_tool({});
    CHECK(bare.status == 2);
    CHECK_THAT(bare.err, ContainsSubstring("usage: tileops-tune <command>"));
    CHECK(bare.out.empty());

    for (const char* help : {"--help", "-h", "help"}) {
        CAPTURE(help);
        const ToolResult r = run_tool({help});
        CHECK(r.status == 0);
        CHECK_THAT(r.out, ContainsSubstring("usage: tileops-tune <command>"));
        for (const char* command : {"tune", "warm", "list", "show", "merge", "verify", "explain"})
            CHECK_THAT(r.out, ContainsSubstring(std::string("  ") + command + " "));
    }

    const ToolResult unknown = run_tool({"frobnicate"});
    CHECK(unknown.status == 2);
    CHECK_THAT(unknown.err, ContainsSubstring("unknown command 'frobnicate'"));
    CHECK_THAT(unknown.err, ContainsSubstring("usage: tileops-tune"));
    const ToolResult typo = run_tool({"wram"});
    CHECK(typo.status == 2);
    CHECK_THAT(typo.err, ContainsSubstring("unknown command 'wram'; did you mean 'warm'?"));
    const ToolResult version = run_tool({"--version"});
    CHECK(version.status == 0);
    CHECK_THAT(version.out, ContainsSubstring(std::string("tileops-tune ") + TILEOPS_VERSION_STRING + " (NVRTC "));

    for (const char* command : {"tune", "warm", "list", "show", "merge", "verify", "explain", "rekey", "cache"}) {
        CAPTURE(command);
        const ToolResult r = run_tool({command, "--help"});
        CHECK(r.status == 0);
        CHECK_THAT(r.out, ContainsSubstring(std::string("tileops-tune ") + command));
        CHECK_THAT(r.out, ContainsSubstring("--json"));
        CHECK_THAT(r.out, ContainsSubstring("--help"));
        // An option the command does not have is bad usage, with the command's help on stderr.
        const ToolResult bad = run_tool({command, "--no-such-option"});
        CHECK(bad.status == 2);
        CHECK_THAT(bad.err, ContainsSubstring("no-such-option"));
    }

    // Missing arguments are bad usage too, with a message saying what to give.
    const ToolResult list_nothing = run_tool({"list"});
    CHECK(list_nothing.status == 2);
    CHECK_THAT(list_nothing.err, ContainsSubstring("give the database file"));
    const ToolResult merge_no_output = run_tool({"merge", fixture("cli_fleet_a.json").string()});
    CHECK(merge_no_output.status == 2);
    CHECK_THAT(merge_no_output.err, ContainsSubstring("-o"));
    const ToolResult explain_nothing = run_tool({"explain", "--arch", "sm_90a"});
    CHECK(explain_nothing.status == 2);
    const ToolResult bad_shape = run_tool({"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "64by4096"});
    CHECK(bad_shape.status == 2);
    CHECK_THAT(bad_shape.err, ContainsSubstring("64by4096"));

    // An unknown op is bad usage, named in the message with the ops there are.
    const ToolResult unknown_op =
        run_tool({"explain", "--arch", "sm_90a", "--op", "frobnorm", "--shape", "64x4096", "--dtype", "bf16"});
    CHECK(unknown_op.status == 2);
    CHECK_THAT(unknown_op.err, ContainsSubstring("unknown op 'frobnorm'"));
    CHECK_THAT(unknown_op.err, ContainsSubstring("rmsnorm"));
    CHECK(unknown_op.out.empty());

    // An input file that is not there is bad usage, like a missing argument, for every command
    // that reads one; a database that cannot be parsed is failed work.
    TempDir dir;
    const std::string missing_path = (dir.path() / "missing.json").string();
    const std::vector<std::vector<std::string>> missing_inputs = {
        {"list", missing_path},
        {"show", missing_path},
        {"verify", missing_path},
        {"merge", "-o", (dir.path() / "out.json").string(), fixture("cli_fleet_a.json").string(), missing_path},
        {"warm", "--arch", "sm_90a", "--db", missing_path},
        {"warm", "--arch", "sm_90a", "--workload", missing_path},
        {"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "64x4096", "--db", missing_path}};
    for (const auto& args : missing_inputs) {
        CAPTURE(args);
        const ToolResult missing = run_tool(args);
        CHECK(missing.status == 2);
        CHECK_THAT(missing.err, ContainsSubstring("missing.json: no such file"));
    }
    CHECK_FALSE(fs::exists(dir.path() / "out.json"));
    const ToolResult malformed = run_tool({"show", fixture("syntax_trailing_comma.json").string()});
    CHECK(malformed.status == 1);
    CHECK_THAT(malformed.err, ContainsSubstring("syntax_trailing_comma.json:7:3"));
}

TEST_CASE("tileops-tune: warm fills an empty kernel cache without a GPU, then finds it all cached", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const fs::path cache = dir.path() / "kernels";
    const std::vector<std::string> args = {"warm",        "--arch",  "sm_90a", "--op",   "rmsnorm",      "--shape",
                                           "64x4096",     "--dtype", "bf16",   "--json", "--cache-dir", cache.string()};
    REQUIRE(count_files(cache, ".cubin") == 0);

    // Off a terminal, progress comes as plain lines (here one per kernel), JSON or not.
    const ToolResult first = run_tool(args, {"TILEOPS_PROGRESS_SECONDS=0"});
    INFO(first.err);
    REQUIRE(first.status == 0);
    CHECK_THAT(first.err, ContainsSubstring("kernels for sm_90a; last tileops::rmsnorm") &&
                              ContainsSubstring("100% after"));
    const json cold = parse_json(first.out);
    const size_t kernels = cold.at("kernels").get<size_t>();
    CHECK(kernels >= 1);
    CHECK(cold.at("compiled").get<size_t>() == kernels);
    CHECK(cold.at("already_cached").get<size_t>() == 0);
    CHECK(cold.at("failed").empty());
    CHECK(cold.at("arch") == "sm_90a");
    CHECK(cold.at("problems") == 1);
    CHECK(cold.at("cache_dir") == cache.string());
    CHECK(count_files(cache, ".cubin") == kernels);  // one cache entry per kernel

    // What killed builds leave behind, an hour old: a temporary file and a lock without an entry.
    const fs::path fan = cache / "ab";
    fs::create_directories(fan);
    const fs::path temp = fan / ".ab00.cubin.tmp.12345.0", orphan = fan / (std::string("ab") + std::string(62, '0') + ".lock");
    for (const fs::path& p : {temp, orphan}) {
        std::ofstream(p) << "left behind";
        fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::hours(1));
    }

    const ToolResult second = run_tool(args);
    INFO(second.err);
    REQUIRE(second.status == 0);
    // A warm that stores nothing still cleans them up.
    CHECK_FALSE(fs::exists(temp));
    CHECK_FALSE(fs::exists(orphan));
    const json warm = parse_json(second.out);
    CHECK(warm.at("kernels").get<size_t>() == kernels);
    CHECK(warm.at("compiled").get<size_t>() == 0);
    CHECK(warm.at("already_cached").get<size_t>() == kernels);
    CHECK(warm.at("failed").empty());
    CHECK(count_files(cache, ".cubin") == kernels);
    CHECK(count_files(cache, ".lock") == 0);  // builders take their lock files with them

    // The table form says the same in words.
    std::vector<std::string> text_args = args;
    text_args.erase(std::find(text_args.begin(), text_args.end(), "--json"));
    const ToolResult text = run_tool(text_args);
    CHECK(text.status == 0);
    CHECK_THAT(text.out, ContainsSubstring("0 compiled, " + std::to_string(kernels) + " already cached, 0 failed"));

    // Nothing to compile, or an arch NVRTC does not know: bad usage.
    CHECK(run_tool({"warm", "--arch", "sm_90a", "--cache-dir", cache.string()}).status == 2);
    const ToolResult bad_arch =
        run_tool({"warm", "--arch", "sm_1", "--op", "rmsnorm", "--shape", "64x4096", "--cache-dir", cache.string()});
    CHECK(bad_arch.status == 2);
    CHECK_THAT(bad_arch.err, ContainsSubstring("sm_1"));
}

TEST_CASE("tileops-tune: help shows each option's default once and usage names the files", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    const ToolResult warm = run_tool({"warm", "--help"});
    CHECK_THAT(warm.out, ContainsSubstring("parallel compilations (default: all cores)"));
    CHECK_THAT(warm.out, !ContainsSubstring("(default: all cores) (default"));
    const ToolResult verify = run_tool({"verify", "--help"});
    CHECK_THAT(verify.out, ContainsSubstring("tileops-tune verify [OPTION...] DB.json"));
    CHECK_THAT(verify.out, !ContainsSubstring("positional parameters"));
    // -o is merge's output only; tune writes into --db.
    const ToolResult tune = run_tool({"tune", "--help"});
    CHECK_THAT(tune.out, ContainsSubstring("--db"));
    CHECK_THAT(tune.out, !ContainsSubstring("-o,"));
}

TEST_CASE("tileops-tune: warm --manifest compiles exactly the kernels a warn-mode process missed", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string cache = (dir.path() / "kernels").string();
    const fs::path manifest = dir.path() / "missed-kernels.jsonl";
    auto line = [](const char* arch) {
        return fmt::format(R"({{"template": "elementwise/elementwise.cuh", "kernel": "{}", "arch": "{}"}})",
                           "tileops::elementwise_kernel<float, float, 2, 4, 1, 256>", arch);
    };
    std::ofstream(manifest) << line("sm_90a") << "\n" << line("sm_80") << "\n{broken\n";
    const ToolResult warm = run_tool({"warm", "--arch", "sm_90a", "--manifest", manifest.string(), "--cache-dir", cache});
    INFO(warm.err);
    CHECK(warm.status == 1);  // the broken line is failed work, named
    CHECK_THAT(warm.out, ContainsSubstring("1 kernels for sm_90a (0 database entries, 1 manifest kernels"));
    CHECK_THAT(warm.err, ContainsSubstring("missed-kernels.jsonl: line 3: not a JSON object"));
    CHECK_THAT(warm.err, ContainsSubstring("skipped 1 manifest kernels for sm_80 (this warm is for sm_90a)"));
    CHECK(count_files(cache, ".cubin") == 1);
    const ToolResult missing = run_tool({"warm", "--arch", "sm_90a", "--manifest", (dir.path() / "none.jsonl").string()});
    CHECK(missing.status == 2);
}

TEST_CASE("tileops-tune: cache reports, lists, clears and collects the kernel cache", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string cache = (dir.path() / "kernels").string();
    const json empty = parse_json(run_tool({"cache", "size", "--cache-dir", cache, "--json"}).out);
    CHECK(empty.at("entries") == 0);
    CHECK(empty.at("bytes") == 0);
    REQUIRE(run_tool({"warm", "--arch", "sm_90a", "--op", "softmax", "--shape", "64x4096", "--cache-dir", cache}).status == 0);
    const json size = parse_json(run_tool({"cache", "size", "--cache-dir", cache, "--json"}).out);
    const size_t entries = size.at("entries").get<size_t>();
    CHECK(entries >= 1);
    CHECK(size.at("bytes").get<uint64_t>() > 0);
    const ToolResult list = run_tool({"cache", "list", "--cache-dir", cache, "--json"});
    REQUIRE(list.status == 0);
    CHECK(parse_json(list.out).at("list").size() == entries);
    const ToolResult table = run_tool({"cache", "list", "--cache-dir", cache});
    CHECK_THAT(table.out, ContainsSubstring("last use") && ContainsSubstring(std::to_string(entries) + " entries"));
    // gc to a bound of 0 MB (unbounded) removes nothing; clear removes everything.
    CHECK(parse_json(run_tool({"cache", "gc", "--max-mb", "0", "--cache-dir", cache, "--json"}).out).at("removed") == 0);
    const json cleared = parse_json(run_tool({"cache", "clear", "--cache-dir", cache, "--json"}).out);
    CHECK(cleared.at("removed").get<size_t>() == entries);
    CHECK(cleared.at("entries") == 0);
    CHECK(count_files(cache, ".cubin") == 0);
    // Bad actions and options are bad usage.
    CHECK(run_tool({"cache", "--cache-dir", cache}).status == 2);
    const ToolResult unknown = run_tool({"cache", "shrink", "--cache-dir", cache});
    CHECK(unknown.status == 2);
    CHECK_THAT(unknown.err, ContainsSubstring("unknown action 'shrink'"));
    CHECK(run_tool({"cache", "size", "--max-mb", "5", "--cache-dir", cache}).status == 2);
}

TEST_CASE("tileops-tune: an arch no GPU runs, a database of another arch or an unknown op is said, not a no-op",
          "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string cache = (dir.path() / "kernels").string();
    const std::string shipped = (fs::path(TILEOPS_TEST_SOURCE_DIR) / "tuning_db" / "h100-sxm.json").string();
    struct Case {
        std::vector<std::string> args;
        const char* says;
    };
    const std::vector<Case> cases = {
        {{"warm", "--arch", "sm_90", "--op", "rmsnorm", "--shape", "64x4096", "--cache-dir", cache}, "use --arch sm_90a"},
        {{"warm", "--arch", "sm_90b", "--op", "rmsnorm", "--shape", "64x4096", "--cache-dir", cache}, "use --arch sm_90a"},
        {{"warm", "--arch", "sm_100a", "--op", "rmsnorm", "--shape", "64x4096", "--cache-dir", cache}, "use --arch sm_100"},
        {{"warm", "--arch", "sm_75", "--op", "rmsnorm", "--shape", "64x4096", "--cache-dir", cache}, "sm_80 or newer"},
        {{"explain", "--arch", "sm_90", "--op", "rmsnorm", "--shape", "64x4096"}, "use --arch sm_90a"},
        {{"warm", "--arch", "sm_80", "--db", shipped, "--cache-dir", cache}, "every database entry is of another arch"},
        {{"list", shipped, "--filter-op", "rmsnrom"}, "--filter-op rmsnrom: no such op"},
        {{"show", shipped, "--filter-op", "rmsnrom"}, "no such op"},
    };
    for (const Case& c : cases) {
        const ToolResult r = run_tool(c.args);
        INFO(c.args[0] << " " << c.args[2] << ": " << r.err);
        CHECK(r.status == 2);
        CHECK_THAT(r.err, ContainsSubstring(c.says));
    }
    const ToolResult other = run_tool({"warm", "--arch", "sm_80", "--db", shipped, "--cache-dir", cache});
    CHECK_THAT(other.err, ContainsSubstring("skipped") && ContainsSubstring("tuned for sm_90a (this warm is for sm_80)"));
    CHECK(count_files(dir.path() / "kernels", ".cubin") == 0);
}

TEST_CASE("tileops-tune: warm --search-space compiles every config tune would time", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const fs::path cache = dir.path() / "kernels";
    const std::vector<std::string> problem = {"--arch", "sm_90a", "--op",          "silu",        "--shape", "64x4096",
                                              "--dtype", "bf16",  "--cache-dir", cache.string(), "--json"};
    auto warm = [&](bool search_space) {
        std::vector<std::string> args = {"warm"};
        args.insert(args.end(), problem.begin(), problem.end());
        if (search_space) args.push_back("--search-space");
        const ToolResult r = run_tool(args);
        INFO(r.err);
        REQUIRE(r.status == 0);
        return parse_json(r.out);
    };
    const json space = warm(true);
    const size_t kernels = space.at("kernels").get<size_t>();
    CHECK(space.at("compiled").get<size_t>() == kernels);
    CHECK(space.at("failed").empty());
    CHECK(count_files(cache, ".cubin") == kernels);

    // The heuristic's kernels are among them: a plain warm (what Op::run needs) finds all cached,
    // and needs fewer kernels than the search space.
    const json plain = warm(false);
    CHECK(plain.at("kernels").get<size_t>() < kernels);
    CHECK(plain.at("compiled").get<size_t>() == 0);
    CHECK(plain.at("already_cached") == plain.at("kernels"));
}

TEST_CASE("tileops-tune: pack writes a fleet bundle that unpack checks and copies into a cache", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    // One entry per arch, each a cheap row kernel (a few widths each).
    const fs::path db = dir.path() / "fleet.json";
    TuningDb fleet;
    for (const char* arch : {"sm_90a", "sm_80"}) {
        TuningEntry entry;
        entry.key = TuningKey{"rmsnorm", {512, 4096}, "bf16", "", arch, "unused"};
        entry.config = {{"cluster", 1}, {"items", 2}, {"rows_per_block", 1}, {"threads_per_row", 256}, {"vec", 8}};
        entry.median_us = 10.0;
        fleet.upsert(entry);
    }
    fleet.save(db);
    const fs::path bundle = dir.path() / "fleet.bundle";
    const ToolResult packed = run_tool({"pack", "--db", db.string(), "-o", bundle.string(), "--cache-dir",
                                        (dir.path() / "build-cache").string(), "--json"});
    INFO(packed.err);
    REQUIRE(packed.status == 0);
    const json pack = parse_json(packed.out);
    CHECK(pack.at("archs") == json::array({"sm_80", "sm_90a"}));
    CHECK(pack.at("databases") == 1);
    const size_t kernels = pack.at("kernels").get<size_t>();
    CHECK(kernels >= 2);

    // --list checks every checksum and writes nothing; unpack fills a cache with exactly the
    // kernels a warm of the same database wants (it then compiles none), and writes the database.
    const ToolResult listed = run_tool({"unpack", bundle.string(), "--list", "--json"});
    REQUIRE(listed.status == 0);
    CHECK(parse_json(listed.out).at("blobs").size() == kernels + 1);
    const fs::path cache = dir.path() / "fleet-cache";
    const ToolResult unpacked =
        run_tool({"unpack", bundle.string(), "--cache-dir", cache.string(), "--db-dir", (dir.path() / "dbs").string()});
    INFO(unpacked.err);
    REQUIRE(unpacked.status == 0);
    CHECK(count_files(cache, ".cubin") == kernels);
    CHECK(slurp(dir.path() / "dbs" / "fleet.json") == slurp(db));
    for (const char* arch : {"sm_90a", "sm_80"}) {
        const ToolResult warm = run_tool({"warm", "--db", db.string(), "--arch", arch, "--cache-dir", cache.string(), "--json"});
        REQUIRE(warm.status == 0);
        CHECK(parse_json(warm.out).at("compiled") == 0);
    }

    // With a workload, its problems' kernels join (the configs a fleet process would choose).
    const fs::path with_workload = dir.path() / "workload.bundle";
    const std::vector<std::string> problem = {"--op", "softmax", "--shape", "16x128256", "--dtype", "bf16"};
    std::vector<std::string> pack_args = {"pack", "--db", db.string(), "--arch", "sm_90a", "-o", with_workload.string(),
                                          "--cache-dir", (dir.path() / "build-cache").string(), "--json"};
    pack_args.insert(pack_args.end(), problem.begin(), problem.end());
    const ToolResult workload = run_tool(pack_args);
    INFO(workload.err);
    REQUIRE(workload.status == 0);
    const fs::path workload_cache = dir.path() / "workload-cache";
    REQUIRE(run_tool({"unpack", with_workload.string(), "--cache-dir", workload_cache.string()}).status == 0);
    std::vector<std::string> warm_args = {"warm", "--arch", "sm_90a", "--db", db.string(), "--cache-dir",
                                          workload_cache.string(), "--json"};
    warm_args.insert(warm_args.end(), problem.begin(), problem.end());
    const ToolResult warm_workload = run_tool(warm_args);
    REQUIRE(warm_workload.status == 0);
    CHECK(parse_json(warm_workload.out).at("compiled") == 0);

    // explain under TILEOPS_BUNDLE looks where a process serving the bundle looks: in its database
    // (whose entry, of a made-up template hash, it then finds stale), and a bad path is an error.
    const std::vector<std::string> explain_args = {"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "512x4096",
                                                   "--dtype", "bf16"};
    const ToolResult served = run_tool(explain_args, {"TILEOPS_BUNDLE=" + bundle.string()});
    INFO(served.err);
    CHECK(served.status == 0);
    CHECK_THAT(served.err, ContainsSubstring(bundle.string() + ":fleet.json: rmsnorm 512x4096"));
    CHECK(run_tool(explain_args, {"TILEOPS_BUNDLE=" + (dir.path() / "missing.bundle").string()}).status != 0);

    // A damaged bundle: unpack names the blob and fails; a database this library cannot build
    // an entry of: pack writes nothing.
    std::string bytes = slurp(bundle);
    bytes[bytes.size() - 100] ^= 0x55;
    const fs::path damaged = dir.path() / "damaged.bundle";
    std::ofstream(damaged, std::ios::binary) << bytes;
    const ToolResult refused = run_tool({"unpack", damaged.string(), "--list"});
    CHECK(refused.status == 1);
    CHECK_THAT(refused.err, ContainsSubstring("fails its checksum"));
    const fs::path bad_bundle = dir.path() / "bad.bundle";
    const ToolResult bad = run_tool({"pack", "--db", fixture("cli_fleet_a.json").string(), "-o", bad_bundle.string(),
                                     "--cache-dir", (dir.path() / "build-cache").string()});
    CHECK(bad.status == 1);
    CHECK_THAT(bad.err, ContainsSubstring("no bundle written"));
    CHECK_FALSE(fs::exists(bad_bundle));
    CHECK(run_tool({"pack", "-o", bad_bundle.string()}).status == 2);

    // A cache bound smaller than the bundle: unpack says so and fails, as warm does.
    tileops::jit::BundleContents big;
    big.archs = {"sm_90a"};
    for (char c : {'a', 'b', 'c'}) big.kernels.push_back({std::string(64, c), "sm_90a", std::string(600 << 10, c)});
    const fs::path big_bundle = dir.path() / "big.bundle";
    tileops::jit::write_bundle(big_bundle, big);
    const ToolResult bounded =
        run_tool({"unpack", big_bundle.string(), "--cache-dir", (dir.path() / "small-cache").string()}, {"TILEOPS_CACHE_MAX_MB=1"});
    CHECK(bounded.status == 1);
    CHECK_THAT(bounded.err, ContainsSubstring("not in the cache after unpacking") && ContainsSubstring("TILEOPS_CACHE_MAX_MB"));
}

TEST_CASE("tileops-tune: a warm that its cache bound evicts from fails and says how to fix it", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    // silu's and gelu_tanh's search spaces: about 130 kernels, 1.5 MB, more than a 1 MB cache holds.
    const fs::path workload = dir.path() / "two_ops.json";
    std::ofstream(workload) << R"({"name": "two", "problems": [
        {"op": "silu", "shape": [64, 4096], "dtype": "bf16"},
        {"op": "gelu_tanh", "shape": [64, 4096], "dtype": "bf16"}]})";
    const std::vector<std::string> args = {"warm",   "--arch",         "sm_90a",          "--workload",
                                           workload.string(), "--search-space", "--cache-dir",
                                           (dir.path() / "kernels").string(), "--json"};
    const ToolResult bounded = run_tool(args, {"TILEOPS_CACHE_MAX_MB=1"});
    CHECK(bounded.status == 1);
    CHECK_THAT(bounded.err, ContainsSubstring("not in the cache after the warm") && ContainsSubstring("1 MB") &&
                                ContainsSubstring("TILEOPS_CACHE_MAX_MB"));
    const json report = parse_json(bounded.out);
    CHECK(report.at("evicted").get<size_t>() > 0);
    CHECK(report.at("failed").empty());
    // Unbounded, the same warm keeps every kernel.
    const ToolResult unbounded = run_tool(args, {"TILEOPS_CACHE_MAX_MB=0"});
    INFO(unbounded.err);
    CHECK(unbounded.status == 0);
    CHECK(parse_json(unbounded.out).at("evicted") == 0);
    // A cache that cannot be written (here a file where its directory should be) is said as such,
    // not blamed on the bound.
    const fs::path not_a_dir = dir.path() / "a_file";
    std::ofstream(not_a_dir) << "x";
    std::vector<std::string> unwritable = args;
    unwritable[7] = not_a_dir.string();
    const ToolResult blocked = run_tool(unwritable, {"TILEOPS_CACHE_MAX_MB=0"});
    CHECK(blocked.status == 1);
    CHECK_THAT(blocked.err, ContainsSubstring("cannot be written") && !ContainsSubstring("raise it"));
}

TEST_CASE("tileops-tune: list and show print a database as a table and as JSON", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    const std::string db = fixture("cli_fleet_a.json").string();
    const TuningDb expected = TuningDb::load(db);
    REQUIRE(expected.entries().size() == 3);

    const ToolResult table = run_tool({"list", db});
    INFO(table.err);
    REQUIRE(table.status == 0);
    for (const char* column : {"op", "shape", "dtype", "config", "throughput"})
        CHECK_THAT(table.out, ContainsSubstring(column));
    CHECK_THAT(table.out, ContainsSubstring("512x4096"));
    CHECK_THAT(table.out, ContainsSubstring("1024x1024"));
    CHECK_THAT(table.out, ContainsSubstring("64x14336"));
    // A table this narrow has room for whole configs; the shipped databases' below cut them.
    CHECK_THAT(table.out, ContainsSubstring("cluster=1 items=2 rows_per_block=1 threads_per_row=256 vec=8"));
    CHECK_THAT(table.out, ContainsSubstring("10.50"));
    CHECK(std::count(table.out.begin(), table.out.end(), '\n') == 4);  // header + 3 entries

    const ToolResult listed = run_tool({"list", db, "--json"});
    REQUIRE(listed.status == 0);
    const json list = parse_json(listed.out);
    REQUIRE(list.is_array());
    REQUIRE(list.size() == 3);
    // Each item is the entry as the database stores it.
    for (const json& item : list) {
        TuningEntry e;
        e.key = TuningKey{item.at("op").get<std::string>(),    item.at("shape").get<std::vector<long long>>(),
                          item.at("dtype").get<std::string>(), item.at("flags").get<std::string>(),
                          item.at("arch").get<std::string>(),  item.at("template_hash").get<std::string>()};
        const TuningEntry* stored = expected.find(e.key);
        REQUIRE(stored != nullptr);
        CHECK(item.at("config") == json(stored->config));
        CHECK(item.at("median_us").get<double>() == stored->median_us);
        CHECK(item.at("device") == stored->device);
    }

    const ToolResult filtered = run_tool({"list", db, "--json", "--filter-op", "softmax"});
    REQUIRE(filtered.status == 0);
    const json only_softmax = parse_json(filtered.out);
    REQUIRE(only_softmax.size() == 1);
    CHECK(only_softmax[0].at("op") == "softmax");
    CHECK(parse_json(run_tool({"list", db, "--json", "--filter-arch", "sm_80"}).out).empty());
    CHECK(parse_json(run_tool({"list", db, "--json", "--filter-dtype", "bf16"}).out).size() == 2);
    const json one = parse_json(run_tool({"list", db, "--json", "--filter-shape", "512x4096"}).out);
    REQUIRE(one.size() == 1);
    CHECK(one[0].at("shape") == json{512, 4096});
    CHECK(parse_json(run_tool({"list", db, "--json", "--filter-shape", "512x4096", "--filter-flags", "residual"}).out)
              .size() == (one[0].at("flags") == "residual" ? 1u : 0u));

    // The shipped databases' tables stay within a terminal's width (the config column gives way,
    // its cut marked), and every entry keeps its line.
    for (const char* file : {"h100-sxm.json", "h200.json"}) {
        INFO(file);
        const fs::path path = fs::path(TILEOPS_TEST_SOURCE_DIR) / "tuning_db" / file;
        const ToolResult shipped = run_tool({"list", path.string()});
        REQUIRE(shipped.status == 0);
        std::istringstream lines(shipped.out);
        size_t widest = 0, count = 0, cut = 0;
        for (std::string line; std::getline(lines, line); ++count) {
            widest = std::max(widest, line.size());
            if (line.find("...") != std::string::npos) ++cut;
        }
        CHECK(widest <= 140);
        CHECK(count == 1 + parse_json(run_tool({"list", path.string(), "--json"}).out).size());
        CHECK(cut > 0);  // the FP8 GEMM configs are longer than the column
    }

    const ToolResult shown = run_tool({"show", db});
    INFO(shown.err);
    REQUIRE(shown.status == 0);
    CHECK_THAT(shown.out, ContainsSubstring("database " + db));
    CHECK_THAT(shown.out, ContainsSubstring("GPU Test GPU A, arch sm_90a"));
    CHECK_THAT(shown.out, ContainsSubstring("sources: fleet a"));
    CHECK_THAT(shown.out, ContainsSubstring("rmsnorm 512x4096 bf16 sm_90a"));
    CHECK_THAT(shown.out, ContainsSubstring("runner-up     11.75 us  cluster=1 items=4 rows_per_block=2 threads_per_row=128 vec=8"));
    CHECK_THAT(shown.out, ContainsSubstring("12 tried, 1 failed, 0 skipped (budget); stability 80%"));
    CHECK_THAT(shown.out, ContainsSubstring("template      fixture-hash"));

    const ToolResult shown_json = run_tool({"show", db, "--json"});
    REQUIRE(shown_json.status == 0);
    const json full = parse_json(shown_json.out);
    CHECK(full.at("format_version") == 1);
    CHECK(full.at("metadata").at("arch") == "sm_90a");
    CHECK(full.at("metadata").at("gpu_name") == "Test GPU A");
    REQUIRE(full.at("entries").size() == 3);
    // The JSON is a tuning database itself: it parses back to the fixture.
    CHECK(TuningDb::parse(shown_json.out, "show-output.json") == expected);
    const ToolResult shown_filtered = run_tool({"show", db, "--json", "--filter-op", "gelu"});
    REQUIRE(shown_filtered.status == 0);
    const json gelu_only = parse_json(shown_filtered.out);
    REQUIRE(gelu_only.at("entries").size() == 1);
    CHECK(gelu_only.at("entries")[0].at("config") == json{{"block", 256}, {"vec", 8}});
}

TEST_CASE("tileops-tune: merge -o writes the union, the faster entry per key", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string a = fixture("cli_fleet_a.json").string();
    const std::string b = fixture("cli_fleet_b.json").string();
    const fs::path out = dir.path() / "fleet.json";

    const ToolResult merged = run_tool({"merge", "-o", out.string(), a, b});
    INFO(merged.err);
    REQUIRE(merged.status == 0);
    CHECK_THAT(merged.out, ContainsSubstring("4 entries written to " + out.string()));
    const TuningDb result = TuningDb::load(out);
    CHECK(result.rejected().empty());
    REQUIRE(result.entries().size() == 4);
    const TuningDb da = TuningDb::load(a);
    const TuningDb db = TuningDb::load(b);
    const TuningKey rmsnorm{"rmsnorm", {512, 4096}, "bf16", "", "sm_90a", "fixture-hash"};
    const TuningKey softmax{"softmax", {1024, 1024}, "fp32", "", "sm_90a", "fixture-hash"};
    REQUIRE(result.find(rmsnorm) != nullptr);
    CHECK(*result.find(rmsnorm) == *db.find(rmsnorm));  // 8.25 us on GPU B beats 10.5 us
    CHECK(result.find(rmsnorm)->device == "Test GPU B");
    REQUIRE(result.find(softmax) != nullptr);
    CHECK(*result.find(softmax) == *da.find(softmax));  // 20 us on GPU A beats 25 us
    CHECK(result.find({"gelu", {64, 14336}, "bf16", "", "sm_90a", "fixture-hash"}) != nullptr);
    CHECK(result.find({"layernorm", {2048, 2048}, "bf16", "", "sm_90a", "fixture-hash"}) != nullptr);
    CHECK(result.meta().arch == "sm_90a");
    CHECK(result.meta().sources == std::vector<std::string>{"fleet a", "fleet b"});
    CHECK(result.entries() == TuningDb::merge(da, db).entries());

    // The order of the inputs does not matter.
    const fs::path reversed = dir.path() / "reversed.json";
    const ToolResult merged_ba = run_tool({"merge", "-o", reversed.string(), b, a, "--json"});
    REQUIRE(merged_ba.status == 0);
    const json summary = parse_json(merged_ba.out);
    CHECK(summary.at("entries") == 4);
    CHECK(summary.at("output") == reversed.string());
    CHECK(slurp(reversed) == slurp(out));

    // Different archs: refused (bad usage), naming both, and nothing is written.
    const fs::path mixed = dir.path() / "mixed.json";
    const ToolResult refused = run_tool({"merge", "-o", mixed.string(), a, fixture("cli_fleet_sm80.json").string()});
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, ContainsSubstring("sm_80"));
    CHECK_THAT(refused.err, ContainsSubstring("sm_90a"));
    CHECK_FALSE(fs::exists(mixed));
    // The same with a database naming no arch between them, in either order (that one once let the
    // merge through when it came first).
    const fs::path unnamed = dir.path() / "unnamed.json";
    std::ofstream(unnamed) << R"({"format_version": 1, "metadata": {"sources": ["no arch"]}, "entries": [
        {"op": "rmsnorm", "shape": [256, 4096], "dtype": "bf16", "arch": "sm_80", "template_hash": "fixture-hash",
         "config": {"cluster": 1, "items": 2, "rows_per_block": 1, "threads_per_row": 256, "vec": 8},
         "median_us": 9.0, "device": "Test GPU C"}]})";
    const std::string sm80 = fixture("cli_fleet_sm80.json").string();
    for (const auto& order : {std::vector<std::string>{a, unnamed.string(), sm80}, {a, sm80, unnamed.string()},
                              {unnamed.string(), sm80, a}}) {
        std::vector<std::string> merge_args = {"merge", "-o", mixed.string()};
        merge_args.insert(merge_args.end(), order.begin(), order.end());
        const ToolResult r = run_tool(merge_args);
        CHECK(r.status == 2);
        CHECK_THAT(r.err, ContainsSubstring("sm_80") && ContainsSubstring("sm_90a"));
        CHECK_FALSE(fs::exists(mixed));
    }

    // An existing output that is not an input is not overwritten unseen; named as an input, it is
    // merged into.
    const std::string before = slurp(out);
    const ToolResult over = run_tool({"merge", "-o", out.string(), b});
    CHECK(over.status == 2);
    CHECK_THAT(over.err, ContainsSubstring("exists and is not one of the inputs"));
    CHECK(slurp(out) == before);
    const ToolResult into = run_tool({"merge", "-o", out.string(), out.string(), b});
    INFO(into.err);
    CHECK(into.status == 0);
    CHECK(TuningDb::load(out).entries().size() == 4);
}

TEST_CASE("tileops-tune: merge writes nothing when an input holds malformed entries, unless told to", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string bad = fixture("bad_entries.json").string();
    REQUIRE_FALSE(TuningDb::load(bad).rejected().empty());
    const fs::path out = dir.path() / "merged.json";
    const ToolResult refused = run_tool({"merge", "-o", out.string(), bad});
    CHECK(refused.status == 1);
    CHECK_THAT(refused.err, ContainsSubstring("rejected " + bad + ": entries["));
    CHECK_THAT(refused.err, ContainsSubstring("nothing written"));
    CHECK_FALSE(fs::exists(out));
    const ToolResult refused_json = run_tool({"merge", "--json", "-o", out.string(), bad});
    CHECK(refused_json.status == 1);
    CHECK(parse_json(refused_json.out).at("rejected").size() == TuningDb::load(bad).rejected().size());

    const ToolResult allowed = run_tool({"merge", "--json", "--allow-rejected", "-o", out.string(), bad});
    INFO(allowed.err);
    REQUIRE(allowed.status == 0);
    const json summary = parse_json(allowed.out);
    CHECK(summary.at("rejected").size() == TuningDb::load(bad).rejected().size());
    CHECK(summary.at("entries") == TuningDb::load(bad).entries().size());
    CHECK(TuningDb::load(out).entries() == TuningDb::load(bad).entries());
    CHECK_FALSE(fs::exists(dir.path() / "merged.json.lock"));  // no lock file left beside the output
}

TEST_CASE("tileops-tune: an unknown TILEOPS_LOG_LEVEL keeps warnings on and says so", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    // The bad entries fixture makes explain warn about skipped entries.
    const std::vector<std::string> args = {"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "64x64",
                                           "--db", fixture("bad_entries.json").string()};
    const ToolResult bogus = run_tool(args, {"TILEOPS_LOG_LEVEL=loud"});
    CHECK(bogus.status == 0);
    CHECK_THAT(bogus.err, ContainsSubstring("TILEOPS_LOG_LEVEL=loud is not"));
    CHECK_THAT(bogus.err, ContainsSubstring("skipping tuning entry"));
    const ToolResult off = run_tool(args, {"TILEOPS_LOG_LEVEL=off"});
    CHECK(off.status == 0);
    CHECK_THAT(off.err, !ContainsSubstring("skipping tuning entry"));
}

TEST_CASE("tileops-tune: a hostile config is ignored by explain and reported by warm, never a crash", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    // Tunables past 2^20 are refused by the loader; within it, warps_m x warps_n far past any block
    // (it once wrapped to 0 in 32 bits, and the validator then divided by 16 x warps_m).
    const std::string hash = tileops::jit::TemplateRegistry::instance().template_hash("gemm/gemm_sm80.cuh");
    json entry = {{"op", "gemm"},        {"shape", {1, 4096, 4096}}, {"dtype", "bf16"},  {"flags", "nt"},
                  {"arch", "sm_90a"},    {"template_hash", hash},    {"median_us", 10.0},
                  {"config", {{"kernel", 0}, {"block_m", 128}, {"block_n", 128}, {"block_k", 32}, {"stages", 3},
                              {"group_m", 8}, {"vec", 8}, {"warps_m", 1 << 20}, {"warps_n", 1 << 20}}}};
    json unknown = entry;
    unknown["op"] = "nosuchop";
    const fs::path db_path = dir.path() / "hostile.json";
    {
        std::ofstream(db_path) << json({{"format_version", 1}, {"entries", {entry, unknown}}}).dump();
    }
    REQUIRE(TuningDb::load(db_path).entries().size() == 2);

    const ToolResult explained =
        run_tool({"explain", "--arch", "sm_90a", "--op", "gemm", "--shape", "1x4096x4096", "--flags", "nt", "--db",
                  db_path.string()});
    INFO(explained.err);
    CHECK(explained.status == 0);
    CHECK_THAT(explained.err, ContainsSubstring("ignored: " + db_path.string()));
    CHECK_THAT(explained.err, ContainsSubstring("35184372088832 threads exceed"));  // 2^20 x 2^20 x 32, not wrapped
    CHECK_THAT(explained.out, ContainsSubstring("on sm_90a"));

    const ToolResult warmed =
        run_tool({"warm", "--arch", "sm_90a", "--db", db_path.string(), "--cache-dir", (dir.path() / "cache").string()});
    INFO(warmed.out);
    CHECK(warmed.status == 1);
    CHECK_THAT(warmed.err, ContainsSubstring(db_path.string() + ": gemm 1x4096x4096"));
    CHECK_THAT(warmed.err, ContainsSubstring("unknown op 'nosuchop'"));
    CHECK_THAT(warmed.out, ContainsSubstring("2 failed"));
}

TEST_CASE("tileops-tune: merge --drop-stale leaves out entries of other template versions", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    // Fleet A's entries carry a made-up template hash: no version of this library would use them.
    // A fresh entry with the current rmsnorm template hash is the one that survives.
    TuningEntry fresh;
    fresh.key = TuningKey{"rmsnorm", {512, 4096}, "bf16", "", "sm_90a",
                          tileops::jit::TemplateRegistry::instance().template_hash("rows/rmsnorm.cuh")};
    fresh.config = {{"cluster", 1}, {"items", 2}, {"rows_per_block", 1}, {"threads_per_row", 256}, {"vec", 8}};
    fresh.median_us = 12.0;  // slower than fleet A's stale 10.5 us: being current wins, not speed
    fresh.device = "Test GPU";
    fresh.tuned_at = "2026-11-24T00:00:00Z";
    TuningDb fresh_db;
    fresh_db.meta().arch = "sm_90a";
    fresh_db.upsert(fresh);
    const fs::path fresh_path = dir.path() / "fresh.json";
    fresh_db.save(fresh_path);

    const fs::path out = dir.path() / "shipped.json";
    const ToolResult merged =
        run_tool({"merge", "--drop-stale", "-o", out.string(), fixture("cli_fleet_a.json").string(), fresh_path.string()});
    INFO(merged.err);
    REQUIRE(merged.status == 0);
    CHECK_THAT(merged.out, ContainsSubstring("1 entries written to " + out.string() + " (3 stale dropped)"));
    CHECK_THAT(merged.err, ContainsSubstring("dropped softmax 1024x1024 fp32 sm_90a: tuned with another version"));
    const TuningDb result = TuningDb::load(out);
    REQUIRE(result.entries().size() == 1);
    CHECK(result.entries().front() == fresh);

    // --json lists what was dropped and why; without --drop-stale nothing is.
    const ToolResult as_json = run_tool({"merge", "--drop-stale", "--json", "-o", (dir.path() / "as_json.json").string(),
                                         fixture("cli_fleet_a.json").string(), fresh_path.string()});
    REQUIRE(as_json.status == 0);
    const json summary = parse_json(as_json.out);
    CHECK(summary.at("entries") == 1);
    REQUIRE(summary.at("dropped").size() == 3);
    CHECK(summary.at("dropped")[0].at("why").get<std::string>().find("another version") != std::string::npos);
    const ToolResult kept_all = run_tool({"merge", "--json", "-o", (dir.path() / "all.json").string(),
                                          fixture("cli_fleet_a.json").string(), fresh_path.string()});
    REQUIRE(kept_all.status == 0);
    CHECK(parse_json(kept_all.out).at("entries") == 4);  // both rmsnorm entries: their keys differ by hash
    CHECK(parse_json(kept_all.out).at("dropped").empty());
}

TEST_CASE("tileops-tune: explain --gpu takes that GPU's fleet database first, else says whose it used", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    // The shipped database tuning_db/h100-sxm.json holds this problem, tuned on an H100; an H800
    // has no database of its own and takes it as another GPU's.
    auto explain = [](const std::vector<std::string>& gpu) {
        std::vector<std::string> args = {"--arch", "sm_90a", "--op", "add", "--shape", "1x16777216", "--dtype", "bf16"};
        args.insert(args.end(), gpu.begin(), gpu.end());
        return explain_one(args);
    };
    const json h800 = explain({"--gpu", "NVIDIA H800"});
    CHECK(h800.at("gpu") == "NVIDIA H800");
    CHECK(h800.at("source") == "another GPU's shipped database");
    CHECK_THAT(h800.at("origin").get<std::string>(), ContainsSubstring("h100-sxm.json"));
    CHECK_THAT(h800.at("explanation").get<std::string>(),
               ContainsSubstring("tuned on NVIDIA H100") && ContainsSubstring("no shipped database of the NVIDIA H800"));
    const json h100 = explain({"--gpu", "NVIDIA H100 80GB HBM3"});
    CHECK(h100.at("source") == "shipped database");
    CHECK(h100.at("config") == h800.at("config"));
    const json any = explain({});  // --arch without --gpu: no fleet preferred
    CHECK(any.at("gpu") == "");
    CHECK(any.at("source") == "shipped database");
}

TEST_CASE("tileops-tune: an H200 takes the H200's shipped entry where it has one, an H100 the H100's", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    // Both tuning_db/h200.json and tuning_db/h100-sxm.json hold Llama-3-8B's down projection at M = 1.
    for (const auto& [gpu, file] : {std::pair{"NVIDIA H200", "h200.json"}, std::pair{"NVIDIA H100 80GB HBM3", "h100-sxm.json"}}) {
        const json chosen = explain_one(
            {"--arch", "sm_90a", "--op", "gemm", "--shape", "1x4096x14336", "--flags", "nt", "--dtype", "bf16", "--gpu", gpu});
        INFO(chosen.dump());
        CHECK(chosen.at("source") == "shipped database");
        CHECK_THAT(chosen.at("origin").get<std::string>(), ContainsSubstring(file));
        CHECK_THAT(chosen.at("explanation").get<std::string>(), ContainsSubstring(std::string("tuned on ") + gpu));
    }
}

TEST_CASE("tileops-tune: explain says how much device memory the op allocates", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    auto explained = [](const char* op, const char* shape, const char* flags) {
        return explain_one({"--arch", "sm_90a", "--op", op, "--shape", shape, "--dtype", "bf16", "--flags", flags});
    };
    // A row op: none.
    const json rows = explained("rmsnorm", "64x4096", "residual");
    CHECK(rows.at("workspace_bytes") == 0);
    CHECK(rows.at("workspace_bytes_max") == 0);
    // A decode batch: partial results of its splits (fp32 rows of the head dim) and counters.
    const json decode = explained("decode_attention", "256x32x8x128x1x32768", "page16");
    const size_t partials = size_t{256} * 32 * 128 * 4;
    CHECK(decode.at("workspace_bytes").get<size_t>() >= partials);
    CHECK(decode.at("workspace_bytes_max") == decode.at("workspace_bytes"));
    // A GEMM with an odd K copies A's and B's rows, padded to 4096 elements, whatever the pointers;
    // with an even K only operands off 16 bytes need those copies.
    const size_t copies = size_t{4096 + 4096} * 4096 * 2;
    const json odd_k = explained("gemm", "4096x4096x4095", "nt");
    CHECK(odd_k.at("workspace_bytes") == copies);
    const json even_k = explained("gemm", "4096x4096x4096", "nt");
    CHECK(even_k.at("workspace_bytes") == 0);
    CHECK(even_k.at("workspace_bytes_max") == copies);
    const ToolResult text =
        run_tool({"explain", "--arch", "sm_90a", "--op", "gemm", "--shape", "4096x4096x4096", "--flags", "nt"});
    CHECK_THAT(text.out, ContainsSubstring("; no workspace, 67.1 MB with operands off 16 bytes)"));
    const ToolResult decode_text = run_tool({"explain", "--arch", "sm_90a", "--op", "decode_attention", "--shape",
                                             "256x32x8x128x1x32768", "--flags", "page16"});
    CHECK_THAT(decode_text.out, ContainsSubstring("; a workspace of "));
    CHECK_THAT(decode_text.out, ContainsSubstring(" MB)"));
}

TEST_CASE("tileops-tune: explain names the user database, the nearest tuned shape or the heuristic", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    // The fixture is written now: its entry must carry the current rmsnorm template hash and NVRTC.
    const std::string hash = tileops::jit::TemplateRegistry::instance().template_hash("rows/rmsnorm.cuh");
    const std::string nvrtc = tileops::jit::nvrtc_version();
    REQUIRE_FALSE(hash.empty());
    const tileops::Config tuned_config = {
        {"cluster", 1}, {"items", 2}, {"rows_per_block", 1}, {"threads_per_row", 256}, {"vec", 8}};
    TuningEntry entry;
    entry.key = TuningKey{"rmsnorm", {512, 4096}, "bf16", "", "sm_90a", hash};
    entry.config = tuned_config;
    entry.median_us = 6.5;
    entry.nvrtc_version = nvrtc;
    entry.device = "Test GPU";
    entry.tuned_at = "2026-11-22T00:00:00Z";
    TuningDb fixture_db;
    fixture_db.meta().arch = "sm_90a";
    fixture_db.meta().nvrtc_version = nvrtc;
    fixture_db.upsert(entry);
    const fs::path db_path = dir.path() / "tuned.json";
    fixture_db.save(db_path);

    auto explain = [&](const std::string& shape, const fs::path& db, const std::vector<std::string>& env = {}) {
        const json out = explain_one({"--arch", "sm_90a", "--op", "rmsnorm", "--shape", shape, "--dtype", "bf16", "--db",
                                      db.string()},
                                     env);
        CHECK(out.at("arch") == "sm_90a");
        CHECK(out.at("problem") == "rmsnorm " + shape + " bf16");
        return out;
    };

    const json exact = explain("512x4096", db_path);
    CHECK(exact.at("template_hash") == hash);  // what an entry must carry to apply
    CHECK(exact.at("source") == "user database");
    CHECK(exact.at("origin") == db_path.string());
    CHECK(exact.at("config") == json(tuned_config));

    const json near = explain("1024x4096", db_path);  // one factor of two away
    CHECK(near.at("source") == "nearest tuned shape");
    CHECK(near.at("origin") == db_path.string());
    CHECK(near.at("config") == json(tuned_config));
    CHECK_THAT(near.at("distance").get<double>(), WithinAbs(1.0, 1e-9));
    CHECK_THAT(near.at("explanation").get<std::string>(), ContainsSubstring("rmsnorm 512x4096 bf16 sm_90a"));

    const json far = explain("8x128", db_path);
    CHECK(far.at("source") == "heuristic");
    CHECK(far.at("origin") == "");
    CHECK(far.at("config") != json(tuned_config));

    // The text form, and an entry tuned with another template: ignored and reported.
    const ToolResult text = run_tool({"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "512x4096", "--dtype",
                                      "bf16", "--db", db_path.string()});
    CHECK(text.status == 0);
    CHECK_THAT(text.out, ContainsSubstring("rmsnorm 512x4096 bf16 on sm_90a:"));
    CHECK_THAT(text.out, ContainsSubstring("from user database " + db_path.string()));
    CHECK_THAT(text.out, ContainsSubstring("(template hash " + hash.substr(0, 12) + ")"));

    TuningEntry stale = entry;
    stale.key.template_hash = std::string(64, '0');
    TuningDb only_stale;
    only_stale.meta() = fixture_db.meta();
    only_stale.upsert(stale);
    const fs::path stale_path = dir.path() / "stale.json";
    only_stale.save(stale_path);
    // The stale entry's spdlog warning would land on stdout, inside the JSON (tileops-tune leaves
    // spdlog's default stdout logger in place): keep warnings out of this JSON run.
    const json from_stale = explain("512x4096", stale_path, {"TILEOPS_LOG_LEVEL=error"});
    CHECK(from_stale.at("source") == "heuristic");
    const ToolResult stale_text = run_tool({"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "512x4096",
                                            "--dtype", "bf16", "--db", stale_path.string()});
    CHECK(stale_text.status == 0);
    CHECK_THAT(stale_text.out, ContainsSubstring("from heuristic"));
    CHECK_THAT(stale_text.err, ContainsSubstring("ignored: " + stale_path.string() +
                                                 ": rmsnorm 512x4096 bf16 sm_90a: stale: tuned with another version"));

    // A --db that does not exist is bad usage, not a silent heuristic.
    const ToolResult missing = run_tool({"explain", "--arch", "sm_90a", "--op", "rmsnorm", "--shape", "512x4096", "--db",
                                         (dir.path() / "nope.json").string()});
    CHECK(missing.status == 2);
    CHECK_THAT(missing.err, ContainsSubstring("nope.json: no such file"));
}

TEST_CASE("tileops-tune: every workload file the project ships names problems the library accepts", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    // The example workloads, the benchmarks' tuning workloads and the GPU tests' cache warm-up: a
    // typo or a problem the ops refuse would otherwise show only on a GPU machine, mid-call.
    const fs::path root = TILEOPS_TEST_SOURCE_DIR;
    std::vector<fs::path> workloads = {root / "tests" / "data" / "gpu_tests_warm.json"};
    for (const auto& file : fs::recursive_directory_iterator(root / "tools" / "workloads"))
        if (file.path().extension() == ".json") workloads.push_back(file.path());
    REQUIRE(workloads.size() >= 5);
    for (const fs::path& workload : workloads) {
        INFO(workload.string());
        const ToolResult r = run_tool({"explain", "--arch", "sm_90a", "--workload", workload.string()});
        CHECK(r.status == 0);
        CHECK_THAT(r.err, !ContainsSubstring("error"));
        CHECK_THAT(r.out, ContainsSubstring("on sm_90a"));
    }
}

TEST_CASE("tileops-tune: --workload is repeatable; a problem in several workloads counts once", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const fs::path a = dir.path() / "a.json", b = dir.path() / "b.json";
    std::ofstream(a) << R"({"problems": [{"op": "rmsnorm", "shape": [64, 4096], "dtype": "bf16"},
                                         {"op": "softmax", "shape": [8, 50257], "dtype": "fp32"}]})";
    std::ofstream(b) << R"({"problems": [{"op": "softmax", "shape": [8, 50257], "dtype": "fp32"},
                                         {"op": "silu", "shape": [1, 4096], "dtype": "bf16"}]})";
    const ToolResult r = run_tool({"explain", "--arch", "sm_90a", "--workload", a.string(), "--workload", b.string(), "--json"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const json out = parse_json(r.out);
    REQUIRE(out.size() == 3);
    CHECK(out[0].at("problem") == "rmsnorm 64x4096 bf16");
    CHECK(out[1].at("problem") == "softmax 8x50257 fp32");
    CHECK(out[2].at("problem") == "silu 1x4096 bf16");
    const ToolResult missing =
        run_tool({"explain", "--arch", "sm_90a", "--workload", a.string(), "--workload", (dir.path() / "none.json").string()});
    CHECK(missing.status == 2);
    CHECK_THAT(missing.err, ContainsSubstring("none.json"));
}

TEST_CASE("tileops-tune: a workload's shapes must be exact integers >= 1", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"[16384.9, 4096]", "shape extent 16384.9"}, {"[true, 4096]", "shape extent true"},
        {"[1e30, 4096]", "shape extent 1e+30"},     {"[0, 4096]", "shape extent 0"},
        {"[-5, 4096]", "shape extent -5"},           {"[18446744073709551615, 2]", "shape extent 18446744073709551615"},
        {"\"8192x4096\"", "must be a list of integers"}, {"[]", "must be a list of integers"},
    };
    for (const auto& [shape, message] : cases) {
        INFO(shape);
        const fs::path workload = dir.path() / "workload.json";
        std::ofstream(workload) << R"({"problems": [{"op": "rmsnorm", "shape": )" << shape << R"(, "dtype": "bf16"}]})";
        const ToolResult r = run_tool({"explain", "--arch", "sm_90a", "--workload", workload.string()});
        CHECK(r.status != 0);
        CHECK_THAT(r.err, ContainsSubstring("problems[0]") && ContainsSubstring(message));
    }
    const fs::path with_nul = dir.path() / "nul.json";
    std::ofstream(with_nul, std::ios::binary) << std::string("{\"problems\": []}") + '\0' + "junk";
    const ToolResult nul = run_tool({"explain", "--arch", "sm_90a", "--workload", with_nul.string()});
    CHECK(nul.status != 0);
    CHECK_THAT(nul.err, ContainsSubstring("NUL byte"));
}

TEST_CASE("tileops-tune: a hostile workload is refused naming the file and the problem, never a crash", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    // Nested 200000 deep: copying or dumping such a value recursed once per level (a crash with
    // SIGSEGV); an op's own refusal did not say which file or problem it came from.
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    const std::vector<std::pair<std::string, std::string>> cases = {
        {deep, "problems[0] has no \"op\""},
        {R"({"problems": )" + deep + "}", "problems[0] has no \"op\""},
        {R"({"problems": [{"op": "rmsnorm", "shape": [)" + deep + R"(], "dtype": "bf16"}]})",
         "problems[0]: shape extent a JSON array is not an integer >= 1"},
        {R"({"problems": [{"op": "rmsnorm", "shape": {"a": )" + deep + R"(}, "dtype": "bf16"}]})",
         "problems[0]: \"shape\" must be a list of integers, got a JSON object"},
        {R"({"problems": [{"op": "rmsnorm", "shape": [1, 4096], "dtype": "bf16"},
                          {"op": "frobnorm", "shape": [1, 4096], "dtype": "bf16"}]})",
         "problems[1] (frobnorm 1x4096 bf16): tileops: unknown op 'frobnorm'"},
        {R"({"problems": [{"op": "rmsnorm", "shape": [9223372036854775807, 9223372036854775807], "dtype": "bf16"}]})",
         "problems[0] (rmsnorm 9223372036854775807x9223372036854775807 bf16): tileops::RmsNorm: rows x cols"},
        // A number past a double was an error naming no file; a repeated key kept only the last
        // list or field; an empty list was "give a problem with --op/--shape or --workload".
        {R"({"problems": [{"op": "rmsnorm", "shape": [1e400, 4096], "dtype": "bf16"}]})",
         "is not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'"},
        {R"({"problems": [{"op": "rmsnorm", "shape": [1, 4096], "dtype": "bf16"}], "problems": []})",
         "the key \"problems\" appears twice in one object"},
        {R"({"problems": [{"op": "rmsnorm", "op": "softmax", "shape": [1, 4096], "dtype": "bf16"}]})",
         "the key \"op\" appears twice in one object"},
        {R"({"problems": []})", "\"problems\" lists no problem"},
        {R"({"problems": [{"op": "\u001b[2Jrmsnorm", "shape": [1, 4096], "dtype": "bf16"}]})",
         "problems[0]: \"op\" \"\\x1b[2Jrmsnorm\" holds a control character"},
    };
    const fs::path workload = dir.path() / "hostile.json";
    for (const auto& [text, message] : cases) {
        INFO(message);
        std::ofstream(workload, std::ios::trunc) << text;
        const ToolResult r = run_tool({"explain", "--arch", "sm_90a", "--workload", workload.string()});
        INFO(r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, ContainsSubstring(workload.string()) && ContainsSubstring(message));
    }
}

TEST_CASE("tileops-tune: tune and verify without a GPU fail with a clear message", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    if (tileops::test::have_gpu()) SKIP("a GPU is present: tune would really run");
    TempDir dir;
    const fs::path db = dir.path() / "tuned.json";
    const ToolResult tuned = run_tool({"tune", "--op", "rmsnorm", "--shape", "64x4096", "--dtype", "bf16", "--db", db.string()});
    CHECK(tuned.status == 1);
    CHECK_THAT(tuned.err, ContainsSubstring("tileops-tune tune: "));
    const bool names_the_cause = tuned.err.find("driver") != std::string::npos ||
                                 tuned.err.find("GPU") != std::string::npos ||
                                 tuned.err.find("device") != std::string::npos;
    CHECK(names_the_cause);
    CHECK_FALSE(fs::exists(db));  // nothing was tuned, nothing written

    // Without a problem or a database, it is bad usage before any GPU is looked for.
    CHECK(run_tool({"tune", "--db", db.string()}).status == 2);
    CHECK(run_tool({"tune", "--op", "rmsnorm", "--shape", "64x4096"}).status == 2);

    const ToolResult verified = run_tool({"verify", fixture("cli_fleet_a.json").string()});
    CHECK(verified.status == 1);
    CHECK_THAT(verified.err, ContainsSubstring("tileops-tune verify: "));
}

TEST_CASE("tileops-tune: tune checks its database before it tunes anything", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    // These fail before the GPU is looked for, so they run on any machine, and a long tune never
    // ends in a database it cannot write.
    TempDir dir;
    const std::vector<std::string> problem = {"tune", "--op", "rmsnorm", "--shape", "64x4096", "--dtype", "bf16", "--db"};
    auto tune_into = [&](const std::string& db) {
        std::vector<std::string> args = problem;
        args.push_back(db);
        return run_tool(args);
    };

    const fs::path broken = dir.path() / "broken.json";
    std::ofstream(broken) << "{ \"format_version\": 1, \"entries\": [";
    const ToolResult not_json = tune_into(broken.string());
    CHECK(not_json.status == 1);
    CHECK_THAT(not_json.err, ContainsSubstring(broken.string()));
    CHECK_THAT(not_json.err, ContainsSubstring("invalid JSON"));

    // Its malformed entries would be dropped by the save: refused, as merge refuses them.
    const std::string bad = fixture("bad_entries.json").string();
    const fs::path copy = dir.path() / "bad_entries.json";
    fs::copy_file(bad, copy);
    const ToolResult malformed = tune_into(copy.string());
    CHECK(malformed.status == 2);
    CHECK_THAT(malformed.err, ContainsSubstring("malformed entries"));
    CHECK_THAT(malformed.err, ContainsSubstring("--allow-rejected"));
    CHECK(slurp(copy) == slurp(bad));  // untouched

    // A directory that cannot hold the file (a regular file stands where it should be).
    const fs::path blocker = dir.path() / "not-a-dir";
    std::ofstream(blocker) << "x";
    const ToolResult unwritable = tune_into((blocker / "tuned.json").string());
    CHECK(unwritable.status == 1);
    CHECK_THAT(unwritable.err, ContainsSubstring((blocker / "tuned.json").string()));
}

TEST_CASE("tileops-tune: tune refuses bad --devices, --candidate-timeout and --lengths before it tunes", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::vector<std::string> problem = {"tune", "--op", "rmsnorm", "--shape", "64x4096", "--dtype", "bf16",
                                              "--db", (dir.path() / "tuned.json").string()};
    auto tune_with = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> args = problem;
        args.insert(args.end(), extra.begin(), extra.end());
        return run_tool(args);
    };
    const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
        {{"--devices", "0,0"}, "named twice"},
        {{"--devices", "1,x"}, "'x' is not a GPU ordinal"},
        {{"--devices", ","}, "give GPU ordinals"},
        {{"--device", "0", "--devices", "1"}, "not both"},
        {{"--in-process", "--devices", "0,1"}, "one GPU"},
        {{"--candidate-timeout", "0"}, "--candidate-timeout"},
        {{"--candidate-timeout", "-1"}, "--candidate-timeout"},
        {{"--lengths", "sideways"}, "unknown length spread 'sideways'"},
        {{"--lengths", "one_long"}, "problem 1 (rmsnorm 64x4096 bf16) has no sequence lengths"},
    };
    for (const auto& [extra, why] : refused) {
        INFO(fmt::format("{}", fmt::join(extra, " ")));
        const ToolResult result = tune_with(extra);
        CHECK(result.status == 2);
        CHECK_THAT(result.err, ContainsSubstring(why));
    }
    // A masked grouped GEMM's counts are each expert's capacity, not a spread of rows.
    const ToolResult masked = run_tool({"tune", "--op", "gemm_grouped", "--shape", "8x16x4096x1024", "--flags", "masked",
                                        "--lengths", "ragged", "--db", (dir.path() / "tuned.json").string()});
    CHECK(masked.status == 2);
    CHECK_THAT(masked.err, ContainsSubstring("has no sequence lengths or group offsets"));
    CHECK_FALSE(fs::exists(dir.path() / "tuned.json"));
}

TEST_CASE("tileops-tune: the tuning worker refuses to start without its device and says so", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    const ToolResult result = run_tool({"tune-worker", "--device", "x"});
    CHECK(result.status == 1);
    const json first = parse_json(result.out.substr(0, result.out.find('\n')));
    CHECK_THAT(first.at("error").get<std::string>(), ContainsSubstring("--device N"));
}

TEST_CASE("tileops-tune: a candidate that writes out of bounds, traps or hangs fails alone; the tune completes",
          "[cli][gpu]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TILEOPS_REQUIRE_GPU();
    TempDir dir;
    const fs::path db = dir.path() / "tuned.json";
    // Candidates 2, 4 and 6 are replaced by faulty kernels in the worker (tune_worker.hpp).
    const ToolResult tuned = run_tool({"tune", "--op", "rmsnorm", "--shape", "256x4096", "--dtype", "bf16", "--db",
                                       db.string(), "--max-candidates", "8", "--candidate-timeout", "5", "--json"},
                                      {"TILEOPS_TUNE_TEST_FAULTS=2:oob,4:trap,6:hang"});
    INFO(tuned.err);
    REQUIRE(tuned.status == 0);
    const json out = parse_json(tuned.out);
    const json& result = out.at("results").at(0);
    REQUIRE(result.contains("entry"));
    CHECK(result.at("worker_restarts") == 3);
    const json& failed = result.at("failed");
    REQUIRE(failed.size() == 3);
    std::vector<std::string> whys;
    for (const json& f : failed) whys.push_back(f.at("why").get<std::string>());
    CHECK_THAT(whys[0], ContainsSubstring("ILLEGAL_ADDRESS") && ContainsSubstring("worker was restarted"));
    CHECK_THAT(whys[1], ContainsSubstring("LAUNCH_FAILED") && ContainsSubstring("worker was restarted"));
    CHECK_THAT(whys[2], ContainsSubstring("watchdog") && ContainsSubstring("5 s"));
    CHECK(result.at("timed").size() == 5);  // candidates 0, 1, 3, 5 and 7 ran after the restarts
    for (const json& f : failed) CHECK(f.at("config") != result.at("entry").at("config"));

    // What it measured is saved, and the database loads.
    const TuningDb saved = TuningDb::load(db.string());
    CHECK(saved.entries().size() == 1);
    CHECK(saved.rejected().empty());

    // In this process, without a worker, the same problem tunes when no candidate faults.
    const ToolResult in_process = run_tool({"tune", "--op", "rmsnorm", "--shape", "256x4096", "--dtype", "bf16",
                                            "--db", db.string(), "--max-candidates", "4", "--in-process", "--json"});
    INFO(in_process.err);
    CHECK(in_process.status == 0);
    const json again = parse_json(in_process.out).at("results").at(0);
    CHECK(again.contains("entry"));
    // The first tune's entry is what the runtime ran the problem with: timed again whatever the
    // candidate limit, and reported.
    REQUIRE(again.contains("runtime_config_before"));
    CHECK(again.at("runtime_config_before").at("source") == "user database");
    CHECK(again.at("runtime_config_before").at("config") == result.at("entry").at("config"));
    CHECK(again.at("runtime_config_before").contains("median_us"));

    // A tune resumed with --skip-tuned leaves out what the database already holds, wherever it
    // stands in the workload (an untuned first problem once came out with its op name emptied).
    const fs::path workload = dir.path() / "two.json";
    std::ofstream(workload) << R"({"problems": [{"op": "rmsnorm", "shape": [128, 4096], "dtype": "bf16"},
                                                {"op": "rmsnorm", "shape": [256, 4096], "dtype": "bf16"}]})";
    const ToolResult resumed = run_tool({"tune", "--workload", workload.string(), "--db", db.string(), "--max-candidates",
                                         "4", "--skip-tuned", "--json"});
    INFO(resumed.err);
    CHECK(resumed.status == 0);
    CHECK_THAT(resumed.err, ContainsSubstring("1 of 2 problem(s) already tuned"));
    const json resumed_out = parse_json(resumed.out);
    REQUIRE(resumed_out.at("results").size() == 1);
    CHECK(resumed_out.at("results").at(0).at("problem") == "rmsnorm 128x4096 bf16");
    CHECK(TuningDb::load(db.string()).entries().size() == 2);
    const ToolResult nothing_left = run_tool({"tune", "--workload", workload.string(), "--db", db.string(), "--skip-tuned"});
    CHECK(nothing_left.status == 0);
    CHECK_THAT(nothing_left.err, ContainsSubstring("2 of 2 problem(s) already tuned"));
}

TEST_CASE("tileops-tune: tune --lengths times a decode batch on spread lengths", "[cli][gpu]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TILEOPS_REQUIRE_GPU();
    TempDir dir;
    // The same batch timed with every sequence at the longest, then as chat turns beside one long
    // document (about 9% of the keys): less time, and throughput counted over the keys held.
    auto tuned = [&](const std::string& lengths) {
        const fs::path db = dir.path() / (lengths + ".json");
        const ToolResult r = run_tool({"tune", "--op", "decode_attention", "--shape", "64x8x2x64x1x2048", "--dtype",
                                       "bf16", "--db", db.string(), "--max-candidates", "2", "--lengths", lengths,
                                       "--json"});
        INFO(r.err);
        REQUIRE(r.status == 0);
        const json entry = parse_json(r.out).at("results").at(0).at("entry");
        const std::string source = TuningDb::load(db.string()).meta().sources.at(0);
        if (lengths == "uniform") CHECK_THAT(source, !ContainsSubstring("lengths"));
        else CHECK_THAT(source, ContainsSubstring("lengths " + lengths));
        return std::pair{entry.at("median_us").get<double>(), entry.at("throughput").get<double>()};
    };
    const auto [uniform_us, uniform_gbps] = tuned("uniform");
    const auto [chat_us, chat_gbps] = tuned("one_long");
    CHECK(chat_us < uniform_us);
    const double uniform_bytes = uniform_us * uniform_gbps, chat_bytes = chat_us * chat_gbps;
    CHECK(chat_bytes < 0.3 * uniform_bytes);
}

TEST_CASE("tileops-tune: an extra argument or an option given twice is bad usage, never ignored", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string a = fixture("cli_fleet_a.json").string(), b = fixture("cli_fleet_b.json").string();
    const std::string out = (dir.path() / "out.json").string(), out2 = (dir.path() / "out2.json").string();
    const std::string missing = (dir.path() / "nonexistent.json").string();
    const std::vector<std::string> problem = {"--op", "rmsnorm", "--shape", "64x4096", "--dtype", "bf16"};
    auto with_problem = [&](std::vector<std::string> args, const std::vector<std::string>& after = {}) {
        args.insert(args.end(), problem.begin(), problem.end());
        args.insert(args.end(), after.begin(), after.end());
        return args;
    };
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    const std::vector<Case> cases = {
        {{"rekey", a, missing, "-o", out}, "unexpected argument '" + missing + "'"},
        {{"show", a, b}, "unexpected argument '" + b + "'"},
        {{"list", a, "extra.json"}, "unexpected argument 'extra.json'"},
        {{"list", a, "x", "y"}, "unexpected arguments 'x' 'y'"},
        {with_problem({"explain", "--arch", "sm_90a"}, {"stray"}), "unexpected argument 'stray'"},
        {{"verify", a, b}, "unexpected argument"},
        {{"cache", "size", "list", "--cache-dir", (dir.path() / "kernels").string()}, "unexpected argument 'list'"},
        {{"merge", "-o", out, "-o", out2, a}, "-o/--output given twice"},
        {{"merge", "--output", out, "-o", out2, a, b}, "-o/--output given twice"},
        {{"rekey", a, "-o", out, "-o", out2}, "given twice"},
        {with_problem({"explain", "--arch", "sm_90a", "--arch", "sm_80"}), "--arch given twice"},
        {with_problem({"warm", "--arch", "sm_90a", "--arch", "sm_90a", "--cache-dir", (dir.path() / "k").string()}),
         "--arch given twice"},
        {with_problem({"explain", "--arch", "sm_90a"}, {"--op", "softmax"}), "--op given twice"},
        {{"list", a, "--json", "--json"}, "--json given twice"},
        {{"list", a, "--filter-op", "rmsnorm", "--filter-op", "softmax"}, "--filter-op given twice"},
        {{"list", "--db", a, b}, "unexpected argument"},
    };
    for (const Case& c : cases) {
        const ToolResult r = run_tool(c.args);
        INFO(fmt::format("{}: {}", fmt::join(c.args, " "), r.err));
        CHECK(r.status == 2);
        CHECK_THAT(r.err, ContainsSubstring(c.says));
        CHECK(r.out.empty());
    }
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(out2));

    // Repeatable options stay repeatable: --db twice, several merge inputs.
    const ToolResult two_dbs = run_tool(with_problem({"explain", "--arch", "sm_90a", "--db", a, "--db", b}));
    INFO(two_dbs.err);
    CHECK(two_dbs.status == 0);
    const ToolResult merged = run_tool({"merge", "-o", out, a, b});
    INFO(merged.err);
    CHECK(merged.status == 0);
}

TEST_CASE("tileops-tune: an --arch NVRTC cannot compile for is bad usage in every command", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const std::string cache = (dir.path() / "kernels").string();
    const std::vector<std::string> problem = {"--op", "rmsnorm", "--shape", "64x4096", "--dtype", "bf16"};
    for (const char* arch : {"sm_99", "sm_42", "sm_1", "gfx90a"}) {
        for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
                 {"warm", "--arch", arch, "--cache-dir", cache},
                 {"explain", "--arch", arch},
                 {"pack", "--db", fixture("cli_fleet_a.json").string(), "--arch", arch, "-o",
                  (dir.path() / "x.bundle").string(), "--cache-dir", cache}}) {
            args.insert(args.end(), problem.begin(), problem.end());
            const ToolResult r = run_tool(args);
            INFO(fmt::format("{}: {}", fmt::join(args, " "), r.err));
            CHECK(r.status == 2);
            CHECK_THAT(r.err, ContainsSubstring(arch));
        }
    }
    CHECK(count_files(cache, ".cubin") == 0);
    CHECK_FALSE(fs::exists(dir.path() / "x.bundle"));
}

TEST_CASE("tileops-tune: warm of an empty manifest succeeds and says there was nothing to compile", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    TempDir dir;
    const fs::path manifest = dir.path() / "missed-kernels.jsonl";
    std::ofstream(manifest).flush();
    const std::string cache = (dir.path() / "kernels").string();
    const ToolResult text = run_tool({"warm", "--arch", "sm_90a", "--manifest", manifest.string(), "--cache-dir", cache});
    INFO(text.err);
    CHECK(text.status == 0);
    CHECK_THAT(text.out, ContainsSubstring("nothing to compile for sm_90a: the manifest lists no kernels"));
    const ToolResult as_json =
        run_tool({"warm", "--arch", "sm_90a", "--manifest", manifest.string(), "--cache-dir", cache, "--json"});
    CHECK(as_json.status == 0);
    const json report = parse_json(as_json.out);
    CHECK(report.at("kernels") == 0);
    CHECK(report.at("failed").empty());
    CHECK(count_files(cache, ".cubin") == 0);
    // A manifest of another arch's kernels is still a wrong --arch, said as such.
    std::ofstream(manifest) << R"({"template": "elementwise/elementwise.cuh", "kernel": )"
                            << R"("tileops::elementwise_kernel<float, float, 2, 4, 1, 256>", "arch": "sm_80"})" << "\n";
    const ToolResult other = run_tool({"warm", "--arch", "sm_90a", "--manifest", manifest.string(), "--cache-dir", cache});
    CHECK(other.status == 2);
    CHECK_THAT(other.err, ContainsSubstring("every manifest kernel is of another arch"));
}

TEST_CASE("tileops-tune: --version honours --json; errors carry the program's name once", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    for (const char* spelling : {"--version", "version"}) {
        const ToolResult r = run_tool({spelling, "--json"});
        INFO(r.err);
        CHECK(r.status == 0);
        const json version = parse_json(r.out);
        CHECK(version.at("version") == TILEOPS_VERSION_STRING);
        CHECK(version.at("nvrtc_version") == tileops::jit::nvrtc_version());
    }
    const ToolResult extra = run_tool({"--version", "extra"});
    CHECK(extra.status == 2);
    CHECK_THAT(extra.err, ContainsSubstring("unexpected argument 'extra'"));

    if (tileops::test::have_gpu()) SKIP("a GPU is present: --devices all would tune");
    TempDir dir;
    const ToolResult all = run_tool({"tune", "--devices", "all", "--op", "rmsnorm", "--shape", "64x4096", "--dtype",
                                     "bf16", "--db", (dir.path() / "tuned.json").string()});
    CHECK(all.status != 0);
    CHECK_THAT(all.err, ContainsSubstring("tileops-tune tune: --devices all: no GPU is visible"));
    CHECK_THAT(all.err, !ContainsSubstring("tileops-tune: tileops-tune"));
    CHECK_THAT(all.err, !ContainsSubstring("tune: tileops-tune:"));
}

TEST_CASE("tileops-tune: a program moved out of the build tree reads only its own prefix's databases", "[cli]") {
    TILEOPS_REQUIRE_TUNE_EXE();
    // An install of the program alone: <prefix>/bin/tileops-tune with a database of its own in
    // <prefix>/share/tileops_jit/tuning_db that no other tree holds.
    TempDir prefix;
    const fs::path program = prefix.path() / "bin" / "tileops-tune";
    fs::create_directories(program.parent_path());
    std::error_code ec;
    fs::create_hard_link(TILEOPS_TUNE_EXE, program, ec);  // /proc/self/exe names the link used
    if (ec) fs::copy_file(TILEOPS_TUNE_EXE, program);
    const fs::path db_dir = prefix.path() / "share" / "tileops_jit" / "tuning_db";
    fs::create_directories(db_dir);

    const std::string hash = tileops::jit::TemplateRegistry::instance().template_hash("rows/rmsnorm.cuh");
    const tileops::Config marker_config = {
        {"cluster", 1}, {"items", 2}, {"rows_per_block", 1}, {"threads_per_row", 256}, {"vec", 8}};
    TuningEntry entry;
    entry.key = TuningKey{"rmsnorm", {512, 4096}, "bf16", "", "sm_90a", hash};
    entry.config = marker_config;
    entry.median_us = 6.5;
    entry.nvrtc_version = tileops::jit::nvrtc_version();
    entry.device = "Marker GPU";
    entry.tuned_at = "2026-11-22T00:00:00Z";
    TuningDb marker;
    marker.meta().arch = "sm_90a";
    marker.meta().gpu_name = "Marker GPU";
    marker.meta().nvrtc_version = entry.nvrtc_version;
    marker.upsert(entry);
    marker.save(db_dir / "marker.json");

    const std::string source = fs::weakly_canonical(TILEOPS_TEST_SOURCE_DIR).string();
    auto explain = [&](const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
        std::vector<std::string> full = {"explain", "--arch", "sm_90a", "--dtype", "bf16", "--json"};
        full.insert(full.end(), args.begin(), args.end());
        return run_program(program.string(), full, env);
    };
    auto origin_of = [&](const ToolResult& r) {
        INFO(r.err);
        REQUIRE(r.status == 0);
        const json out = parse_json(r.out);
        REQUIRE(out.size() == 1);
        return out[0];
    };

    const json own = origin_of(explain({"--op", "rmsnorm", "--shape", "512x4096"}));
    CHECK(own.at("source") == "shipped database");
    CHECK(own.at("origin") == (db_dir / "marker.json").string());
    CHECK(own.at("config") == json(marker_config));
    // A problem the source tree's databases hold (tuning_db/h200.json) and this prefix's does not:
    // not taken from the source tree.
    const std::vector<std::string> gemm = {"--op", "gemm", "--shape", "1x4096x14336", "--flags", "nt", "--gpu", "NVIDIA H200"};
    const json not_here = origin_of(explain(gemm));
    CHECK(not_here.at("source") != "shipped database");
    CHECK(not_here.at("source") != "another GPU's shipped database");
    CHECK_THAT(not_here.at("origin").get<std::string>(), !ContainsSubstring(source));

    // A prefix without databases falls back to the configured install prefix only: the warning
    // names where it looked, and the source tree is not among them.
    fs::remove_all(prefix.path() / "share");
    const ToolResult bare = explain({"--op", "rmsnorm", "--shape", "512x4096"});
    const json none = origin_of(bare);
    CHECK_THAT(none.at("origin").get<std::string>(), !ContainsSubstring(source));
    CHECK_THAT(bare.err, !ContainsSubstring(source + "/tuning_db"));
    if (bare.err.find("no shipped tuning databases found") != std::string::npos)
        CHECK_THAT(bare.err, ContainsSubstring((prefix.path() / "share" / "tileops_jit" / "tuning_db").string()));

    // TILEOPS_SHIPPED_DB_DIR names the directory instead, with the usual choice of fleet.
    TempDir other;
    marker.save(other.path() / "fleet.json");
    const json named = origin_of(explain({"--op", "rmsnorm", "--shape", "512x4096"},
                                         {"TILEOPS_SHIPPED_DB_DIR=" + other.path().string()}));
    CHECK(named.at("source") == "shipped database");
    CHECK(named.at("origin") == (other.path() / "fleet.json").string());
    const json other_fleet = origin_of(explain({"--op", "rmsnorm", "--shape", "512x4096", "--gpu", "NVIDIA H200"},
                                               {"TILEOPS_SHIPPED_DB_DIR=" + other.path().string()}));
    CHECK(other_fleet.at("source") == "another GPU's shipped database");
    // One that is not a directory is refused by name, not passed over.
    const ToolResult wrong = explain({"--op", "rmsnorm", "--shape", "512x4096"},
                                     {"TILEOPS_SHIPPED_DB_DIR=" + (other.path() / "fleet.json").string()});
    CHECK(wrong.status == 2);
    CHECK_THAT(wrong.err, ContainsSubstring("TILEOPS_SHIPPED_DB_DIR=") && ContainsSubstring("is not a directory"));
    // One that holds no databases (the directory above them, say) is warned about.
    TempDir empty;
    const ToolResult hollow = explain({"--op", "rmsnorm", "--shape", "512x4096"},
                                      {"TILEOPS_SHIPPED_DB_DIR=" + empty.path().string()});
    CHECK(hollow.status == 0);
    CHECK_THAT(hollow.err, ContainsSubstring("holds no databases") && ContainsSubstring(empty.path().string()));
}
