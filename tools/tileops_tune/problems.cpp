#include "tileops_tune/problems.hpp"

#include <climits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tileops/error.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "util/file_util.hpp"
#include "util/json_keys.hpp"

namespace tileops::cli {

namespace {

// "rmsnorm: rows x cols [residual]; ..." for every op of the registry.
std::string op_help(bool flags) {
    std::vector<std::string> lines;
    for (const detail::OpFamily& family : detail::op_families())
        for (const detail::OpKind& kind : family.ops) {
            if (flags && kind.flags.empty()) continue;
            lines.push_back(fmt::format("{}: {}", kind.name, flags ? kind.flags : kind.shape));
        }
    return fmt::format("{}", fmt::join(lines, "; "));
}

// A value of a workload file in an error message: a scalar as written, a list or an object by its
// type (dumping one recurses through its nesting, and a hostile file nests without end).
std::string shown(const nlohmann::json& value) {
    if (value.is_structured()) return fmt::format("a JSON {}", value.type_name());
    const std::string text = value.dump();
    return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

}  // namespace

void add_problem_options(cxxopts::Options& options) {
    options.add_options("problem")
        ("op", "operation: " + fmt::format("{}", fmt::join(detail::known_ops(), ", ")), cxxopts::value<std::string>())
        ("shape", "problem shape, e.g. 8192x4096; per op: " + op_help(false), cxxopts::value<std::string>())
        ("dtype", "fp32, fp16, bf16, or in->out such as bf16->fp32", cxxopts::value<std::string>()->default_value("bf16"))
        ("flags", "op options, comma-separated: " + op_help(true), cxxopts::value<std::string>()->default_value(""))
        ("workload", "JSON workload file with a list of problems (repeatable: their problems in order, each once)",
         cxxopts::value<std::vector<std::string>>());
}

std::vector<detail::ProblemSpec> load_workload(const std::string& path) {
    std::string why;
    auto text = util::read_file(path, util::kMaxReadBytes, &why);
    if (!text) throw FileError(fmt::format("tileops-tune: cannot read workload file {}: {}", path, why));
    if (text->find('\0') != std::string::npos)  // the JSON parser would stop there, ignoring the rest
        throw FileError(fmt::format("tileops-tune: {} is not valid JSON: a NUL byte", path));
    const util::JsonScan scan = util::scan_json(*text);
    if (scan.values > util::kMaxJsonValues)
        throw FileError(fmt::format("tileops-tune: {}: more than {} JSON values", path, util::kMaxJsonValues));
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& e) {  // a parse_error, or out_of_range for a number like 1e400
        throw FileError(fmt::format("tileops-tune: {} is not valid JSON: {}", path, e.what()));
    }
    if (!scan.repeated.empty())
        throw FileError(fmt::format("tileops-tune: {}: the key {:?} appears twice in one object (JSON would keep only "
                                    "the last)",
                                    path, scan.repeated.front().key));
    // Neither copied nor dumped whole: both recurse once per level of nesting, and a file of a
    // few hundred thousand '[' would overflow the stack (parsing and destroying do not recurse).
    const nlohmann::json* found = &json;
    if (json.is_object()) {
        const auto it = json.find("problems");
        found = it == json.end() ? nullptr : &*it;
    }
    if (found == nullptr || !found->is_array())
        throw FileError(fmt::format("tileops-tune: {}: expected a list \"problems\"", path));
    const nlohmann::json& list = *found;
    // Else every command would ask for problems as if no --workload had been given.
    if (list.empty()) throw FileError(fmt::format("tileops-tune: {}: \"problems\" lists no problem", path));
    std::vector<detail::ProblemSpec> problems;
    for (size_t i = 0; i < list.size(); ++i) {
        const auto& item = list[i];
        auto field = [&](const char* name) -> const nlohmann::json& {
            if (!item.is_object() || !item.contains(name))
                throw FileError(fmt::format("tileops-tune: {}: problems[{}] has no \"{}\"", path, i, name));
            return item[name];
        };
        detail::ProblemSpec spec;
        try {
            spec.op = field("op").get<std::string>();
            // Each extent an exact integer >= 1: 16384.9, true or 1e30 are refused, not converted.
            const nlohmann::json& shape = field("shape");
            if (!shape.is_array() || shape.empty())
                throw FileError(fmt::format("tileops-tune: {}: problems[{}]: \"shape\" must be a list of integers, got {}",
                                            path, i, shown(shape)));
            for (const nlohmann::json& extent : shape) {
                const bool whole = extent.is_number_unsigned()
                                       ? extent.get<unsigned long long>() <= static_cast<unsigned long long>(LLONG_MAX)
                                       : extent.is_number_integer();
                if (!whole || extent.get<long long>() < 1)
                    throw FileError(fmt::format("tileops-tune: {}: problems[{}]: shape extent {} is not an integer >= 1",
                                                path, i, shown(extent)));
                spec.shape.push_back(extent.get<long long>());
            }
            spec.dtype = field("dtype").get<std::string>();
            spec.flags = item.value("flags", std::string());
            // Printed in every message about the problem: no control characters, which could drive
            // the terminal (an escape sequence starts with one).
            for (const auto& [name, value] : {std::pair{"op", &spec.op}, {"dtype", &spec.dtype}, {"flags", &spec.flags}})
                if (util::first_control_character(*value) >= 0)
                    throw FileError(fmt::format("tileops-tune: {}: problems[{}]: \"{}\" {:?} holds a control character",
                                                path, i, name, value->substr(0, 80)));
        } catch (const nlohmann::json::exception& e) {
            throw FileError(fmt::format("tileops-tune: {}: problems[{}]: {}", path, i, e.what()));
        }
        // Checked here, where the file and the problem's place in it are known: the op's own
        // message ("unknown op", "rows x cols overflows") does not say which file or problem.
        try {
            detail::make_op(spec);
        } catch (const Error& e) {
            throw FileError(fmt::format("tileops-tune: {}: problems[{}] ({}): {}", path, i, describe(spec), e.what()));
        }
        problems.push_back(std::move(spec));
    }
    return problems;
}

std::vector<detail::ProblemSpec> problems_from(const cxxopts::ParseResult& args) {
    std::vector<detail::ProblemSpec> problems;
    if (args.count("workload")) {
        std::set<std::string> seen;  // workloads may overlap (one a subset of another)
        for (const std::string& path : args["workload"].as<std::vector<std::string>>()) {
            require_input_file(path);
            for (detail::ProblemSpec& spec : load_workload(path))
                if (seen.insert(describe(spec)).second) problems.push_back(std::move(spec));
        }
    }
    if (args.count("op")) {
        if (!args.count("shape")) throw InvalidArgument("tileops-tune: --op needs --shape (e.g. --shape 8192x4096)");
        problems.push_back({args["op"].as<std::string>(), detail::parse_shape(args["shape"].as<std::string>()),
                            args["dtype"].as<std::string>(), args["flags"].as<std::string>()});
        detail::make_op(problems.back());  // validated up front, as load_workload does a file's
    }
    return problems;
}

std::string describe(const detail::ProblemSpec& spec) {
    std::string text = fmt::format("{} {} {}", spec.op, fmt::join(spec.shape, "x"), spec.dtype);
    if (!spec.flags.empty()) text += " [" + spec.flags + "]";
    return text;
}

}  // namespace tileops::cli
