#include "tileops_tune/kernel_set.hpp"

#include <atomic>
#include <mutex>

#include <fmt/format.h>

#include "jit/compile_order.hpp"
#include "ops/registry.hpp"
#include "tileops/error.hpp"
#include "tileops/tuning_db.hpp"
#include "tileops_tune/output.hpp"
#include "tileops_tune/resolver_setup.hpp"
#include "tuning/op_config.hpp"

namespace tileops::cli {

void add_kernels(const detail::OpModel& model, const Config& config, const DeviceInfo& device, std::set<KernelName>& out) {
    for (int width : model.vector_widths(config)) {
        detail::LaunchPlan plan = model.plan(config, width, device);
        for (const std::string& name : plan.name_expressions()) out.insert({plan.template_file, name});
    }
}

DatabaseKernels database_kernels(const std::vector<std::string>& dbs, const DeviceInfo& device) {
    DatabaseKernels out;
    const std::string arch = device.arch();
    for (const std::string& path : dbs) {
        TuningDb db = TuningDb::load(path);
        for (const TuningEntry& entry : db.entries()) {
            if (entry.key.arch != arch) {
                ++out.other_arch;
                out.other_archs.insert(entry.key.arch);
                continue;
            }
            // An entry this library cannot build (an unknown op, a shape of the wrong rank, a
            // config it refuses) is named, while the others still count.
            try {
                auto op = detail::make_op({entry.key.op, entry.key.shape, entry.key.dtype, entry.key.flags});
                if (auto reason = op->model().invalid_reason(entry.config, device)) throw InvalidArgument(*reason);
                add_kernels(op->model(), entry.config, device, out.kernels);
                ++out.entries;
            } catch (const std::exception& e) {
                out.bad_entries.push_back(fmt::format("{}: {}: {}", path, entry.key.to_string(), e.what()));
            }
        }
    }
    return out;
}

void add_problem_kernels(const std::vector<detail::ProblemSpec>& problems, const std::vector<std::string>& dbs,
                         const DeviceInfo& device, bool search_space, std::set<KernelName>& out) {
    if (problems.empty()) return;
    tuning::ConfigResolver resolver = make_resolver(device.arch(), dbs);
    for (const auto& spec : problems) {
        auto op = detail::make_op(spec);
        const detail::OpModel& model = op->model();
        add_kernels(model, tuning::choose_config(resolver, model, device).config, device, out);
        if (search_space)
            for (const Config& config : model.search_space(device)) add_kernels(model, config, device, out);
    }
}

CompileOutcome build_kernels(jit::KernelBuilder& builder, const std::vector<KernelName>& kernels, const std::string& arch,
                             unsigned jobs, bool quiet) {
    CompileOutcome outcome;
    outcome.failures.resize(kernels.size());
    std::atomic<size_t> done{0}, compiled{0};
    Progress progress(Progress::for_stderr(quiet));
    std::mutex progress_mutex;
    // The costliest compiles first, so that no long one starts when the other cores run dry.
    const auto kernel_ref = [&](size_t i) { return jit::KernelRef{kernels[i].template_file, kernels[i].name_expression}; };
    jit::for_each_costliest_first(kernels.size(), jobs, kernel_ref, [&](size_t i) {
        try {
            if (builder.get(kernels[i].template_file, kernels[i].name_expression, arch).compiled) ++compiled;
        } catch (const std::exception& e) {
            outcome.failures[i] = e.what();
        }
        std::lock_guard lock(progress_mutex);
        const size_t finished = ++done;
        progress.update(fmt::format("{}/{} kernels for {}; last {}", finished, kernels.size(), arch,
                                    kernels[i].name_expression),
                        double(finished) / kernels.size());
    });
    progress.done();
    outcome.compiled = compiled.load();
    return outcome;
}

std::string missing_kernels_note(const jit::DiskCache& cache, size_t missing, size_t total, const char* after) {
    if (cache.had_write_failure())
        return fmt::format("{} of the {} kernels are not in the cache {} {}: it cannot be written (the warning above "
                           "says why)",
                           missing, total, cache.directory().string(), after);
    return fmt::format("{} of the {} kernels are not in the cache {}: its bound of {} MB (TILEOPS_CACHE_MAX_MB) is "
                       "smaller than they need; raise it",
                       missing, total, after, cache.max_bytes() >> 20);
}

}  // namespace tileops::cli
