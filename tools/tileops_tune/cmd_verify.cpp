// tileops-tune verify: re-times a database's entries on this GPU and reports the drift from the
// times stored; exits 1 when an entry drifted beyond --max-drift or failed to run.
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/operand_buffers.hpp"
#include "autotune/timing.hpp"
#include "core/op_model.hpp"
#include "ops/registry.hpp"
#include "runtime/op_state.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/tileops.hpp"
#include "tileops_tune/command_runner.hpp"
#include "tileops_tune/commands.hpp"
#include "tileops_tune/output.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "tuning/op_config.hpp"

namespace tileops::cli {

int cmd_verify(int argc, char** argv) {
    return run_command(
        "verify", "Re-time a tuning database's entries for this GPU's arch and report drift.", argc, argv,
        [](cxxopts::Options& options) {
            options.add_options()("db", "the database file", cxxopts::value<std::string>())(
                "max-drift", "fail when an entry is slower than stored by more than this fraction",
                cxxopts::value<double>()->default_value("0.10"))(
                "repeats", "timed runs per entry", cxxopts::value<int>()->default_value("30"));
            options.parse_positional({"db"});
            options.positional_help("DB.json");
            add_filter_options(options);
        },
        [](const cxxopts::ParseResult& args) {
            check_filters(args);
            TuningDb db = TuningDb::load(input_file(args, "db", "the database file"));
            Runtime runtime;
            const DeviceInfo& device = runtime.device();
            detail::RuntimeImpl& impl = runtime.impl();
            const double max_drift = args["max-drift"].as<double>();
            tuning::KernelTimer timer(device);
            std::vector<std::vector<std::string>> rows;
            nlohmann::json out = nlohmann::json::array();
            int bad = 0;
            for (const TuningEntry& e : db.entries()) {
                if (e.key.arch != device.arch() || !matches_filters(e, args)) continue;
                nlohmann::json row = {{"entry", e.key.to_string()}, {"stored_us", e.median_us}};
                try {
                    auto op = detail::make_op({e.key.op, e.key.shape, e.key.dtype, e.key.flags});
                    const detail::OpModel& model = op->model();
                    if (tuning::kernel_template_hash(model, e.config, device) != e.key.template_hash)
                        throw Error(fmt::format("stale: {}", tuning::kStaleTemplateReason));
                    tuning::OperandBuffers buffers(model, 1);
                    const int vec = op->vector_width(buffers.inputs(), buffers.outputs());
                    detail::ResolvedLaunch launch = impl.resolve_config(model, e.config, vec);
                    tuning::TimingStats stats = timer.time(
                        [&] { op->launch_with(launch, buffers.inputs(), buffers.outputs(), nullptr); }, 3,
                        args["repeats"].as<int>());
                    const double drift = stats.median_us / e.median_us - 1.0;
                    row["measured_us"] = stats.median_us;
                    row["drift"] = drift;
                    const bool too_slow = drift > max_drift;
                    bad += too_slow;
                    rows.push_back({e.key.to_string(), fmt::format("{:.2f}", e.median_us), fmt::format("{:.2f}", stats.median_us),
                                    fmt::format("{:+.1f}%", 100 * drift), too_slow ? "DRIFT" : "ok"});
                } catch (const std::exception& ex) {
                    ++bad;
                    row["error"] = ex.what();
                    rows.push_back({e.key.to_string(), fmt::format("{:.2f}", e.median_us), "-", "-", ex.what()});
                }
                out.push_back(row);
            }
            if (args.count("json"))
                fmt::print("{}\n", out.dump(2));
            else
                print_table({"entry", "stored us", "now us", "drift", "status"}, rows);
            return bad == 0 ? 0 : 1;
        });
}
}  // namespace tileops::cli
