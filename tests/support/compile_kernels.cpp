#include "support/compile_kernels.hpp"

#include <algorithm>
#include <future>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "jit/template_registry.hpp"
#include "jit/compiler.hpp"
#include "support/test_support.hpp"

namespace tileops::test {

void add_kernels(KernelsByFile& kernels, const detail::OpModel& model, const Config& config, int vec,
                 const DeviceInfo& device) {
    const detail::LaunchPlan plan = model.plan(config, vec, device);
    for (const std::string& name : plan.name_expressions()) kernels[plan.template_file].insert(name);
}

namespace {

// Per kernel (mangled name) of a ptxas -v log: the spill stores of its "Function properties"
// block, the static shared memory of the "Used ..." line after it (absent where there is none),
// and whether a "Potential Performance Loss: wgmma ... serialized" line names it.
std::map<std::string, PtxasReport> parse_ptxas_log(const std::string& log) {
    std::map<std::string, PtxasReport> reports;
    const std::regex properties(R"(Function properties for (\S+)\s*\n[^\n]*?(\d+) bytes spill stores)");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), properties); it != std::sregex_iterator(); ++it)
        reports[(*it)[1]].spill_bytes = std::stoi((*it)[2]);
    const std::regex usage(R"(Function properties for (\S+)\s*\n[^\n]*\n[^\n]*Used \d+ registers[^\n]*?(\d+) bytes smem)");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), usage); it != std::sregex_iterator(); ++it)
        reports[(*it)[1]].static_shared_bytes = std::stoi((*it)[2]);
    // C7520 and its kin ("wgmma.mma_async instructions are serialized due to ...").
    const std::regex serialized(R"(Potential Performance Loss: wgmma[^\n]*in the function '([^']+)')");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), serialized); it != std::sregex_iterator(); ++it)
        reports[(*it)[1]].wgmma_serialized = true;
    return reports;
}

std::map<std::string, PtxasReport> compile_jobs(const KernelsByFile& kernels, const std::string& arch, bool report) {
    const unsigned workers = std::max(2u, std::thread::hardware_concurrency());
    const Shard share = test_shard("TILEOPS_TEST_COMPILE_SHARD");
    std::vector<std::pair<std::string, std::vector<std::string>>> jobs;
    for (const auto& [file, all_names] : kernels) {
        const std::vector<std::string> names =
            this_shard(std::vector<std::string>(all_names.begin(), all_names.end()), share);
        const size_t per_job = (names.size() + workers - 1) / workers;
        std::vector<std::string> chunk;
        for (const std::string& name : names) {
            chunk.push_back(name);
            if (chunk.size() == per_job) jobs.emplace_back(file, std::move(chunk)), chunk.clear();
        }
        if (!chunk.empty()) jobs.emplace_back(file, std::move(chunk));
    }
    std::vector<std::future<jit::CompileResult>> results;
    for (const auto& [file, names] : jobs)
        results.push_back(std::async(std::launch::async, [&, file = file, names = names] {
            jit::CompileRequest request = jit::compile_request(file, names, arch);
            if (report) request.extra_options.push_back("--ptxas-options=-v");
            return jit::compile(request);
        }));
    std::map<std::string, PtxasReport> by_name;
    std::set<std::string> names;  // a side kernel shared by two template files compiles under each
    for (size_t i = 0; i < jobs.size(); ++i) {
        INFO(jobs[i].first << " for " << arch << ": " << jobs[i].second.size() << " kernels, first "
                           << jobs[i].second.front());
        jit::CompileResult result;
        REQUIRE_NOTHROW(result = results[i].get());
        CHECK(result.cubin.size() > 0);
        CHECK(result.lowered_names.size() == jobs[i].second.size());
        names.insert(jobs[i].second.begin(), jobs[i].second.end());
        if (!report) continue;
        const std::map<std::string, PtxasReport> by_symbol = parse_ptxas_log(result.log);
        for (const auto& [name, symbol] : result.lowered_names) {
            const auto found = by_symbol.find(symbol);
            INFO(name << " (" << symbol << "): ptxas' report names it");
            CHECK(found != by_symbol.end());
            by_name[name] = found == by_symbol.end() ? PtxasReport{} : found->second;
        }
    }
    if (report) CHECK(by_name.size() == names.size());  // every name compiled has its report
    return by_name;
}

}  // namespace

std::map<std::string, PtxasReport> compile_all_with_report(const KernelsByFile& kernels, const std::string& arch) {
    return compile_jobs(kernels, arch, true);
}

void compile_all(const KernelsByFile& kernels, const std::string& arch) { compile_jobs(kernels, arch, false); }

}  // namespace tileops::test
