#include "tileops_tune/command_runner.hpp"

#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/error.hpp"

namespace tileops::cli {
namespace {

// What the parser let through that is still bad usage: arguments no option or positional took
// (a second database to a command that reads one, a stray word), and an option that takes one
// value, or a flag, given more than once (the parser would keep the last and drop the others).
std::optional<std::string> usage_problem(const cxxopts::Options& options, const cxxopts::ParseResult& args) {
    if (!args.unmatched().empty()) {
        std::vector<std::string> quoted;
        for (const std::string& word : args.unmatched()) quoted.push_back("'" + word + "'");
        return fmt::format("unexpected argument{} {}", quoted.size() == 1 ? "" : "s", fmt::join(quoted, " "));
    }
    for (const std::string& group : options.groups()) {
        for (const cxxopts::HelpOptionDetails& option : options.group_help(group).options) {
            if (option.is_container) continue;  // repeatable (--db, --workload, ...)
            const std::string name = option.l.empty() ? option.s : option.l.front();
            if (name.empty()) continue;
            const size_t count = args.count(name);
            if (count <= 1) continue;
            std::string spelled = name.size() == 1 ? "-" + name : "--" + name;
            if (!option.s.empty() && option.s != name) spelled = "-" + option.s + "/" + spelled;
            return fmt::format("{} given {}: give it once", spelled,
                               count == 2 ? std::string("twice") : fmt::format("{} times", count));
        }
    }
    return std::nullopt;
}

// An error's message without a leading "tileops-tune: " (the command's name comes first already).
std::string message_of(const std::exception& e) {
    std::string text = e.what();
    const std::string own = "tileops-tune: ";
    if (text.rfind(own, 0) == 0) text.erase(0, own.size());
    return text;
}

}  // namespace

int run_command(const std::string& name, const std::string& description, int argc, char** argv,
                const std::function<void(cxxopts::Options&)>& add_options,
                const std::function<int(const cxxopts::ParseResult&)>& body) {
    cxxopts::Options options("tileops-tune " + name, description);
    options.add_options()("h,help", "show this help")("json", "machine-readable JSON on stdout");
    add_options(options);
    cxxopts::ParseResult args;
    try {
        args = options.parse(argc, argv);
    } catch (const cxxopts::exceptions::exception& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n{}", name, e.what(), options.help());
        return 2;
    }
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return 0;
    }
    if (const std::optional<std::string> problem = usage_problem(options, args)) {
        fmt::print(stderr, "tileops-tune {}: {} (`tileops-tune {} --help` lists the options)\n", name, *problem, name);
        return 2;
    }
    try {
        return body(args);
    } catch (const InvalidArgument& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n", name, message_of(e));
        return 2;
    } catch (const cxxopts::exceptions::exception& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n", name, message_of(e));
        return 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n", name, message_of(e));
        return 1;
    }
}

}  // namespace tileops::cli
