// tileops-tune rekey: gives every entry of a database the content hash of the kernel template its
// config selects in this build. For a change that leaves the compiled kernels as they were (files
// moved, a refactor): prove that first with tools/compare_kernel_caches.py, which compares the
// cubins of two caches warmed from the same database before and after; a re-keyed entry then keeps
// its measured speed instead of being re-tuned.
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ops/registry.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tuning/op_config.hpp"
#include "util/file_util.hpp"

namespace tileops::cli {

int cmd_rekey(int argc, char** argv) {
    return run_command(
        "rekey",
        "Re-key a database's entries to the kernel templates of this build (only after proving the kernels "
        "unchanged with tools/compare_kernel_caches.py).",
        argc, argv,
        [](cxxopts::Options& options) {
            options.add_options()("o,output", "the re-keyed database to write", cxxopts::value<std::string>())(
                "db", "the database to re-key", cxxopts::value<std::string>());
            options.parse_positional({"db"});
            options.positional_help("DB.json");
        },
        [](const cxxopts::ParseResult& args) {
            if (!args.count("db")) throw InvalidArgument("give the database to re-key");
            if (!args.count("output")) throw InvalidArgument("give the output file with -o");
            const TuningDb db = TuningDb::load(args["db"].as<std::string>());
            if (!db.rejected().empty())
                throw FileError(fmt::format("{} holds {} malformed entries: fix them first",
                                            args["db"].as<std::string>(), db.rejected_count()));
            TuningDb out;
            out.meta() = db.meta();
            int changed = 0;
            nlohmann::json failed = nlohmann::json::array();
            for (TuningEntry entry : db.entries()) {
                try {
                    const auto op = detail::make_op({entry.key.op, entry.key.shape, entry.key.dtype, entry.key.flags});
                    const DeviceInfo device = DeviceInfo::for_arch(entry.key.arch);
                    if (auto why = op->model().invalid_reason(entry.config, device))
                        throw InvalidArgument(fmt::format("config invalid: {}", *why));
                    const std::string hash = tuning::kernel_template_hash(op->model(), entry.config, device);
                    changed += hash != entry.key.template_hash;
                    entry.key.template_hash = hash;
                } catch (const std::exception& e) {
                    failed.push_back({{"entry", entry.key.to_string()}, {"why", e.what()}});
                    if (!args.count("json")) fmt::print(stderr, "kept as it was: {}: {}\n", entry.key.to_string(), e.what());
                }
                out.upsert(std::move(entry));
            }
            const std::string output = args["output"].as<std::string>();
            util::write_file_atomic(output, out.to_json());
            if (args.count("json"))
                fmt::print("{}\n", nlohmann::json({{"output", output},
                                                   {"entries", out.entries().size()},
                                                   {"rekeyed", changed},
                                                   {"failed", failed}})
                                       .dump(2));
            else
                fmt::print("{} entries written to {}: {} re-keyed, {} could not be\n", out.entries().size(), output,
                           changed, failed.size());
            return failed.empty() ? 0 : 1;
        });
}

}  // namespace tileops::cli
