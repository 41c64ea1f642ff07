// The worker side of tune_worker.hpp: one GPU, one problem at a time, answers on stdout.

#include <signal.h>
#include <sys/prctl.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autotune/candidate_bench.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "jit/compiler.hpp"
#include "ops/registry.hpp"
#include "tileops/error.hpp"
#include "tileops/runtime.hpp"
#include "tileops_tune/tune_worker.hpp"
#include "util/file_util.hpp"

namespace tileops::cli {
namespace {

using nlohmann::json;

void answer(const json& line) {
    std::fputs((line.dump() + "\n").c_str(), stdout);
    std::fflush(stdout);
}

// The faulty kernels of the test hook: a write far past any allocation (an illegal address), a
// trap, and a loop on a flag that stays 0 (volatile, so it is not optimized away).
constexpr const char* kFaultSource = R"(
extern "C" __global__ void tileops_test_fault(int kind, volatile int* flag) {
    if (kind == 0) flag[1ll << 36] = 1;
    if (kind == 1) __trap();
    if (kind == 2) while (flag[0] == 0) {}
}
)";

// TILEOPS_TUNE_TEST_FAULTS: candidate index -> fault kind (0 oob, 1 trap, 2 hang).
std::map<size_t, int> test_faults() {
    std::map<size_t, int> faults;
    const std::optional<std::string> text = util::env("TILEOPS_TUNE_TEST_FAULTS");
    if (!text) return faults;
    const std::map<std::string, int> kinds = {{"oob", 0}, {"trap", 1}, {"hang", 2}};
    size_t start = 0;
    while (start < text->size()) {
        size_t comma = text->find(',', start);
        if (comma == std::string::npos) comma = text->size();
        const std::string item = text->substr(start, comma - start);
        const size_t colon = item.find(':');
        if (colon == std::string::npos || colon == 0 || kinds.count(item.substr(colon + 1)) == 0 ||
            item.find_first_not_of("0123456789") != colon)
            throw InvalidArgument(fmt::format("TILEOPS_TUNE_TEST_FAULTS: '{}' is not INDEX:oob|trap|hang", item));
        faults[std::stoul(item.substr(0, colon))] = kinds.at(item.substr(colon + 1));
        start = comma + 1;
    }
    return faults;
}

// Runs fault `kind` and waits for it: throws the DriverError it causes (or never returns).
[[noreturn]] void run_fault(const DeviceInfo& device, int kind) {
    jit::CompileRequest request;
    request.source = kFaultSource;
    request.source_name = "tileops_test_fault.cu";
    request.name_expressions = {"tileops_test_fault"};
    request.arch = device.arch();
    const jit::CompileResult compiled = jit::compile(request);
    cuda::Module module(compiled.cubin);
    const auto& cu = cuda::driver();
    CUfunction function = nullptr;
    TILEOPS_CU_CHECK(cu.cuModuleGetFunction(&function, module.get(), compiled.lowered_names.at("tileops_test_fault").c_str()));
    cuda::DeviceBuffer flag(sizeof(int));
    flag.fill_bytes(0);
    CUdeviceptr flag_pointer = flag.get();
    void* args[] = {&kind, &flag_pointer};
    TILEOPS_CU_CHECK(cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
    TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
    throw Error("the test fault kernel returned");
}

class Worker {
public:
    explicit Worker(int device) : faults_(test_faults()) {
        RuntimeOptions options;
        options.device = device;
        runtime_ = std::make_unique<Runtime>(options);
    }

    const DeviceInfo& device() const { return runtime_->device(); }

    json handle(const json& request) {
        if (request.contains("problem")) {
            bench_.reset();
            detail::ProblemSpec spec;
            const json& p = request.at("problem");
            spec.op = p.at("op").get<std::string>();
            spec.shape = p.at("shape").get<std::vector<long long>>();
            spec.dtype = p.at("dtype").get<std::string>();
            spec.flags = p.at("flags").get<std::string>();
            op_ = detail::make_op(spec);
            const tuning::LengthSpread lengths = tuning::parse_length_spread(request.value("lengths", std::string("uniform")));
            bench_ = std::make_unique<tuning::CandidateBench>(*runtime_, *op_, request.at("seed").get<uint64_t>(), lengths);
            return {{"vector_width", bench_->vector_width()}, {"bytes_moved", bench_->bytes_moved()}};
        }
        if (!bench_) throw InvalidArgument("no problem set");
        if (request.contains("measure")) {
            const size_t index = request.at("index").get<size_t>();
            if (auto fault = faults_.find(index); fault != faults_.end()) run_fault(device(), fault->second);
            const tuning::Measurement m = bench_->measure(index, request.at("measure").get<Config>(),
                                                          request.at("warmup").get<int>(), request.at("repeats").get<int>());
            if (!m.ok) return {{"ok", false}, {"failure", m.failure}};
            return {{"ok", true}, {"median_us", m.median_us}, {"spread_us", m.spread_us}};
        }
        if (request.contains("retime"))
            return {{"samples", bench_->retime(request.at("retime").get<std::vector<Config>>(), request.at("rounds").get<int>())}};
        throw InvalidArgument(fmt::format("unknown request {}", request.dump()));
    }

private:
    std::map<size_t, int> faults_;
    std::unique_ptr<Runtime> runtime_;
    std::unique_ptr<Op> op_;
    std::unique_ptr<tuning::CandidateBench> bench_;
};

}  // namespace

int cmd_tune_worker(int argc, char** argv) {
    // Killed with the tune that started it, even while a candidate hangs on the GPU.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::unique_ptr<Worker> worker;
    try {
        if (argc != 3 || std::string(argv[1]) != "--device" || std::string(argv[2]).find_first_not_of("0123456789") != std::string::npos)
            throw InvalidArgument("usage: tileops-tune tune-worker --device N (run by tileops-tune tune)");
        worker = std::make_unique<Worker>(std::stoi(argv[2]));
    } catch (const std::exception& e) {
        answer({{"error", e.what()}});
        return 1;
    }
    answer({{"ready", true}});
    std::string line;
    while (std::getline(std::cin, line)) {
        try {
            answer(worker->handle(json::parse(line)));
        } catch (const DriverError& e) {
            // What ran may have left the context unusable: say so and let the parent start anew.
            const bool lost = tuning::context_is_lost(e.status()) ||
                              cuda::driver().cuCtxSynchronize() != CUDA_SUCCESS;
            answer({{"ok", false}, {"failure", fmt::format("launch: {}", e.what())}, {"context_lost", lost}});
            if (lost) return 3;
        } catch (const std::exception& e) {
            answer({{"error", e.what()}});
        }
    }
    return 0;
}

}  // namespace tileops::cli
