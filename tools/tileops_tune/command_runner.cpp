#include "tileops_tune/command_runner.hpp"

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops::cli {

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
    try {
        return body(args);
    } catch (const InvalidArgument& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n", name, e.what());
        return 2;
    } catch (const cxxopts::exceptions::exception& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n", name, e.what());
        return 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "tileops-tune {}: {}\n", name, e.what());
        return 1;
    }
}

}  // namespace tileops::cli
